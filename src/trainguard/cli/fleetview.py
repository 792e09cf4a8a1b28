"""The fleet figures of :func:`trainguard.fleet.summary.fleet_summary` for people and scripts:
terminal tables (:func:`print_summary`), one JSON document (:func:`summary_json`) and an HTML
section with plotly charts (:func:`summary_html`, extra ``report``).

Units: in JSON every time is in seconds (``*_s``, and ``start``/``end`` as the record gives
them) and, for durations, in days as well (``*_days``); an infinite MTBF (no faults) is
``null``; rates are faults per node-day. Lists keep the summary's order (most faults first).
On the terminal, durations read as :func:`trainguard.durations.format_duration` writes them
and a fault's start as days since the window's start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainguard.cli.tables import print_table
from trainguard.durations import format_duration
from trainguard.fleet import DAY_S, Mtbf, NodeTest, Rate, RepairStats
from trainguard.fleet.summary import REPORT_FLEET, FleetSummary, TopShare
from trainguard.textsafe import terminal_safe

KINDS_SHOWN = 10
"""Kinds in the terminal's by-kind table (all of them in JSON)."""
POISSON_TOP_K = ("analytic: expected sum of the k largest of fleet_size independent "
                 "Poisson(faults / fleet_size) counts, over the number of faults")
"""How the Poisson expectation of a top-k share is computed (shown in JSON)."""


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def _days(v: float) -> float | None:
    return v / DAY_S if math.isfinite(v) else None


def _rate(r: Rate) -> dict[str, Any]:
    return {"faults": r.faults, "per_node_day": r.rate, "low": r.low, "high": r.high,
            "mtbf_node_days": None if r.rate == 0 else 1.0 / r.rate}


def _mtbf(m: Mtbf) -> dict[str, Any]:
    return {"job_nodes": m.job_nodes, "mtbf_s": _finite(m.mtbf_s), "low_s": _finite(m.low_s),
            "high_s": _finite(m.high_s), "mtbf_days": _days(m.mtbf_s),
            "low_days": _days(m.low_s), "high_days": _days(m.high_s)}


def _repairs(r: RepairStats) -> dict[str, Any]:
    out: dict[str, Any] = {"count": r.count, "open": r.open}
    for name, v in (("median", r.median_s), ("p90", r.p90_s), ("mean", r.mean_s),
                    ("max", r.max_s), ("total", r.total_s)):
        # No closed repair: no figure (null), not a repair time of zero.
        none = r.count == 0 and name != "total"
        out[f"{name}_s"], out[f"{name}_days"] = (None, None) if none else (v, v / DAY_S)
    out["tail_share"] = r.tail_share if r.count else None
    return out


def _top(t: TopShare) -> dict[str, Any]:
    return {"nodes": t.nodes, "share": t.share, "poisson_share": t.poisson_share}


def summary_json(s: FleetSummary) -> dict[str, Any]:
    """The summary as plain JSON types (module docstring for the units)."""
    w, d, lem = s.window, s.down, s.lemons
    sp = lem.dispersion
    return {
        "window": {"start": w.start, "end": w.end, "days": w.days, "fleet_size": w.fleet_size,
                   "node_days": w.node_days},
        "confidence": s.confidence,
        "counts": {"events": s.events, "faults": s.faults, "open": s.open_faults,
                   "before_window": s.before_window,
                   "after_window": s.events - s.faults - s.before_window,
                   "nodes_with_faults": s.nodes_with_faults},
        "rates": {"overall": _rate(s.rates.overall),
                  "by_category": [{"category": k, **_rate(r)}
                                  for k, r in s.rates.by_category.items()],
                  "by_kind": [{"kind": k, **_rate(r)} for k, r in s.rates.by_kind.items()]},
        "mtbf": {"node": _mtbf(s.mtbf_node), "jobs": [_mtbf(m) for m in s.mtbf_jobs],
                 "job_sizes_dropped": list(s.job_sizes_dropped)},
        "repairs": {"tail_fraction": s.repairs.overall.tail_fraction,
                    "overall": _repairs(s.repairs.overall),
                    "by_category": [{"category": k, **_repairs(r)}
                                    for k, r in s.repairs.by_category.items()],
                    "longest": [{"node": x.node, "kind": x.kind, "category": x.category,
                                 "start": x.start, "start_day": (x.start - w.start) / DAY_S,
                                 "duration_s": x.duration_s, "duration_days": x.duration_s / DAY_S}
                                for x in s.longest]},
        "nodes_down": {"fraction_at": {str(c): f for c, f in d.fraction_at().items()},
                       "mean": d.mean, "p50": d.distribution.p50, "p90": d.distribution.p90,
                       "p99": d.distribution.p99, "max": d.distribution.max,
                       "series": {"bucket_s": d.bucket_s, "start": [b.start for b in d.series],
                                  "max": [b.max for b in d.series],
                                  "mean": [b.mean for b in d.series]}},
        "lemons": {"fdr": lem.q, "lemons": lem.lemons,
                   "nodes": [{"node": n.node, "faults": n.faults, "expected": n.expected,
                              "p_value": n.p_value, "q_value": n.q_value, "lemon": n.lemon}
                             for n in lem.nodes],
                   "dispersion": {"index": sp.index, "mean": sp.mean, "variance": sp.variance,
                                  "statistic": sp.statistic, "df": max(0, sp.nodes - 1),
                                  "p_value": sp.p_value},
                   "top_k": _top(s.top_k), "gini": lem.concentration.gini,
                   "count_bins": [{"faults": b.faults, "nodes": b.nodes,
                                   "expected_nodes": b.expected} for b in s.count_bins]},
        "report_comparison": {
            "claim": f"3 of {REPORT_FLEET} nodes caused > 50% of exclusions",
            "threshold": s.report.threshold, "looks_like_report": s.report.looks_like_report,
            "top3": _top(s.report.top3), "scaled": _top(s.report.scaled),
            "poisson_method": POISSON_TOP_K},
    }


def _ci(r: Rate) -> str:
    return f"{r.low:.3g}–{r.high:.3g}"


def _mtbf_text(m: Mtbf) -> tuple[str, str]:
    return format_duration(m.mtbf_s), f"{format_duration(m.low_s)} – {format_duration(m.high_s)}"


def _top_text(t: TopShare) -> str:
    return f"top {t.nodes} hold {t.share:.0%} of faults (a Poisson fleet: {t.poisson_share:.0%})"


def down_bins(seconds_at: Mapping[int, float], rows: int = 12) -> list[tuple[str, float]]:
    """The nodes-down distribution as at most about ``rows`` table rows: one per count while
    they fit, else ranges of equal width (``0``, ``1-4``, ``5-8``...; 0 always alone).

    >>> down_bins({0: 5.0, 1: 2.0, 2: 1.0})
    [('0', 5.0), ('1', 2.0), ('2', 1.0)]
    >>> down_bins({0: 1.0, 3: 1.0, 9: 2.0}, rows=3)
    [('0', 1.0), ('1-5', 1.0), ('6-10', 2.0)]
    """
    if not seconds_at:
        return []
    top = max(seconds_at)
    if top < rows:
        return [(str(c), seconds_at[c]) for c in sorted(seconds_at)]
    width = -(-top // (rows - 1))
    binned: list[tuple[str, float]] = [("0", seconds_at.get(0, 0.0))]
    for lo in range(1, top + 1, width):
        hi = lo + width - 1
        total = sum(v for c, v in seconds_at.items() if lo <= c <= hi)
        binned.append((f"{lo}-{hi}", total))
    return binned


def summary_rows(s: FleetSummary) -> list[tuple[str, str]]:
    """The headline figures as ``(name, value)`` rows (terminal and HTML)."""
    w, o, lem = s.window, s.rates.overall, s.lemons
    sp, down = lem.dispersion, s.down
    pct = f"{s.confidence:.0%}"
    mtbf, mtbf_ci = _mtbf_text(s.mtbf_node)
    rows = [("window", f"{w.days:.1f} d x {w.fleet_size} nodes = {w.node_days:.1f} node-days"),
            ("faults", f"{s.faults} starting in the window ({s.open_faults} still open) "
                       f"on {s.nodes_with_faults} nodes")]
    others = s.events - s.faults
    if others:
        rows.append(("other events", f"{s.before_window} started before the window (down time "
                                     f"only), {others - s.before_window} after it"))
    lemons = ", ".join(lem.lemons) or "none"
    rows += [
        ("faults per node-day", f"{o.rate:.3g} ({pct} CI {_ci(o)})"),
        ("MTBF per node", f"{mtbf} ({pct} CI {mtbf_ci})"),
        ("repair time", f"median {format_duration(s.repairs.overall.median_s)}, p90 "
                        f"{format_duration(s.repairs.overall.p90_s)}, longest "
                        f"{s.repairs.overall.tail_fraction:.0%} hold "
                        f"{s.repairs.overall.tail_share:.0%} of repair time"
         if s.repairs.overall.count else "no fault was repaired in the window"),
        ("nodes down", f"mean {down.mean:.2f}, p99 {down.distribution.p99}, max "
                       f"{down.distribution.max}; any down "
                       f"{down.distribution.fraction_at_least(1):.1%} of the time"),
        ("lemons", f"{lemons} (Poisson tail vs the fleet rate, Benjamini-Hochberg at "
                   f"FDR {lem.q:.0%})"),
        ("over-dispersion", f"index {sp.index:.2f} (Poisson: 1), chi-square p = "
                            f"{sp.p_value:.3g}"),
        ("top-k share", _top_text(s.top_k)),
        (f"report: 3 of {REPORT_FLEET} nodes > 50%",
         ("yes" if s.report.looks_like_report else "no") + f": {_top_text(s.report.top3)}"
         + ("" if s.report.scaled.nodes == 3 else
            f"; at the report's share of nodes, {_top_text(s.report.scaled)}")),
    ]
    return rows


def _table(title: str, *columns: str, text: int = 1) -> Table:
    """A table whose first ``text`` columns are text (left), the rest numbers (right)."""
    table = Table(title=title)
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i < text else "right")
    return table


def _shown_nodes(s: FleetSummary) -> Sequence[NodeTest]:
    """The nodes with the most faults: every lemon, and at least the top k."""
    return s.lemons.nodes[:max(s.top_k.nodes, len(s.lemons.lemons))]


def print_summary(console: Console, s: FleetSummary) -> None:
    """The fleet figures as compact tables."""
    head = Table(title="fleet figures", show_header=False)
    head.add_column("figure")
    head.add_column("value")
    for k, v in summary_rows(s):
        head.add_row(Text(terminal_safe(k)), Text(terminal_safe(v)))
    print_table(console, head)
    pct = f"{s.confidence:.0%} CI"
    cats = _table("faults per node-day by category", "category", "faults", "per node-day", pct,
                  "MTBF per node")
    for k, r in s.rates.by_category.items():
        cats.add_row(Text(terminal_safe(k)), str(r.faults), f"{r.rate:.3g}", _ci(r),
                     format_duration(DAY_S / r.rate))
    kinds = _table("by kind" + (f" (top {KINDS_SHOWN} of {len(s.rates.by_kind)})"
                                if len(s.rates.by_kind) > KINDS_SHOWN else ""),
                   "kind", "faults", "per node-day", pct)
    for k, r in list(s.rates.by_kind.items())[:KINDS_SHOWN]:
        kinds.add_row(Text(terminal_safe(k)), str(r.faults), f"{r.rate:.3g}", _ci(r))
    jobs = _table("MTBF of an N-node job", "nodes", "MTBF", pct)
    for m in s.mtbf_jobs:
        jobs.add_row(str(m.job_nodes), *_mtbf_text(m))
    tail = f"longest {s.repairs.overall.tail_fraction:.0%} share"
    rep = _table("repair time by category", "category", "repairs", "open", "median", "p90",
                 "mean", "max", tail)
    for k, st in [("all", s.repairs.overall), *s.repairs.by_category.items()]:
        rep.add_row(Text(terminal_safe(k)), str(st.count), str(st.open),
                    *(format_duration(v) if st.count else "–"
                      for v in (st.median_s, st.p90_s, st.mean_s, st.max_s)),
                    f"{st.tail_share:.0%}" if st.count else "–")
    longest = _table("longest repairs", "node", "kind", "started (day)", "repair time", text=2)
    for x in s.longest:
        longest.add_row(Text(terminal_safe(x.node)), Text(terminal_safe(x.kind)),
                        f"{(x.start - s.window.start) / DAY_S:.2f}", format_duration(x.duration_s))
    down = _table("nodes down at once", "nodes down", "share of time", "time")
    for label, sec in down_bins(s.down.distribution.seconds_at):
        down.add_row(label, f"{sec / s.window.length_s:.2%}", format_duration(sec))
    nodes = _table(f"nodes with the most faults (lemon: BH q <= {s.lemons.q:g})", "node",
                   "faults", "expected", "p", "q", "lemon")
    for n in _shown_nodes(s):
        nodes.add_row(Text(terminal_safe(n.node)), str(n.faults), f"{n.expected:.2f}",
                      f"{n.p_value:.2g}", f"{n.q_value:.2g}", "yes" if n.lemon else "no")
    for table in (cats, kinds, jobs, rep, longest, down, nodes):
        if table.row_count:
            print_table(console, table)
    if s.job_sizes_dropped:
        console.print(f"job sizes above the fleet size left out: "
                      f"{', '.join(map(str, s.job_sizes_dropped))} (the whole fleet, "
                      f"{s.window.fleet_size} nodes, shown instead)")


def summary_html(s: FleetSummary) -> str:
    """An HTML section: the headline rows, five charts, the nodes with the most faults, the
    longest repairs and the JSON (needs plotly)."""
    from trainguard.report.fleetcharts import FLEET_FIGURES
    from trainguard.report.page import data_table, figure_div, json_island, kv_table, plotly_go

    go = plotly_go()
    parts = ["<section class='fleet'><h2>Fleet figures</h2>", kv_table(summary_rows(s))]
    parts += [figure_div(build(go, s), name) for name, build in FLEET_FIGURES]
    if s.lemons.nodes:
        parts.append(data_table(
            ("node", "faults", "expected", "p", "q (BH)", "lemon"),
            [(n.node, str(n.faults), f"{n.expected:.2f}", f"{n.p_value:.2g}",
              f"{n.q_value:.2g}", "yes" if n.lemon else "no") for n in _shown_nodes(s)],
            caption="Nodes with the most faults"))
    if s.longest:
        parts.append(data_table(
            ("node", "kind", "started (day)", "repair time"),
            [(x.node, x.kind, f"{(x.start - s.window.start) / DAY_S:.2f}",
              format_duration(x.duration_s)) for x in s.longest], caption="Longest repairs",
            text=2))
    parts += [json_island("tg-fleet-data", summary_json(s)), "</section>"]
    return "\n".join(parts)


__all__ = ["KINDS_SHOWN", "POISSON_TOP_K", "print_summary", "summary_html", "summary_json",
           "summary_rows"]
