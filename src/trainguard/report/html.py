"""The self-contained HTML report: plotly figures with plotly.js inlined (works offline).

Every figure draws even without data (an annotation says what is missing), so "every plot drew"
is a check a browser can make: each figure's div gets a ``main-svg`` element, and script errors
are collected into ``#tg-errors`` (hidden) for the headless check. The page's pieces are those
of :mod:`trainguard.report.page`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trainguard.analytics.leadtime import LeadTime
from trainguard.analytics.report import AnalyticsReport
from trainguard.analytics.runs import failure_info
from trainguard.durations import format_duration
from trainguard.report.page import (
    empty_figure,
    figure_div,
    html_page,
    json_island,
    kv_table,
    plotly_go,
)
from trainguard.report.summary import badput_parts, ettr_text, lead_text, summary_rows
from trainguard.store import AttemptRecord


def _unit(wall_s: float) -> tuple[str, float]:
    """Seconds, minutes or hours, whichever reads best for a run of ``wall_s``."""
    if wall_s < 600:
        return "seconds", 1.0
    if wall_s < 3 * 3600:
        return "minutes", 60.0
    return "hours", 3600.0


def goodput_waterfall(go: Any, r: AnalyticsReport) -> Any:
    g = r.goodput
    if not g.wall_s:
        return empty_figure(go, "Goodput", "no finished attempts")
    parts = [("productive", g.productive_s), *badput_parts(g)]
    unit, div = _unit(g.wall_s)
    fig = go.Figure(go.Waterfall(
        x=[p[0] for p in parts] + ["wall time"],
        y=[p[1] / div for p in parts] + [0.0],
        measure=["relative"] * len(parts) + ["total"],
        text=[f"{p[1] / max(g.wall_s, 1e-9):.1%}" for p in parts] + ["100%"]))
    fig.update_layout(title=f"Goodput: ETTR {ettr_text(g)} ({unit})", yaxis_title=unit,
                      showlegend=False)
    return fig


def _cause(a: AttemptRecord) -> str | None:
    """The failure category, or the failure's kind (``crash``, ``hang``) when it is unknown."""
    if a.failure_category not in (None, "unknown"):
        return a.failure_category
    kind = failure_info(a).get("kind")
    return f"{kind} (cause unknown)" if isinstance(kind, str) and kind else a.failure_category


def attempt_label(index: int, cause: str | None, decision: str | None, status: str) -> str:
    """The label on an attempt's bar: ``#1 gpu_hardware -> exclude_and_retry``."""
    if status == "succeeded":
        return f"#{index} succeeded"
    return f"#{index} {cause or status}" + (f" -> {decision}" if decision else "")


def attempt_timeline(go: Any, r: AnalyticsReport) -> Any:
    rows = [(c.session_id, a) for c in r.chains for a in c.attempts if a.ended is not None]
    if not rows:
        return empty_figure(go, "Attempts", "no finished attempts")
    colors = {"succeeded": "#2ca02c", "failed": "#d62728", "cancelled": "#7f7f7f"}
    fig = go.Figure()
    for status, color in colors.items():
        mine = [(s, a) for s, a in rows if a.status == status]
        if not mine:
            continue
        fig.add_trace(go.Bar(
            orientation="h", name=status, marker_color=color,
            # one row per attempt, so that every bar has room for its label
            y=[f"session {s} #{a.index}" for s, a in mine],
            base=[time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(a.started)) for _, a in mine],
            x=[(a.ended - a.started) * 1000.0 for _, a in mine if a.ended is not None],
            text=[attempt_label(a.index, _cause(a), a.decision, status) for _, a in mine],
            textposition="auto", insidetextanchor="start", cliponaxis=False,
            hovertext=[f"attempt {a.index} on {', '.join(a.nodes)}<br>"
                       f"{a.failure_category or status}; decision: {a.decision or '-'}"
                       for _, a in mine]))
    order = [f"session {s} #{a.index}" for s, a in rows]
    fig.update_layout(title="Attempts (UTC): failures and decisions", barmode="overlay",
                      xaxis={"type": "date"}, showlegend=True,
                      yaxis={"categoryorder": "array", "categoryarray": order[::-1]},
                      height=max(420, 140 + 30 * len(order)))
    return fig


def retry_chains(go: Any, r: AnalyticsReport) -> Any:
    if not r.chains:
        return empty_figure(go, "Retry chains", "no chains")
    fig = go.Figure(go.Bar(
        x=[f"session {c.session_id}" for c in r.chains],
        y=[len(c.attempts) for c in r.chains],
        marker_color=["#2ca02c" if c.succeeded else "#d62728" for c in r.chains],
        hovertext=["succeeded" if c.succeeded else "stopped as a crash loop" if c.crash_loop
                   else "gave up / running" for c in r.chains]))
    s = r.chain_stats.get("all")
    rate = f"{s.success_rate:.0%}" if s and s.success_rate is not None else "n/a"
    med = format_duration(s.retry_interval_median_s) \
        if s and s.retry_interval_median_s is not None else "n/a"
    loops = f", {s.crash_loops} stopped as crash loops" if s and s.crash_loops else ""
    fig.update_layout(title=f"Retry chains: attempts per chain (success {rate}, median retry "
                      f"interval {med}{loops})", yaxis_title="attempts")
    return fig


def lorenz_curve(go: Any, r: AnalyticsReport) -> Any:
    ex = r.exclusions
    if not ex.summary.total:
        return empty_figure(go, "Node exclusions", "no exclusions")
    xs, ys = zip(*ex.lorenz, strict=True)
    fig = go.Figure([
        go.Scatter(x=list(xs), y=list(ys), mode="lines+markers", name="exclusions"),
        go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="equal share",
                   line={"dash": "dot", "color": "#999"})])
    fig.update_layout(title=f"Exclusion Lorenz curve: top {ex.summary.top_k} nodes "
                      f"{ex.summary.top_k_share:.0%}, Gini {ex.summary.gini:.2f}",
                      xaxis_title="share of nodes", yaxis_title="share of exclusions")
    return fig


def failure_categories(go: Any, r: AnalyticsReport) -> Any:
    cats = r.failures.by_category
    if not cats:
        return empty_figure(go, "Failure categories", "no failures")
    items = sorted(cats.items(), key=lambda kv: -kv[1])
    fig = go.Figure(go.Bar(x=[k for k, _ in items], y=[v for _, v in items]))
    per, support = r.failures.per_node_day, r.rate_support
    # the caveat's details (the exposure) are in the summary table above the figures
    rate = "" if per is None else f" ({per:.3g} per node-day)" \
        if support is None or support.supported else " (rate per node-day: too little data)"
    fig.update_layout(title="Failures by category" + rate, yaxis_title="failures")
    return fig


_LEAD_TRACES = (
    (False, "alert, then the failure"),
    (True, "predictive stop: alert, then the failure it foretold (the job had moved)"),
)
LEAD_AXIS = "lead: alert onset to failure"


def lead_times(go: Any, r: AnalyticsReport) -> Any:
    """Each predicted failure's lead: from the alert's onset to the failure it preceded (for a
    predictive stop, the failure it foretold, see :mod:`trainguard.analytics.leadtime`); stops
    whose failure is unknown are named, not plotted; the alert -> stop reaction time is a row
    of the summary, never a lead."""
    lt = r.lead_times
    if not lt.leads:
        why = "no failure named a culprit node" if not lt.with_culprit else \
            f"no detector alert preceded any of the {lt.with_culprit} failures with a culprit node"
        return empty_figure(go, "Detection lead time", why)
    shown = [x for x in lt.leads if x.warning]
    unknown = [x for x in lt.leads if x.stopped and x.lead_s is None]
    title = f"Detection lead time: {lead_text(lt)}"
    if not shown:
        fig = empty_figure(go, title, _unknown_text(unknown) if unknown else
                     "every alert was a hard one that stopped its attempt: seen, not foretold")
        fig.update_layout(showlegend=False)
        return fig
    unit, div = _unit(max(x.lead_s or 0.0 for x in shown))
    fig = go.Figure()
    for stopped, name in _LEAD_TRACES:
        mine = [x for x in shown if x.stopped is stopped]
        if mine:
            # one marker per failure: a box of one or two values says nothing
            fig.add_trace(go.Scatter(
                x=[x.category for x in mine], y=[(x.lead_s or 0.0) / div for x in mine],
                name=name, mode="markers", marker={"size": 10},
                hovertext=[_lead_hover(x) for x in mine]))
    if unknown:
        fig.add_annotation(text=_unknown_text(unknown), showarrow=False, x=0.5, y=1.0,
                           xref="paper", yref="paper", yanchor="bottom")
    fig.update_layout(title=title, yaxis_title=f"{LEAD_AXIS} ({unit})",
                      yaxis={"rangemode": "tozero"}, showlegend=True,
                      legend={"orientation": "h", "y": -0.2})
    return fig


def _lead_hover(x: LeadTime) -> str:
    lead = format_duration(x.lead_s or 0.0)
    if x.lead_to == "later failure":
        return f"{x.node}: {x.alert_kind} alert {lead} before the node failed (job moved first)"
    if x.lead_to == "prediction":
        return f"{x.node}: {x.alert_kind} alert {lead} before the failure it foretold (job moved)"
    return f"{x.node}: {x.alert_kind} alert {lead} before the failure"


def _unknown_text(unknown: list[LeadTime]) -> str:
    nodes = ", ".join(sorted({x.node for x in unknown}))
    return (f"{len(unknown)} predictive stop{'s' if len(unknown) > 1 else ''} ({nodes}): "
            "stopped before failure, lead unknown")


def checkpoint_bandwidth(go: Any, r: AnalyticsReport) -> Any:
    saves = r.checkpoint_io.saves
    if not saves:
        return empty_figure(go, "Checkpoint bandwidth", "no checkpoint with size and save time")
    gbps = [s.bytes_per_s * 8 / 1e9 for s in saves]
    steps = [s.step for s in saves]
    link = r.checkpoint_io.bandwidth_bps / 1e9
    # The link is a trace, not add_hline: on a log axis a shape's y is in log10 units, so
    # y=200 would stretch the axis to 10^200; a trace is placed in data units and autoranged.
    lo, hi = min(steps), max(steps)
    fig = go.Figure([
        go.Scatter(x=steps, y=gbps, mode="markers", name="save throughput"),
        go.Scatter(x=[lo, hi] if hi > lo else [lo - 1, hi + 1], y=[link, link], mode="lines",
                   line={"dash": "dot", "color": "#555"}, name=f"link {link:g} Gbit/s")])
    fig.update_layout(title="Checkpoint save throughput vs the link (Gbit/s)",
                      xaxis_title="step", yaxis_title="Gbit/s", yaxis_type="log")
    return fig


FIGURES: tuple[tuple[str, Callable[[Any, AnalyticsReport], Any]], ...] = (
    ("goodput", goodput_waterfall),
    ("timeline", attempt_timeline),
    ("chains", retry_chains),
    ("exclusions", lorenz_curve),
    ("failures", failure_categories),
    ("leadtime", lead_times),
    ("checkpoints", checkpoint_bandwidth),
)


def render_html(report: AnalyticsReport, title: str = "trainguard report") -> str:
    """The whole report as one HTML document (no network access needed to view it)."""
    go = plotly_go()
    return html_page(title, [kv_table(summary_rows(report)),
                             *(figure_div(build(go, report), name) for name, build in FIGURES),
                             json_island("tg-data", report.to_dict())])


__all__ = ["FIGURES", "render_html", "summary_rows"]
