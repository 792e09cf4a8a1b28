"""The charts of the fleet figures (plotly, imported by the caller: ``go`` is passed in).

- ``fleet-rates``: faults per node-day by category, the bars' error bars the exact interval;
- ``fleet-repairs``: repair times per category as box plots, in the unit of the overall
  median (log axis when all are positive and they span more than two decades);
- ``fleet-down``: the share of the window with 0, 1, 2... nodes down;
- ``fleet-down-time``: nodes down over the window, per bucket the maximum and the mean;
- ``fleet-nodes``: how many nodes had 0, 1, 2... faults against a Poisson fleet of the same
  size and rate (a long right tail is over-dispersion: lemons).

Every chart draws without data (an annotation says what is missing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainguard.durations import format_duration
from trainguard.fleet import DAY_S
from trainguard.fleet.summary import FleetSummary
from trainguard.report.page import empty_figure

_UNITS = ((120.0, 1.0, "seconds"), (2 * 3600.0, 60.0, "minutes"), (2 * DAY_S, 3600.0, "hours"))


def time_unit(typical_s: float) -> tuple[str, float]:
    """Seconds, minutes, hours or days: the unit :func:`format_duration` would give
    ``typical_s`` (a median), and its length in seconds."""
    for limit, div, name in _UNITS:
        if typical_s < limit:
            return name, div
    return "days", DAY_S


_BUCKET_NAMES = {3600.0: "hour", 6 * 3600.0: "6 hours", DAY_S: "day", 7 * DAY_S: "week"}


def bucket_name(bucket_s: float) -> str:
    """``hour``, ``6 hours``, ``day``, ``week``, else the duration."""
    return _BUCKET_NAMES.get(bucket_s) or format_duration(bucket_s)


def rates_chart(go: Any, s: FleetSummary) -> Any:
    cats = s.rates.by_category
    title = "Faults per node-day by category"
    if not cats:
        return empty_figure(go, title, "no faults in the window")
    o = s.rates.overall
    fig = go.Figure(go.Bar(
        x=list(cats), y=[r.rate for r in cats.values()],
        error_y={"type": "data", "symmetric": False,
                 "array": [r.high - r.rate for r in cats.values()],
                 "arrayminus": [r.rate - r.low for r in cats.values()]},
        hovertext=[f"{r.faults} faults; {s.confidence:.0%} CI {r.low:.3g}–{r.high:.3g}"
                   for r in cats.values()]))
    fig.update_layout(title=f"{title} ({s.confidence:.0%} CI): all {o.rate:.3g} "
                      f"({o.low:.3g}–{o.high:.3g})", yaxis_title="faults per node-day")
    return fig


def repairs_chart(go: Any, s: FleetSummary) -> Any:
    times = s.repair_times
    title = "Repair time by category"
    if not times:
        return empty_figure(go, title, "no closed faults (no repair times)")
    longest = max(max(xs) for xs in times.values())
    unit, div = time_unit(s.repairs.overall.median_s or longest)
    fig = go.Figure()
    for cat in s.repairs.by_category:
        xs = times.get(cat, ())
        if xs:
            fig.add_trace(go.Box(y=[x / div for x in xs], name=cat, boxpoints="outliers"))
    shortest = min(min(xs) for xs in times.values())
    log = shortest > 0 and longest / shortest > 100
    r = s.repairs.overall
    fig.update_layout(
        title=f"{title} ({unit}): median {r.median_s / div:.3g}, p90 {r.p90_s / div:.3g}, "
              f"longest {r.tail_fraction:.0%} hold {r.tail_share:.0%} of repair time",
        yaxis_title=unit, yaxis_type="log" if log else "linear", showlegend=False)
    return fig


def down_chart(go: Any, s: FleetSummary) -> Any:
    at = s.down.fraction_at()
    fig = go.Figure(go.Bar(x=list(at), y=[f * 100 for f in at.values()],
                           hovertext=[f"{f:.2%} of the time" for f in at.values()]))
    d = s.down.distribution
    fig.update_layout(title=f"Nodes down at once: mean {s.down.mean:.2f}, p99 {d.p99}, "
                      f"max {d.max}", xaxis_title="nodes down", yaxis_title="% of the window",
                      xaxis={"dtick": 1})
    return fig


def down_time_chart(go: Any, s: FleetSummary) -> Any:
    series = s.down.series
    days = [(b.start - s.window.start) / DAY_S for b in series]
    per = bucket_name(s.down.bucket_s)
    fig = go.Figure([
        go.Scatter(x=days, y=[b.max for b in series], mode="lines", name=f"max per {per}",
                   line={"shape": "hv"}),
        go.Scatter(x=days, y=[b.mean for b in series], mode="lines", name=f"mean per {per}",
                   line={"shape": "hv", "dash": "dot"})])
    fig.update_layout(title="Nodes down over the window", xaxis_title="days since window start",
                      yaxis_title="nodes down", yaxis={"rangemode": "tozero"},
                      legend={"orientation": "h", "y": -0.2})
    return fig


def nodes_chart(go: Any, s: FleetSummary) -> Any:
    bins = s.count_bins
    sp = s.lemons.dispersion
    fig = go.Figure([
        go.Bar(x=[b.faults for b in bins], y=[b.nodes for b in bins], name="nodes"),
        go.Scatter(x=[b.faults for b in bins], y=[b.expected for b in bins],
                   mode="lines+markers", name="a Poisson fleet (same size and rate)")])
    named = s.lemons.lemons
    lemons = ", ".join(named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "") \
        if named else "none"
    fig.update_layout(title=f"Faults per node vs Poisson: dispersion {sp.index:.2f} "
                      f"(p = {sp.p_value:.2g}), lemons: {lemons}",
                      xaxis_title="faults in the window", yaxis_title="nodes",
                      xaxis={"dtick": 1 if len(bins) <= 20 else None},
                      legend={"orientation": "h", "y": -0.2})
    return fig


FLEET_FIGURES: tuple[tuple[str, Callable[[Any, FleetSummary], Any]], ...] = (
    ("fleet-rates", rates_chart),
    ("fleet-repairs", repairs_chart),
    ("fleet-down", down_chart),
    ("fleet-down-time", down_time_chart),
    ("fleet-nodes", nodes_chart),
)

__all__ = ["FLEET_FIGURES", "bucket_name", "down_chart", "down_time_chart", "nodes_chart",
           "rates_chart", "repairs_chart", "time_unit"]
