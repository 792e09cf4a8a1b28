"""The HTML report's figures, read from the generated figure JSON: the checkpoint chart's axis,
labels on the attempts timeline, one duration format everywhere, the lead-time chart for a
predictive stop, unknown time without the SDK, and the badput rows of the summary."""

from __future__ import annotations

import math
from typing import Any

import pytest
from report_job import job

from trainguard.analytics.report import AnalyticsReport
from trainguard.durations import format_duration
from trainguard.report.summary import NO_SDK, badput_parts, summary_rows
from trainguard.store import Store

go = pytest.importorskip("plotly.graph_objects", reason="the HTML report needs plotly")
html = pytest.importorskip("trainguard.report.html")

@pytest.fixture
def report() -> AnalyticsReport:
    with Store.open(":memory:") as store:
        return job(store, gap_s=0.5)


def fig_json(fig: Any) -> dict[str, Any]:
    doc: dict[str, Any] = fig.to_plotly_json()
    return doc


@pytest.mark.parametrize("gbps", [0.4, 3.0, 150.0])
def test_checkpoint_chart_log_axis_spans_data_and_link(gbps: float) -> None:
    with Store.open(":memory:") as store:
        rep = job(store, gap_s=1.0, gbps=gbps)
    doc = fig_json(html.checkpoint_bandwidth(go, rep))
    layout = doc["layout"]
    assert layout["yaxis"]["type"] == "log"
    link = rep.checkpoint_io.bandwidth_bps / 1e9
    # every y the figure places, in data units (a shape on a log axis is in log10 units)
    placed = [float(y) for tr in doc["data"] for y in tr["y"]]
    for shape in layout.get("shapes", ()):
        if shape.get("yref", "y") == "y":
            placed += [10 ** shape["y0"], 10 ** shape["y1"]]
    low, high = min(gbps, link), max(gbps, link)
    assert all(low / 10 <= y <= high * 10 for y in placed), placed
    assert any(list(tr["y"]) == [link, link] for tr in doc["data"])  # the link is drawn


def test_timeline_labels_cause_and_decision(report: AnalyticsReport) -> None:
    doc = fig_json(html.attempt_timeline(go, report))
    labels = [t for tr in doc["data"] for t in tr["text"]]
    attempts = [a for c in report.chains for a in c.attempts]
    assert len(labels) == len(attempts)
    for a in attempts:
        if a.status == "failed":
            assert any(a.failure_category in x and a.decision in x and f"#{a.index}" in x
                       for x in labels), labels
    assert all(tr.get("textposition") for tr in doc["data"])


@pytest.mark.parametrize("gap_s", [0.012, 0.5, 95.0, 4000.0])
def test_retry_interval_reads_the_same_in_chart_and_summary(gap_s: float) -> None:
    with Store.open(":memory:") as store:
        rep = job(store, gap_s=gap_s)
    median = rep.chain_stats["all"].retry_interval_median_s
    assert median is not None
    text = format_duration(median)
    assert dict(summary_rows(rep))["median retry interval"] == text
    title = fig_json(html.retry_chains(go, rep))["layout"]["title"]["text"]
    assert f"median retry interval {text})" in title
    assert not text.startswith("0.0 ") and not text.startswith("0 ")


@pytest.mark.parametrize("foretold_s", [720.0, 870.0, 5400.0])
def test_lead_time_chart_plots_a_predictive_stop_s_lead_not_its_reaction(
        foretold_s: float) -> None:
    with Store.open(":memory:") as store:
        rep = job(store, gap_s=1.0, stop_on_alert=True, foretold_s=foretold_s)
    doc = fig_json(html.lead_times(go, rep))
    assert "predictive stop" in doc["layout"]["title"]["text"]
    (trace,) = doc["data"]
    assert "predictive stop" in trace["name"]
    axis = doc["layout"]["yaxis"]["title"]["text"]
    assert axis.startswith("lead: alert onset to failure (")
    div = {"(seconds)": 1.0, "(minutes)": 60.0, "(hours)": 3600.0}[axis[axis.index("("):]]
    assert list(trace["y"]) == [pytest.approx(foretold_s / div)]  # not the 0.1 s reaction
    assert dict(summary_rows(rep))["alert to stop (reaction)"] == format_duration(0.1) + \
        " (1 stop)"


def test_a_predictive_stop_without_a_known_failure_is_named_not_plotted() -> None:
    with Store.open(":memory:") as store:
        rep = job(store, gap_s=1.0, stop_on_alert=True)
    doc = fig_json(html.lead_times(go, rep))
    assert "predictive stop" in doc["layout"]["title"]["text"]
    assert doc["data"] == []  # no latency passed off as a lead
    texts = [a["text"] for a in doc["layout"]["annotations"]]
    assert any("node08" in t and "stopped before failure" in t for t in texts), texts


def test_waterfall_and_summary_without_sdk() -> None:
    with Store.open(":memory:") as store:
        rep = job(store, gap_s=1.0, sdk=False)
    doc = fig_json(html.goodput_waterfall(go, rep))
    assert NO_SDK in list(doc["data"][0]["x"])
    assert NO_SDK in doc["layout"]["title"]["text"]
    shown = dict(summary_rows(rep))
    assert shown["ETTR"] == NO_SDK


def test_summary_has_the_badput_breakdown(report: AnalyticsReport) -> None:
    shown = dict(summary_rows(report))
    parts = badput_parts(report.goodput)
    assert len(parts) >= 4
    for label, seconds in parts:
        key = f"badput: {label}"
        assert key in shown
        share = seconds / report.goodput.wall_s
        assert shown[key] == f"{format_duration(seconds)} ({share:.1%})"
    total = report.goodput.productive_s + sum(v for _, v in parts)
    assert math.isclose(total, report.goodput.wall_s, rel_tol=1e-9)


def test_render_html_is_one_document(report: AnalyticsReport) -> None:
    text = html.render_html(report)
    assert text.count("data-figure=") == len(html.FIGURES)
    assert "badput: startup: imports" in text
