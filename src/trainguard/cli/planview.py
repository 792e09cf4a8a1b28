"""The planning answers of :mod:`trainguard.planning.answers` as a JSON dict, terminal tables and
an HTML section (plotly, imported only when the HTML is asked for).

Terminal: one "planning answers" table (a row per job size), one table per job size with the
ETTR curve around the optimum, and the "model vs replay" table; then the skipped sizes, the
notes and the model's assumptions.
"""

from __future__ import annotations

import html
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from trainguard.analytics.report import json_safe
from trainguard.cli.tables import print_table
from trainguard.durations import format_duration
from trainguard.planning.answers import PlanningReport, SizePlan
from trainguard.planning.compare import ETTR_TOLERANCE_PP, SPARES_TOLERANCE


def _pct(x: float, digits: int = 1) -> str:
    return "n/a" if math.isnan(x) else f"{100.0 * x:.{digits}f}%"


def _count(x: int | None, room: int) -> str:
    return f"> {room}" if x is None else str(x)


def why(r: PlanningReport, p: SizePlan) -> str:
    """The row's reasons, the trace-wide burstiness ones said once as "bursty trace"."""
    common = set(r.burstiness.reasons)
    own = [x for x in p.reasons if x not in common]
    parts = (["bursty trace"] if any(x in common for x in p.reasons) else []) + own
    return "; ".join(parts) if parts else "model assumptions hold"


def _size_json(r: PlanningReport, p: SizePlan) -> dict[str, Any]:
    return {
        "nodes": p.nodes, "spares": p.spares, "room": p.room,
        "spares_needed": {"model": p.model_spares, "replay": p.replay_spares,
                          "answer": p.answer_spares},
        "job_mtbf_s": p.job_mtbf_s,
        "interval_s": {"young": p.young_s, "daly": p.daly_s, "evaluated": p.interval_s,
                       "replay_best": p.replay_best_interval_s, "answer": p.answer_interval_s},
        "ettr": {"model": p.model_ettr, "replay": p.replay_ettr,
                 "replay_spread": p.replay_ettr_spread, "replay_low": p.replay_ettr_low,
                 "replay_high": p.replay_ettr_high, "gap_pp": p.ettr_gap_pp,
                 "replay_best": p.replay_best_ettr, "answer": p.answer_ettr},
        "wait_fraction": {"model": p.model_wait, "replay": p.replay_wait},
        "replay_failures": p.replay_failures,
        "curve": [{"factor": c.factor, "interval_s": c.interval_s, "model_ettr": c.model_ettr,
                   "replay_ettr": c.replay_ettr} for c in p.curve],
        "answer_from": p.answer_from, "reasons": list(p.reasons), "why": why(r, p),
        "notes": list(p.notes),
    }


def planning_json(r: PlanningReport) -> dict[str, Any]:
    """The report as a JSON-ready dict (non-finite floats as null, e.g. Young's interval
    without failures)."""
    rel, b = r.reliability, r.burstiness
    doc: dict[str, Any] = json_safe({
        "window": {"start": r.window.start, "end": r.window.end,
                   "fleet_size": r.window.fleet_size, "days": r.window.days},
        "inputs": {"save_cost_s": r.save_cost_s, "restart_cost_s": r.restart_cost_s,
                   "spares": r.spares_given, "max_wait_fraction": r.max_wait_fraction,
                   "interval_s": r.interval_given_s, "replays": r.replays, "seed": r.seed},
        "fleet": {"outages": r.outages, "zero_length_faults": r.zero_length_faults,
                  "failures_per_node_up_day": rel.failure_rate_per_s * 86400.0,
                  "node_mtbf_up_s": rel.mtbf_s, "mean_repair_s": rel.mean_repair_s,
                  "down_probability": rel.down_probability},
        "burstiness": {"bursty": b.bursty, "faults": b.faults,
                       "dispersion_hour": b.dispersion_hour, "dispersion_day": b.dispersion_day,
                       "clustered_fraction": b.clustered_fraction,
                       "expected_clustered": b.expected_clustered, "window_s": b.window_s,
                       "reasons": list(b.reasons)},
        "tolerances": {"ettr_pp": ETTR_TOLERANCE_PP, "spares": SPARES_TOLERANCE},
        "sizes": [_size_json(r, p) for p in r.sizes],
        "skipped": [{"nodes": s.nodes, "reason": s.reason} for s in r.skipped],
        "assumptions": list(r.assumptions),
    })
    return doc


def _header(r: PlanningReport) -> list[str]:
    rel, b, dur = r.reliability, r.burstiness, format_duration
    lines = [f"{r.window.fleet_size} nodes over {r.window.days:.1f} days: {r.outages} outages; "
             f"node MTBF {dur(rel.mtbf_s)} of up time, mean outage {dur(rel.mean_repair_s)}, "
             f"a node is down {_pct(rel.down_probability, 2)} of the time"]
    if r.zero_length_faults:
        lines.append(f"{r.zero_length_faults} zero-length faults (no down time) left out")
    lines.append("outage starts look bursty: " + "; ".join(b.reasons) if b.bursty
                 else "outage starts look like a Poisson process (no burst found)")
    spares = "the spares needed" if r.spares_given is None else f"{r.spares_given} spares"
    interval = "Daly's interval" if r.interval_given_s is None \
        else f"a {dur(r.interval_given_s)} interval"
    lines.append(f"ETTR with {spares}, {interval}, save {dur(r.save_cost_s)}, restart "
                 f"{dur(r.restart_cost_s)}; wait target < {_pct(r.max_wait_fraction, 2)}; "
                 f"replay over {r.replays} placements (seed {r.seed})")
    return lines


def answers_table(r: PlanningReport) -> Table:
    """A row per job size: the answer taken (model or replay), ETTR at the evaluated interval."""
    t = Table(title="Planning answers")
    for head in ("N", "spares needed", "job MTBF", "Young", "Daly", "best interval", "ETTR",
                 "at interval", "answer from"):
        t.add_column(head, justify="left" if head == "answer from" else "right")
    for p in r.sizes:
        t.add_row(str(p.nodes), _count(p.answer_spares, p.room), format_duration(p.job_mtbf_s),
                  format_duration(p.young_s), format_duration(p.daly_s),
                  format_duration(p.answer_interval_s), _pct(p.answer_ettr),
                  format_duration(p.interval_s), p.answer_from)
    return t


def curve_table(p: SizePlan) -> Table:
    t = Table(title=f"ETTR around the optimum: {p.nodes} nodes, {p.spares} spares")
    for head in ("x optimum", "interval", "ETTR model", "ETTR replay"):
        t.add_column(head, justify="right")
    for c in p.curve:
        t.add_row(f"{c.factor:.2f}", format_duration(c.interval_s), _pct(c.model_ettr),
                  _pct(c.replay_ettr))
    return t


def compare_table(r: PlanningReport) -> Table:
    t = Table(title="Model vs replay")
    heads = ("N", "spares model", "spares replay", "ETTR model", "ETTR replay", "diff pp",
             "wait model", "wait replay", "answer from", "why")
    for head in heads:
        t.add_column(head, justify="left" if head in ("answer from", "why") else "right")
    for p in r.sizes:
        spread = f" ± {100.0 * p.replay_ettr_spread:.1f}" if p.replay_ettr_spread > 0 else ""
        t.add_row(str(p.nodes), _count(p.model_spares, p.room), _count(p.replay_spares, p.room),
                  _pct(p.model_ettr), _pct(p.replay_ettr) + spread, f"{p.ettr_gap_pp:+.2f}",
                  _pct(p.model_wait, 2), _pct(p.replay_wait, 2), p.answer_from, why(r, p))
    return t


def print_planning(console: Console, r: PlanningReport) -> None:
    """The planning answers, a curve per job size, and model vs replay, as terminal tables."""
    for line in _header(r):
        console.print(line, markup=False)
    if r.sizes:
        print_table(console, answers_table(r))
        for p in r.sizes:
            print_table(console, curve_table(p))
        print_table(console, compare_table(r))
    for s in r.skipped:
        console.print(f"skipped N={s.nodes}: {s.reason}", markup=False)
    for p in r.sizes:
        for note in p.notes:
            console.print(f"N={p.nodes}: {note}", markup=False)
    console.print("Assumptions:")
    for a in r.assumptions:
        console.print(f"  - {a}", markup=False)


# ---- HTML -----------------------------------------------------------------------------------

def ettr_curve_figure(go: Any, r: PlanningReport) -> Any:
    """ETTR against the checkpoint interval (hours, log axis), a line per job size: the model
    solid, the replay dotted."""
    from trainguard.report.page import empty_figure

    if not r.sizes:
        return empty_figure(go, "ETTR vs checkpoint interval", "no job size fits the fleet")
    fig = go.Figure()
    for i, p in enumerate(r.sizes):
        color = f"hsl({(i * 57) % 360}, 65%, 42%)"
        x = [c.interval_s / 3600.0 for c in p.curve]
        fig.add_trace(go.Scatter(x=x, y=[100.0 * c.model_ettr for c in p.curve],
                                 mode="lines+markers", name=f"N={p.nodes} model",
                                 line={"color": color}, legendgroup=str(p.nodes)))
        fig.add_trace(go.Scatter(x=x, y=[100.0 * c.replay_ettr for c in p.curve],
                                 mode="lines+markers", name=f"N={p.nodes} replay",
                                 line={"color": color, "dash": "dot"},
                                 legendgroup=str(p.nodes)))
    fig.update_layout(title="ETTR vs checkpoint interval (model solid, replay dotted)",
                      xaxis_title="checkpoint interval (hours)", xaxis_type="log",
                      yaxis_title="ETTR (%)")
    return fig


def compare_figure(go: Any, r: PlanningReport) -> Any:
    """Model and replay ETTR per job size as bars, the replay's spread as error bars."""
    from trainguard.report.page import empty_figure

    if not r.sizes:
        return empty_figure(go, "Model vs replay", "no job size fits the fleet")
    x = [f"N={p.nodes}" for p in r.sizes]
    fig = go.Figure([
        go.Bar(x=x, y=[100.0 * p.model_ettr for p in r.sizes], name="model"),
        go.Bar(x=x, y=[100.0 * p.replay_ettr for p in r.sizes], name="replay",
               error_y={"type": "data", "array": [100.0 * p.replay_ettr_spread
                                                  for p in r.sizes]},
               hovertext=[f"answer from {p.answer_from}: {why(r, p)}" for p in r.sizes])])
    fig.update_layout(title="Expected ETTR: model vs replay", barmode="group",
                      yaxis_title="ETTR (%)")
    return fig


def _html_table(table: Table) -> str:
    heads = "".join(f"<th>{html.escape(str(c.header))}</th>" for c in table.columns)
    cols = [list(c.cells) for c in table.columns]
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(col[i]))}</td>" for col in cols)
                   + "</tr>" for i in range(table.row_count))
    return (f"<table class='kv'><caption>{html.escape(str(table.title or ''))}</caption>"
            f"<tr>{heads}</tr>{rows}</table>")


def planning_html(r: PlanningReport) -> str:
    """An HTML section: the header lines, the answers and model-vs-replay tables, the ETTR
    curves and the model-vs-replay bars. Needs plotly.js loaded once by the page (the report's
    ``render_html`` inlines it)."""
    from trainguard.report.page import figure_div, plotly_go

    go = plotly_go()
    parts = ["<section id='tg-planning'><h2>Planning answers</h2>"]
    parts += [f"<p>{html.escape(line)}</p>" for line in _header(r)]
    parts += [_html_table(answers_table(r)), _html_table(compare_table(r))]
    parts += [f"<p>skipped N={s.nodes}: {html.escape(s.reason)}</p>" for s in r.skipped]
    for name, build in (("planning-curve", ettr_curve_figure),
                        ("planning-compare", compare_figure)):
        parts.append(figure_div(build(go, r), name))
    parts.append("<h3>Assumptions</h3><ul>"
                 + "".join(f"<li>{html.escape(a)}</li>" for a in r.assumptions) + "</ul>")
    parts.append("</section>")
    return "\n".join(parts)


__all__ = ["answers_table", "compare_figure", "compare_table", "curve_table",
           "ettr_curve_figure", "planning_html", "planning_json", "print_planning", "why"]
