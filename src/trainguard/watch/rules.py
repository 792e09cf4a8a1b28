"""Prometheus rules for the static baseline, generated from :data:`DEFAULT_STATIC_RULES`.

The DCGM-style threshold rules the detector is compared against (:mod:`trainguard.detect.
baselines`) as a Prometheus rule file, so a site can run the same baseline live next to
`trainguard watch`. Per :class:`StaticRule`:

1. ``gt`` / ``ne``: record ``trainguard:static_<name>:violations`` = number of series per node
   whose name contains the pattern (case-insensitive, like the baseline) and whose value is over
   / different from the threshold.
2. ``rate_gt``: first record ``trainguard:static_<name>:value``, the matching counters with their
   name kept in a ``metric`` label (``rate()`` over several metric names with the same labels is
   an evaluation error in Prometheus), then count the series whose ``rate()`` over
   ``rate_window`` is over the threshold. With threshold 0 that is "increased within the window",
   the baseline's per-sample test; with a positive one it is the window's average rate (DCGM's
   own "8 PCIe replays per minute" reads that way).
3. One alert per rule, ``TrainguardStaticRule{rule=<name>, severity="hard"}`` per node, firing at
   the first violating evaluation (``for: 0s``, like the baseline's first violating sample) and
   kept firing for :data:`STATIC_GAP_S` after the last one (``keep_firing_for``, Prometheus
   >= 2.42), which is how a baseline episode ends.
4. ``trainguard:static_violations:node``: every rule's violations summed per node, for dashboards.

    >>> rf = static_rule_file()
    >>> rf["groups"][0]["rules"][0]["record"]
    'trainguard:static_xid:violations'
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainguard.detect.baselines import DEFAULT_STATIC_RULES, STATIC_GAP_S, StaticRule
from trainguard.errors import ConfigError
from trainguard.watch.names import LABEL_SEVERITY, LABEL_SOURCE, SOURCE

__all__ = [
    "GROUP_NAME",
    "RECORD_PREFIX",
    "STATIC_ALERT_NAME",
    "dump_yaml",
    "static_rule_file",
    "value_record",
    "violations_record",
    "write_rule_file",
]

GROUP_NAME = "trainguard-static-baseline"
RECORD_PREFIX = "trainguard:static_"
STATIC_ALERT_NAME = "TrainguardStaticRule"
NODE_RECORD = "trainguard:static_violations:node"
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_RULE_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def value_record(rule: StaticRule) -> str:
    return f"{RECORD_PREFIX}{rule.name}:value"


def violations_record(rule: StaticRule) -> str:
    return f"{RECORD_PREFIX}{rule.name}:violations"


def _promql_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _selector(rule: StaticRule) -> str:
    # Substring, case-insensitive, as the baseline matches; never our own recorded series.
    pattern = f"(?i).*{re.escape(rule.pattern)}.*"
    return (f"{{__name__=~{_promql_string(pattern)},"
            f"__name__!~{_promql_string(RECORD_PREFIX + '.*')}}}")


def _threshold(value: float) -> str:
    return repr(float(value))


def _rule_rules(rule: StaticRule, node_label: str, rate_window: str,
                keep_firing_for: str | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    thr = _threshold(rule.threshold)
    if rule.op == "rate_gt":
        out.append({"record": value_record(rule),
                    "expr": f'label_replace({_selector(rule)}, "metric", "$1", "__name__", '
                            f'"(.+)")'})
        cond = f"rate({value_record(rule)}[{rate_window}]) > {thr}"
        what = f"{rule.pattern} increases faster than {rule.threshold:g}/s"
    elif rule.op == "ne":
        cond = f"{_selector(rule)} != {thr}"
        what = f"{rule.pattern} != {rule.threshold:g}"
    else:
        cond = f"{_selector(rule)} > {thr}"
        what = f"{rule.pattern} > {rule.threshold:g}"
    out.append({"record": violations_record(rule),
                "expr": f"count by ({node_label}) ({cond})"})
    alert: dict[str, Any] = {
        "alert": STATIC_ALERT_NAME,
        "expr": f"{violations_record(rule)} > 0",
        "for": "0s",
        "labels": {"rule": rule.name, LABEL_SEVERITY: "hard", LABEL_SOURCE: SOURCE},
        "annotations": {
            "summary": f'{{{{ index $labels "{node_label}" }}}}: static rule {rule.name} '
                       f"({what}) on {{{{ $value }}}} series",
        },
    }
    if keep_firing_for is not None:
        alert["keep_firing_for"] = keep_firing_for
    out.append(alert)
    return out


def static_rule_file(rules: Sequence[StaticRule] = DEFAULT_STATIC_RULES, *,
                     node_label: str = "Hostname", rate_window: str = "5m",
                     gap_s: float | None = STATIC_GAP_S,
                     interval: str | None = None) -> dict[str, Any]:
    """The Prometheus rule file (one group) equivalent to :func:`static_rules` with ``rules``.

    ``node_label``: the label naming the node (dcgm-exporter: ``Hostname``). ``gap_s``: how long
    an alert keeps firing after its last violation (None: omit ``keep_firing_for``, for
    Prometheus < 2.42). ``interval``: the group's evaluation interval (None: the global one).
    """
    if not _LABEL_NAME.match(node_label):
        raise ConfigError(f"rules.node_label {node_label!r} is not a Prometheus label name")
    for d, key in ((rate_window, "rules.rate_window"), (interval, "rules.interval")):
        if d is not None and not _DURATION.match(d):
            raise ConfigError(f"{key} {d!r} is not a Prometheus duration (e.g. 5m)")
    if gap_s is not None and gap_s < 0:
        raise ConfigError("rules.gap_s must be >= 0")
    names = [r.name for r in rules]
    for name in names:
        if not _RULE_NAME.match(name):
            raise ConfigError(f"static rule {name!r}: name must be usable in a metric name")
    if len(set(names)) != len(names):
        raise ConfigError("static rule names must be unique")
    keep = None if gap_s is None else f"{round(gap_s)}s"
    body: list[dict[str, Any]] = []
    for rule in rules:
        body.extend(_rule_rules(rule, node_label, rate_window, keep))
    if rules:
        # A selector over the names, not `a or b`: `or` matches without __name__ and would keep
        # one rule per node.
        names_re = "|".join(re.escape(violations_record(r)) for r in rules)
        body.append({"record": NODE_RECORD,
                     "expr": f"sum by ({node_label}) ({{__name__=~{_promql_string(names_re)}}})"})
    group: dict[str, Any] = {"name": GROUP_NAME, "rules": body}
    if interval is not None:
        group["interval"] = interval
    return {"groups": [group]}


def dump_yaml(rule_file: dict[str, Any]) -> str:
    """The rule file as text Prometheus loads. JSON (a subset of YAML): PyYAML is not a
    dependency, and ``promtool check rules`` accepts it as it is."""
    return json.dumps(rule_file, indent=2) + "\n"


def write_rule_file(path: Path, rule_file: dict[str, Any] | None = None) -> Path:
    """Write ``rule_file`` (default: :func:`static_rule_file`) to ``path``."""
    path.write_text(dump_yaml(rule_file if rule_file is not None else static_rule_file()),
                    encoding="utf-8")
    return path
