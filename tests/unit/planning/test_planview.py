"""The planning report's JSON dict, terminal tables and HTML section carry its figures."""

from __future__ import annotations

import json
from typing import Any

import pytest
from planning_traces import YEAR_S, bursty_outages, fault_events, plan_report, poisson_outages
from rich.console import Console

from trainguard.cli.planview import planning_html, planning_json, print_planning, why
from trainguard.fleet import FleetWindow
from trainguard.planning import PlanningReport


@pytest.fixture(scope="module")
def calm() -> PlanningReport:
    events = fault_events(poisson_outages(200, 40 * 86400.0, 12 * 3600.0, YEAR_S, 21))
    return plan_report(events, FleetWindow(0.0, YEAR_S, 200), (8, 64, 256),
                       replays=3)


@pytest.fixture(scope="module")
def bursty() -> PlanningReport:
    events = fault_events(bursty_outages(200, 0.5, 20, 12 * 3600.0, YEAR_S, 22))
    return plan_report(events, FleetWindow(0.0, YEAR_S, 200), (8, 64), replays=3)


def _text(r: PlanningReport) -> str:
    console = Console(record=True, width=220, highlight=False)
    print_planning(console, r)
    return console.export_text()


def test_json_carries_every_size_and_is_valid_json(calm: PlanningReport) -> None:
    doc = planning_json(calm)
    json.loads(json.dumps(doc, allow_nan=False))
    assert doc["window"]["fleet_size"] == 200 and doc["fleet"]["outages"] == calm.outages
    assert [s["nodes"] for s in doc["sizes"]] == [8, 64]
    assert doc["skipped"] == [{"nodes": 256, "reason": calm.skipped[0].reason}]
    assert doc["inputs"]["spares"] is None and doc["inputs"]["interval_s"] is None
    for got, p in zip(doc["sizes"], calm.sizes, strict=True):
        assert got["spares_needed"] == {"model": p.model_spares, "replay": p.replay_spares,
                                        "answer": p.answer_spares}
        assert got["ettr"]["model"] == pytest.approx(p.model_ettr, abs=1e-4)
        assert got["ettr"]["replay"] == pytest.approx(p.replay_ettr, abs=1e-4)
        assert got["ettr"]["gap_pp"] == pytest.approx(p.ettr_gap_pp, abs=1e-4)
        assert got["interval_s"]["daly"] == pytest.approx(p.daly_s, abs=1e-3)
        assert got["wait_fraction"]["replay"] == pytest.approx(p.replay_wait, abs=1e-4)
        assert len(got["curve"]) == len(p.curve)
        assert got["answer_from"] == p.answer_from == "model"
    assert doc["assumptions"] == list(calm.assumptions) and doc["assumptions"]


def test_json_without_failures_has_null_intervals() -> None:
    r = plan_report([], FleetWindow(0.0, 86400.0 * 10, 20), (8,), replays=1)
    doc = planning_json(r)
    json.dumps(doc, allow_nan=False)
    assert doc["sizes"][0]["interval_s"]["young"] is None
    assert doc["fleet"]["node_mtbf_up_s"] is None


def test_terminal_tables_show_the_figures(calm: PlanningReport) -> None:
    text = _text(calm)
    for title in ("Planning answers", "Model vs replay", "ETTR around the optimum: 8 nodes",
                  "ETTR around the optimum: 64 nodes", "Assumptions"):
        assert title in text
    for p in calm.sizes:
        assert f"{100 * p.model_ettr:.1f}%" in text
        assert f"{p.ettr_gap_pp:+.2f}" in text
        assert f"{100 * p.replay_wait:.2f}%" in text
    assert "skipped N=256" in text
    assert "model assumptions hold" in text
    assert "no burst found" in text


def test_terminal_says_why_the_replay_answers(bursty: PlanningReport) -> None:
    text = _text(bursty)
    assert "outage starts look bursty" in text
    assert "bursty trace" in text
    for p in bursty.sizes:
        assert p.answer_from == "replay"
        assert why(bursty, p).startswith("bursty trace")
        # the trace-wide reasons are said once, not in every row
        assert bursty.burstiness.reasons[0] not in why(bursty, p)


def test_html_section_has_both_charts_with_the_figures(bursty: PlanningReport) -> None:
    go = pytest.importorskip("plotly.graph_objects", reason="the HTML section needs plotly")
    from trainguard.cli.planview import compare_figure, ettr_curve_figure

    page = planning_html(bursty)
    assert page.startswith("<section id='tg-planning'>") and page.endswith("</section>")
    assert "fig-planning-curve" in page and "fig-planning-compare" in page
    assert "<script src" not in page  # plotly.js comes from the page, once
    bars: dict[str, Any] = compare_figure(go, bursty).to_plotly_json()
    model, replayed = bars["data"]
    assert model["y"] == pytest.approx([100 * p.model_ettr for p in bursty.sizes])
    assert replayed["y"] == pytest.approx([100 * p.replay_ettr for p in bursty.sizes])
    assert replayed["error_y"]["array"] == pytest.approx(
        [100 * p.replay_ettr_spread for p in bursty.sizes])
    curves: dict[str, Any] = ettr_curve_figure(go, bursty).to_plotly_json()
    assert len(curves["data"]) == 2 * len(bursty.sizes)
    first = bursty.sizes[0]
    assert curves["data"][1]["y"] == pytest.approx([100 * c.replay_ettr for c in first.curve])
    assert curves["data"][0]["x"] == pytest.approx([c.interval_s / 3600 for c in first.curve])
    for p in bursty.sizes:
        assert f"{100 * p.replay_ettr:.1f}%" in page
