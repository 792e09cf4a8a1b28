"""The bundled report: consistent with the parts, JSON-safe, filters."""

from __future__ import annotations

import json
import math

import pytest
from analytics_fleet import NOW, T0

from trainguard.analytics import build_report, fleet_goodput, load_runs
from trainguard.analytics.report import json_safe
from trainguard.errors import StoreError
from trainguard.store import Store


def test_report_bundles_the_parts(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    report = build_report(store, now=NOW)
    assert [r.session_id for r in report.runs] == [ids[k] for k in ("A", "B", "C", "D")]
    assert report.goodput == fleet_goodput(load_runs(store))
    assert report.chain_stats["all"].success_rate == pytest.approx(0.5)
    assert report.failures.failures == 5
    assert report.exclusions.summary.top_k_share == pytest.approx(5 / 6)
    assert report.lead_times.predicted == 2
    assert report.checkpoint_io.measured == 5
    assert report.advice is not None
    assert report.advice.inputs.write_s == pytest.approx(6.0)
    assert "n3" in [h.node for h in report.lemons]


def test_to_dict_is_json_and_rounded(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    doc = build_report(store, now=NOW).to_dict()
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text) == doc

    def floats(x: object) -> list[float]:
        if isinstance(x, float):
            return [x]
        if isinstance(x, dict):
            return [f for v in x.values() for f in floats(v)]
        if isinstance(x, list):
            return [f for v in x for f in floats(v)]
        return []

    assert all(round(f, 4) == f for f in floats(doc))
    assert doc["goodput"]["ettr"] == round(
        (4623.0 + 5800.0) / (5950.0 + 1200.0 + 10_000.0), 4)
    assert doc["chain_stats"]["manual"]["retry_interval_median_s"] == 600.0
    assert doc["exclusions"]["lorenz"][0] == [0.0, 0.0]


def test_json_safe() -> None:
    assert json_safe({"a": (1.234567, math.inf, math.nan), 2: None, "b": True}) == \
        {"a": [1.2346, None, None], "2": None, "b": True}


def test_session_filter(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    report = build_report(store, session_id=ids["A"], now=NOW)
    assert [r.session_id for r in report.runs] == [ids["A"]]
    assert report.goodput.ettr == pytest.approx(4623.0 / 5950.0)
    assert dict(report.exclusions.counts) == {"n3": 1}  # the operator's exclusions are not A's
    assert report.exclusions.summary.nodes == 5
    with pytest.raises(StoreError, match="no session with id 999"):
        build_report(store, session_id=999, now=NOW)


def test_since_filter(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    report = build_report(store, since=T0 + 20_000, now=NOW)
    assert [r.session_id for r in report.runs] == [ids["C"], ids["D"]]
    assert report.exclusions.summary.total == 0  # every exclusion predates since


def test_empty_store() -> None:
    with Store.open(":memory:") as store:
        report = build_report(store, now=0.0)
    assert report.runs == () and report.goodput.ettr is None and report.advice is None
    assert report.chain_stats["all"].chains == 0
    assert report.failures.mttf_s is None
    assert report.exclusions.lorenz == ((0.0, 0.0), (1.0, 1.0))
    json.dumps(report.to_dict(), allow_nan=False)
