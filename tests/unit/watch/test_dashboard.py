"""The shipped Grafana dashboard: valid, self-consistent, and its PromQL is real PromQL over the
metrics `trainguard watch` exports (checked by the real ``promtool``)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from trainguard.watch import names

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "trainguard-dashboard.json"
EXPORTED = {getattr(names, n) for n in names.__all__ if getattr(names, n).startswith(names.PREFIX)
            and n not in ("PREFIX", "SOURCE")}
# Grafana variables in expressions, as Grafana would substitute them for "All".
VARIABLES = {"$node": ".*"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows hold their panels
    return out


def _exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in _panels(dash) for t in p.get("targets", [])]


def _substitute(expr: str) -> str:
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (bare identifiers that are not functions,
    keywords, label names or durations)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges and subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    found = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        if m.group(2) is None and m.group(1).lower() not in _KEYWORDS:
            found.add(m.group(1))
    for m in re.finditer(r'__name__\s*=\s*"([^"]+)"', expr):
        found.add(m.group(1))
    return found


def test_metric_names_parser() -> None:
    assert metric_names('sum by (node) (rate(a_total{x="y b"}[5m])) / on(node) b') == {"a_total",
                                                                                       "b"}
    assert metric_names("time() - max(c)") == {"c"}


def test_dashboard_basics(dashboard: dict[str, Any]) -> None:
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and dashboard["title"]
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    ids = [p["id"] for p in _panels(dashboard)]
    assert len(ids) == len(set(ids))
    for p in _panels(dashboard):
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]


def test_required_panels(dashboard: dict[str, Any]) -> None:
    by_type: dict[str, set[str]] = {}
    for p in _panels(dashboard):
        for t in p.get("targets", []):
            by_type.setdefault(p["type"], set()).update(metric_names(t["expr"]))
    assert names.NODE_RISK in by_type["heatmap"]
    assert names.NODE_ALERT_ACTIVE in by_type["state-timeline"] | by_type["table"]
    used = set().union(*by_type.values())
    for required in (names.ALERTS_TOTAL, names.SCRAPE_LAG, names.SCRAPE_LAST_SUCCESS,
                     names.SCRAPE_ERRORS_TOTAL, names.ACTIONS_TOTAL, names.ETTR):
        assert required in used, required


def test_expressions_use_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    for title, expr in _exprs(dashboard):
        found = metric_names(expr)
        assert found, f"{title}: no metric in {expr!r}"
        assert found <= EXPORTED, f"{title}: {sorted(found - EXPORTED)} not in watch/names.py"
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            assert re.search(r"label_values\((\w+)", var["definition"]).group(1) in EXPORTED


def test_expressions_parse_with_promtool(dashboard: dict[str, Any], promtool: str,
                                         tmp_path: Path) -> None:
    # Each expression as a recording rule: `promtool check rules` parses it with the real parser.
    rules = [{"record": f"dashboard:expr_{i}", "expr": _substitute(expr)}
             for i, (_, expr) in enumerate(_exprs(dashboard))]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout


def test_promtool_rejects_a_broken_expression(promtool: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "g", "rules": [
        {"record": "x:y", "expr": "sum by (node (trainguard_node_risk_score)"}]}]}))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode != 0
