"""The generated static-baseline rules: validated and unit-tested by the real ``promtool``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from trainguard.detect.baselines import DEFAULT_STATIC_RULES, StaticRule
from trainguard.errors import ConfigError
from trainguard.watch.rules import (
    NODE_RECORD,
    STATIC_ALERT_NAME,
    dump_yaml,
    static_rule_file,
    violations_record,
    write_rule_file,
)


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def test_every_rule_gets_a_violation_record_and_an_alert() -> None:
    rules = static_rule_file()["groups"][0]["rules"]
    records = {r["record"] for r in rules if "record" in r}
    alerts = [r for r in rules if "alert" in r]
    assert {violations_record(r) for r in DEFAULT_STATIC_RULES} <= records
    assert NODE_RECORD in records
    assert [a["labels"]["rule"] for a in alerts] == [r.name for r in DEFAULT_STATIC_RULES]
    assert all(a["alert"] == STATIC_ALERT_NAME and a["labels"]["severity"] == "hard"
               and a["for"] == "0s" and a["keep_firing_for"] == "300s" for a in alerts)


def test_rules_follow_the_definitions_not_a_copy() -> None:
    custom = (StaticRule("hot", "SM_CLOCK", "gt", 1500.0),)
    rules = static_rule_file(custom, node_label="node", gap_s=None, interval="30s")
    group = rules["groups"][0]
    assert group["interval"] == "30s"
    exprs = [r["expr"] for r in group["rules"]]
    assert any("SM_CLOCK" in e and "> 1500.0" in e and "count by (node)" in e for e in exprs)
    assert all("keep_firing_for" not in r for r in group["rules"])


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"node_label": "bad-label"}, "rules.node_label"),
    ({"rate_window": "5 minutes"}, "rules.rate_window"),
    ({"interval": "1x"}, "rules.interval"),
    ({"gap_s": -1.0}, "rules.gap_s"),
    ({"rules": (StaticRule("a-b", "X", "gt"),)}, "usable in a metric name"),
    ({"rules": (StaticRule("a", "X", "gt"), StaticRule("a", "Y", "gt"))}, "unique"),
])
def test_bad_settings_name_the_key(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        static_rule_file(**kwargs)


def test_dump_is_json(tmp_path: Path) -> None:
    path = write_rule_file(tmp_path / "rules.yml")
    assert json.loads(path.read_text()) == static_rule_file()
    assert dump_yaml(static_rule_file()).endswith("\n")


def test_promtool_check_rules(tmp_path: Path, promtool: str) -> None:
    path = write_rule_file(tmp_path / "trainguard-static.rules.yml")
    proc = _run([promtool, "check", "rules", str(path)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(static_rule_file()["groups"][0]["rules"])
    assert f"SUCCESS: {n} rules found" in proc.stdout


# --- promtool test rules: one violating and one healthy node per rule -----------------------
# Samples every minute; the bad node violates at minutes 3, 4 and 5 only.

def _series(rule: StaticRule, bad: bool) -> dict[str, str]:
    # Lower-case names for odd-numbered rules: the baseline matches case-insensitively.
    i = DEFAULT_STATIC_RULES.index(rule)
    name = f"DCGM_FI_DEV_{rule.pattern}_TOTAL"
    name = name.lower() if i % 2 else name
    node = f"{'bad' if bad else 'ok'}-{rule.name}"
    thr = rule.threshold
    if rule.op == "rate_gt":  # a counter: +100 per minute at minutes 3..5, flat otherwise
        values = [1000.0] * 3 + [1100.0, 1200.0, 1300.0] + [1300.0] * 15
        if not bad:
            values = [1000.0] * 21
    else:
        step = 79.0 if rule.op == "ne" else 1.0
        values = [thr] * 3 + [thr + step] * 3 + [thr] * 15
        if not bad:
            values = [thr] * 21
    return {"series": f'{name}{{Hostname="{node}",gpu="0"}}',
            "values": " ".join(f"{v:g}" for v in values)}


def _firing(rules: tuple[StaticRule, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in rules:
        alert: dict[str, Any] = {"exp_labels": {"Hostname": f"bad-{r.name}", "rule": r.name,
                                                "severity": "hard", "source": "trainguard"}}
        # promtool compares annotations too: the template rendered, one violating series
        summary = next(a["annotations"]["summary"] for a in static_rule_file()["groups"][0]["rules"]
                       if a.get("labels", {}).get("rule") == r.name)
        alert["exp_annotations"] = {"summary": summary.replace(
            '{{ index $labels "Hostname" }}', f"bad-{r.name}").replace("{{ $value }}", "1")}
        out.append(alert)
    return out


def _unit_tests(rule_file: str) -> dict[str, Any]:
    rules = DEFAULT_STATIC_RULES
    rates = tuple(r for r in rules if r.op == "rate_gt")
    cases = [
        {"eval_time": "2m", "alertname": STATIC_ALERT_NAME, "exp_alerts": []},
        # fires at the first violating evaluation, only on the bad nodes
        {"eval_time": "4m", "alertname": STATIC_ALERT_NAME,
         "exp_alerts": _firing(rules)},
        # levels are back at 6m and rates at 10m: keep_firing_for holds the episode 5 minutes
        {"eval_time": "9m", "alertname": STATIC_ALERT_NAME, "exp_alerts": _firing(rules)},
        {"eval_time": "12m", "alertname": STATIC_ALERT_NAME, "exp_alerts": _firing(rates)},
        {"eval_time": "16m", "alertname": STATIC_ALERT_NAME, "exp_alerts": []},
    ]
    node_sum = {"expr": NODE_RECORD, "eval_time": "4m",
                "exp_samples": [{"labels": f'{NODE_RECORD}{{Hostname="bad-{r.name}"}}', "value": 1}
                                for r in rules]}
    return {"rule_files": [rule_file], "evaluation_interval": "1m",
            "tests": [{"interval": "1m",
                       "input_series": [_series(r, bad) for r in rules for bad in (True, False)],
                       "alert_rule_test": cases, "promql_expr_test": [node_sum]}]}


def test_promtool_test_rules(tmp_path: Path, promtool: str) -> None:
    write_rule_file(tmp_path / "static.rules.yml")
    (tmp_path / "static.test.yml").write_text(json.dumps(_unit_tests("static.rules.yml")))
    proc = _run([promtool, "test", "rules", "static.test.yml"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_test_rules_catches_a_wrong_expectation(tmp_path: Path, promtool: str) -> None:
    # The harness itself must be able to fail: expect the healthy node to fire.
    write_rule_file(tmp_path / "static.rules.yml")
    tests = _unit_tests("static.rules.yml")
    case = tests["tests"][0]["alert_rule_test"][1]
    case["exp_alerts"][0]["exp_labels"]["Hostname"] = "ok-xid"
    (tmp_path / "static.test.yml").write_text(json.dumps(tests))
    proc = _run([promtool, "test", "rules", "static.test.yml"], tmp_path)
    assert proc.returncode != 0
