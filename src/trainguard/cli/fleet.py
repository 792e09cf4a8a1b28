"""`trainguard fleet`: what an imported fault history says about the fleet, and the planning
answers it gives (spares, checkpoint interval, expected ETTR) with the model checked against a
replay of the real fault sequence."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from trainguard.cli.console import err, fail, out
from trainguard.cli.options import duration_option
from trainguard.cli.storeopen import open_store
from trainguard.durations import format_duration
from trainguard.errors import ConfigError, TrainguardError
from trainguard.fleet.events import FleetWindow
from trainguard.history.times import parse_origin
from trainguard.planning.costs import DEFAULT_RESTART_S, DEFAULT_SAVE_S, Cost, choose_cost
from trainguard.timeparse import parse_duration

if TYPE_CHECKING:
    from trainguard.fleet.summary import FleetSummary
    from trainguard.planning.answers import PlanningReport
    from trainguard.store import Store

_DEFAULT_SIZES = "8,16,32,64,128,256"


def fleet(
    history: Annotated[str | None, typer.Option(
        help="The imported history to analyse, by name or id (default: the newest; see "
        "`trainguard history list`).")] = None,
    since: Annotated[str | None, typer.Option(
        help="Analyse from this point: a duration after the history's start (30d) or an "
        "ISO date.")] = None,
    until: Annotated[str | None, typer.Option(
        help="Analyse up to this point: a duration after the history's start (180d) or an "
        "ISO date.")] = None,
    job_sizes: Annotated[str, typer.Option(
        help="Job sizes in nodes (comma-separated) for MTBF and the planning answers.")]
    = _DEFAULT_SIZES,
    top_k: Annotated[int, typer.Option(
        min=1, help="How many of the worst nodes the concentration figure uses.")] = 3,
    save_s: Annotated[float | None, duration_option(
        "--save-s", min=0.001, help="Time one checkpoint save stops training (default: "
        "measured from the store's runs, else 60 s, said as assumed).")] = None,
    restart_s: Annotated[float | None, duration_option(
        "--restart-s", min=0.0, help="Time from a failure to training again (detect, "
        "relaunch, load), excluding the lost work (default: measured from the store's runs, "
        "else 5 min, said as assumed).")] = None,
    spares: Annotated[int | None, typer.Option(
        min=0, help="Hot spares the job has (default: as many as the wait target needs).")]
    = None,
    max_wait: Annotated[float, typer.Option(
        min=0.0, max=100.0, help="Wait target for spare sizing: the job waits for hardware "
        "less than this percentage of the time.")] = 1.0,
    interval_s: Annotated[float | None, duration_option(
        "--interval", min=1.0, help="Checkpoint interval to evaluate (default: the Daly "
        "optimum for each job size).")] = None,
    replays: Annotated[int, typer.Option(
        min=1, max=200, help="Placements of the job on the fleet the replay averages.")] = 8,
    no_plan: Annotated[bool, typer.Option(
        "--no-plan", help="Fleet figures only: skip planning and the replay.")] = False,
    html_out: Annotated[Path | None, typer.Option(
        "--html", help="Also write a self-contained HTML page with the charts here.",
        dir_okay=False)] = None,
    db: Annotated[str | None, typer.Option(
        "--db", help="Event store: SQLite path or postgresql:// URL "
        "(default $TRAINGUARD_DB, else ./trainguard.db).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Fleet figures from an imported fault history: faults per node-day by type (with
    confidence intervals), MTBF per node and per job size, repair times and their tail, nodes
    down over time, lemon nodes (tested against the fleet's rate), and the planning answers:
    spares, checkpoint interval and expected ETTR, model vs a replay of the real faults.
    """
    from trainguard.cli.fleetview import print_summary, summary_json
    from trainguard.cli.planview import planning_json, print_planning
    from trainguard.fleet.summary import fleet_summary
    from trainguard.planning.answers import planning_report

    started = time.perf_counter()
    sizes = job_sizes_option(job_sizes)
    with open_store(db, readonly=True) as store:
        try:
            record = store.fault_history(history)
            events = store.history_events(record.id)
            save, restart = _costs(store, save_s, restart_s, no_plan)
        except TrainguardError as exc:
            fail(str(exc))
    try:
        window = restrict_window(FleetWindow(record.window_start, record.window_end,
                                             record.fleet_size), since=since, until=until)
        summary = fleet_summary(events, window, job_sizes=(1, *sizes), top_k=top_k)
        plan = None if no_plan else planning_report(
            events, window, job_sizes=sizes, save_cost_s=save.seconds,
            restart_cost_s=restart.seconds,
            spares=spares, max_wait_fraction=max_wait / 100.0, interval_s=interval_s,
            replays=replays, seed=0)
    except TrainguardError as exc:
        fail(str(exc))
    elapsed = time.perf_counter() - started
    if html_out is not None:
        _write_html(html_out, record.name, summary, plan)
    if json_out:
        doc: dict[str, object] = {
            "history": {"id": record.id, "name": record.name, "source": record.source,
                        "fleet_size": record.fleet_size, "faults_stored": record.faults},
            "window": {"start": window.start, "end": window.end, "days": window.days,
                       "node_days": window.node_days},
            "fleet": summary_json(summary),
            "planning": None if plan is None else {
                **planning_json(plan), "costs": {"save": save.to_dict(),
                                                 "restart": restart.to_dict()}},
            "seconds": round(elapsed, 3)}
        out.out(json.dumps(doc), highlight=False)
        return
    out.out(f"history {record.name!r}: {record.fleet_size} nodes, "
            f"{window.days:.1f} days ({window.node_days:.0f} node-days)", highlight=False)
    print_summary(out, summary)
    if plan is not None:
        out.out(f"costs: save {format_duration(save.seconds)} ({save.source}), restart "
                f"{format_duration(restart.seconds)} ({restart.source})", highlight=False)
        print_planning(out, plan)
    err.print(f"[dim]{elapsed:.2f} s[/]")


def _costs(store: Store, save_s: float | None, restart_s: float | None,
           no_plan: bool) -> tuple[Cost, Cost]:
    """The save and restart costs: given, else measured from the store's own runs, else the
    stated defaults (:mod:`trainguard.planning.costs`)."""
    measured_save = measured_restart = None
    if not no_plan and (save_s is None or restart_s is None):
        from trainguard.cli.advise import measure_store

        measured = measure_store(store)
        measured_save, measured_restart = measured.write_s, measured.restart_s
    return (choose_cost(save_s, measured_save, DEFAULT_SAVE_S, "--save-s"),
            choose_cost(restart_s, measured_restart, DEFAULT_RESTART_S, "--restart-s"))


def job_sizes_option(text: str) -> tuple[int, ...]:
    """``8,16,32`` -> (8, 16, 32); one error line (exit 2) for anything else."""
    sizes: list[int] = []
    for part in text.split(","):
        try:
            size = int(part.strip())
        except ValueError:
            fail(f"--job-sizes: {part.strip()!r} is not a whole number of nodes (e.g. 8,16,64)")
        if size < 1:
            fail(f"--job-sizes: {size} is not a job size (at least 1 node)")
        sizes.append(size)
    return tuple(sorted(set(sizes)))


def _bound(value: str, window: FleetWindow, option: str) -> float:
    """A point of the window: a duration after its start (``30d``) or an absolute instant."""
    try:
        return window.start + parse_duration(value, option)
    except ConfigError:
        pass
    try:
        return parse_origin(value)
    except TrainguardError:
        fail(f"{option} {value!r} is neither a duration after the history's start (30d) "
             "nor an ISO date")


def restrict_window(window: FleetWindow, *, since: str | None,
                    until: str | None) -> FleetWindow:
    """The part of the history's window the analysis covers (``--since``/``--until``)."""
    lo = window.start if since is None else _bound(since, window, "--since")
    hi = window.end if until is None else _bound(until, window, "--until")
    lo, hi = max(lo, window.start), min(hi, window.end)
    if not hi > lo:
        fail("--since/--until leave nothing of the history's window "
             f"({window.days:.1f} days from its start)")
    return FleetWindow(lo, hi, window.fleet_size)


def _write_html(path: Path, name: str, summary: FleetSummary,
                plan: PlanningReport | None) -> None:
    from trainguard.cli.fleetview import summary_html
    from trainguard.cli.planview import planning_html
    from trainguard.outdirs import make_dir
    from trainguard.report.page import html_page

    body = [summary_html(summary)]
    if plan is not None:
        body.append(planning_html(plan))
    try:
        make_dir(path.parent)
        path.write_text(html_page(f"trainguard fleet: {name}", body), encoding="utf-8")
    except TrainguardError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}")
    err.print(f"HTML: {path}")


__all__ = ["fleet"]
