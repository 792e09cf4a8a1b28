"""The self-contained HTML report: plotly figures with plotly.js inlined (works offline).

Every figure draws even without data (an annotation says what is missing), so "every plot drew"
is a check a browser can make: each figure's div gets a ``main-svg`` element, and script errors
are collected into ``#tg-errors`` (hidden) for the headless check.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable
from typing import Any

from trainguard.analytics.report import AnalyticsReport
from trainguard.errors import ConfigError

_ERROR_HOOK = """<script>
window.tgErrors = [];
function tgRecord(msg) {
  window.tgErrors.push(String(msg));
  var box = document.getElementById('tg-errors');
  if (box) { box.textContent = window.tgErrors.join('\\n'); }
}
window.addEventListener('error', function (e) { tgRecord(e.message); });
window.addEventListener('unhandledrejection', function (e) { tgRecord(e.reason); });
var tgConsoleError = console.error;
console.error = function () { tgRecord(Array.prototype.join.call(arguments, ' '));
  tgConsoleError.apply(console, arguments); };
</script>"""

_STYLE = """<style>
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }
table.kv { border-collapse: collapse; } table.kv td { padding: 3px 12px 3px 0; }
table.kv td:first-child { color: #555; }
.plot { max-width: 1100px; }
#tg-errors { display: none; }
</style>"""


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError as exc:
        raise ConfigError("the HTML report needs plotly: pip install 'trainguard[report]'") \
            from exc
    return go


def _empty(go: Any, title: str, why: str) -> Any:
    fig = go.Figure()
    fig.add_annotation(text=why, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def _dur(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 3 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


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
        return _empty(go, "Goodput", "no finished attempts")
    b = g.badput
    parts = [("productive", g.productive_s)]
    parts += [(f"startup: {name}", v) for name, v in b.startup.items() if v > 0]
    parts += [(label, v) for label, v in (
        ("checkpoint blocking", b.checkpoint_blocking_s), ("lost progress", b.lost_progress_s),
        ("failure detection", b.detection_s), ("teardown", b.teardown_s),
        ("relaunch wait", b.relaunch_wait_s), ("hang", b.hang_s), ("queue", b.queue_s),
        ("other", b.other_s)) if v > 0]
    unit, div = _unit(g.wall_s)
    fig = go.Figure(go.Waterfall(
        x=[p[0] for p in parts] + ["wall time"],
        y=[p[1] / div for p in parts] + [0.0],
        measure=["relative"] * len(parts) + ["total"],
        text=[f"{p[1] / max(g.wall_s, 1e-9):.1%}" for p in parts] + ["100%"]))
    ettr = f"{g.ettr:.1%}" if g.ettr is not None else "n/a"
    fig.update_layout(title=f"Goodput: ETTR {ettr} ({unit})", yaxis_title=unit,
                      showlegend=False)
    return fig


def attempt_timeline(go: Any, r: AnalyticsReport) -> Any:
    rows = [(c.session_id, a) for c in r.chains for a in c.attempts if a.ended is not None]
    if not rows:
        return _empty(go, "Attempts", "no finished attempts")
    colors = {"succeeded": "#2ca02c", "failed": "#d62728", "cancelled": "#7f7f7f"}
    fig = go.Figure()
    for status, color in colors.items():
        mine = [(s, a) for s, a in rows if a.status == status]
        if not mine:
            continue
        fig.add_trace(go.Bar(
            orientation="h", name=status, marker_color=color,
            y=[f"session {s}" for s, _ in mine],
            base=[time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(a.started)) for _, a in mine],
            x=[(a.ended - a.started) * 1000.0 for _, a in mine if a.ended is not None],
            hovertext=[f"attempt {a.index} on {', '.join(a.nodes)}<br>"
                       f"{a.failure_category or status}; decision: {a.decision or '-'}"
                       for _, a in mine]))
    fig.update_layout(title="Attempts (UTC): failures and decisions", barmode="overlay",
                      xaxis={"type": "date"})
    return fig


def retry_chains(go: Any, r: AnalyticsReport) -> Any:
    if not r.chains:
        return _empty(go, "Retry chains", "no chains")
    fig = go.Figure(go.Bar(
        x=[f"session {c.session_id}" for c in r.chains],
        y=[len(c.attempts) for c in r.chains],
        marker_color=["#2ca02c" if c.succeeded else "#d62728" for c in r.chains],
        hovertext=["succeeded" if c.succeeded else "gave up / running" for c in r.chains]))
    s = r.chain_stats.get("all")
    rate = f"{s.success_rate:.0%}" if s and s.success_rate is not None else "n/a"
    med = f"{s.retry_interval_median_s / 60:.1f} min" \
        if s and s.retry_interval_median_s is not None else "n/a"
    fig.update_layout(title=f"Retry chains: attempts per chain (success {rate}, median retry "
                      f"interval {med})", yaxis_title="attempts")
    return fig


def lorenz_curve(go: Any, r: AnalyticsReport) -> Any:
    ex = r.exclusions
    if not ex.summary.total:
        return _empty(go, "Node exclusions", "no exclusions")
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
        return _empty(go, "Failure categories", "no failures")
    items = sorted(cats.items(), key=lambda kv: -kv[1])
    fig = go.Figure(go.Bar(x=[k for k, _ in items], y=[v for _, v in items]))
    per = r.failures.per_node_day
    fig.update_layout(title="Failures by category" + (
        f" ({per:.3f} per node-day)" if per is not None else ""), yaxis_title="failures")
    return fig


def lead_times(go: Any, r: AnalyticsReport) -> Any:
    leads = r.lead_times.leads
    if not leads:
        return _empty(go, "Detection lead time", "no detector alert preceded a failure")
    fig = go.Figure(go.Box(x=[lt.category for lt in leads], y=[lt.lead_s / 60 for lt in leads],
                           boxpoints="all"))
    fig.update_layout(title="Detection lead time before failures (minutes)",
                      yaxis_title="minutes")
    return fig


def checkpoint_bandwidth(go: Any, r: AnalyticsReport) -> Any:
    saves = r.checkpoint_io.saves
    if not saves:
        return _empty(go, "Checkpoint bandwidth", "no checkpoint with size and save time")
    gbps = [s.bytes_per_s * 8 / 1e9 for s in saves]
    fig = go.Figure([go.Scatter(x=[s.step for s in saves], y=gbps, mode="markers",
                                name="save throughput")])
    link = r.checkpoint_io.bandwidth_bps / 1e9
    fig.add_hline(y=link, line_dash="dot", annotation_text=f"link {link:g} Gbit/s")
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


def summary_rows(r: AnalyticsReport) -> list[tuple[str, str]]:
    g, s, f = r.goodput, r.chain_stats.get("all"), r.failures
    rows = [("runs", str(len(r.runs))),
            ("ETTR", f"{g.ettr:.1%}" if g.ettr is not None else "n/a"),
            ("productive / wall", f"{_dur(g.productive_s)} / {_dur(g.wall_s)}")]
    if s is not None:
        rows.append(("retry chains", f"{s.chains} ({s.success_rate:.0%} succeeded)"
                     if s.success_rate is not None else str(s.chains)))
        if s.retry_interval_median_s is not None:
            rows.append(("median retry interval", _dur(s.retry_interval_median_s)))
    rows.append(("failures", f"{f.failures}" + (f" ({f.per_node_day:.3f} per node-day)"
                                                  if f.per_node_day is not None else "")))
    if f.mttr_s is not None:
        rows.append(("MTTR (failure to resume)", _dur(f.mttr_s)))
    ex = r.exclusions.summary
    if ex.total:
        rows.append((f"top-{ex.top_k} exclusion share", f"{ex.top_k_share:.0%}"))
    if r.lemons:
        rows.append(("lemon nodes", ", ".join(n.node for n in r.lemons)))
    if r.advice is not None:
        rows.append(("best checkpoint interval (model)",
                     f"{_dur(r.advice.optimal_interval_s)} -> ETTR "
                     f"{r.advice.optimal_ettr:.1%}"))
    return rows


def render_html(report: AnalyticsReport, title: str = "trainguard report") -> str:
    """The whole report as one HTML document (no network access needed to view it)."""
    go = _plotly()
    from plotly.offline import get_plotlyjs

    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title>{_STYLE}{_ERROR_HOOK}<script>{get_plotlyjs()}</script></head><body>",
             f"<h1>{html.escape(title)}</h1><pre id='tg-errors'></pre>",
             "<table class='kv'>"]
    parts += [f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
              for k, v in summary_rows(report)]
    parts.append("</table>")
    for name, build in FIGURES:
        fig = build(go, report)
        fig.update_layout(height=420, margin={"t": 60})
        parts.append(f"<div class='plot' data-figure='{name}'>"
                     + fig.to_html(full_html=False, include_plotlyjs=False,
                                   div_id=f"fig-{name}", config={"displaylogo": False})
                     + "</div>")
    parts.append("<script type='application/json' id='tg-data'>"
                 + html.escape(json.dumps(report.to_dict()), quote=False) + "</script>")
    parts.append("</body></html>")
    return "\n".join(parts)


__all__ = ["FIGURES", "render_html", "summary_rows"]
