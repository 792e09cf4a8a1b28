"""``trainguard trace show`` and ``trainguard diagnose hang|stragglers``: a run's per-rank
timing, and where a hang or a straggler comes from."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from trainguard.cli.console import err, fail, out, warn
from trainguard.cli.options import duration_option
from trainguard.cli.tables import print_table
from trainguard.errors import TraceError, TrainguardError
from trainguard.trace.collect import process_state, read_states
from trainguard.trace.hang import HangDiagnosis, RankPlace, localize_hang
from trainguard.trace.model import RankState, TraceWindow
from trainguard.trace.runfiles import (
    RankFiles,
    attempts,
    diagnosed_attempts,
    hang_path,
    rank_files,
    read_hang,
    read_supervisor_stragglers,
    read_windows,
    stragglers_path,
)

if TYPE_CHECKING:  # numpy: imported when a straggler analysis runs, not for every command
    from trainguard.trace.straggler import StragglerConfig
    from trainguard.trace.straggler_attempt import AttemptStragglers

app = typer.Typer(help="Per-rank tracing of a supervised run.", no_args_is_help=True)
diagnose_app = typer.Typer(help="Localize a hang or find stragglers in a run.",
                           no_args_is_help=True)

RunArg = Annotated[Path, typer.Argument(help="The run directory (trainguard run --run-dir).")]
AttemptOpt = Annotated[int | None, typer.Option(
    "--attempt", min=0, help="Attempt number (default: the last one).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]


@app.callback()
def _trace() -> None:
    """Per-rank tracing of a supervised run."""


@diagnose_app.callback()
def _diagnose() -> None:
    """Localize a hang or find stragglers in a run."""


def _windows(files: Sequence[RankFiles]) -> dict[int, list[TraceWindow]]:
    out_: dict[int, list[TraceWindow]] = {}
    for f in files:
        read = read_windows(f.events)
        for bad in read.bad_lines[:5]:
            warn(f"skipped a malformed trace record: {bad}")
        if len(read.bad_lines) > 5:
            warn(f"{len(read.bad_lines) - 5} more malformed trace records in {f.events}")
        out_[f.rank] = list(read.windows)
    return out_


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def _rank_summary(ws: Sequence[TraceWindow]) -> dict[str, Any]:
    steps = sum(w.steps for w in ws)
    ops: dict[str, list[float]] = {}
    for w in ws:
        for name, op in w.collectives.items():
            row = ops.setdefault(name, [0, 0.0, 0])
            row[0] += op.count
            row[1] += op.seconds
            row[2] += op.nbytes
    per = (lambda x: x / steps) if steps else (lambda x: 0.0)
    return {"windows": len(ws), "steps": steps,
            "step_s": per(sum(w.step_s for w in ws)),
            "compute_s": per(sum(w.compute_s for w in ws)),
            "collective_s": per(sum(w.collective_s for w in ws)),
            "data_s": per(sum(w.data_s for w in ws)),
            "checkpoint_s": per(sum(w.checkpoint_s for w in ws)),
            "collectives": {k: {"count": int(v[0]), "seconds": v[1], "bytes": int(v[2])}
                            for k, v in sorted(ops.items(), key=lambda kv: -kv[1][1])}}


def _state_doc(state: RankState | None) -> dict[str, Any] | None:
    return None if state is None else state.to_dict()


@app.command("show")
def show(run_dir: RunArg, attempt: AttemptOpt = None, json_out: JsonOpt = False) -> None:
    """Per rank: time per step split into compute, waiting in collectives and data loading,
    the busiest collectives, and where the rank stands now (its state file)."""
    try:
        files = rank_files(run_dir, attempt)
        windows = _windows(files)
        states, notes = read_states({f.rank: f.trace for f in files})
    except TrainguardError as exc:
        fail(str(exc), 2)
    ranks = []
    for f in files:
        st = states.get(f.rank)
        ranks.append({"rank": f.rank, "node": f.node, **_rank_summary(windows[f.rank]),
                      "state": _state_doc(st),
                      "process": process_state(st.pid) if st is not None else None})
    if json_out:
        out.print_json(json.dumps({"run_dir": str(run_dir), "attempt": files[0].attempt,
                                   "ranks": ranks, "notes": notes}))
        return
    for note in notes:
        warn(note)
    table = Table(title=f"[bold]{escape(str(run_dir))}[/] attempt {files[0].attempt}: "
                        "milliseconds per step", title_justify="left")
    for col in ("rank", "node", "steps", "step", "compute", "collectives", "data",
                "checkpoint", "top collective", "now"):
        table.add_column(col, justify="left" if col in ("node", "top collective", "now")
                         else "right")
    for r in ranks:
        top = next(iter(r["collectives"].items()), None)
        top_text = f"{top[0]} {top[1]['seconds'] / max(r['steps'], 1) * 1000:.1f}" \
            if top else "-"
        st = r["state"]
        now = "-"
        if st is not None:
            inside = [f"in {g['last']['op']} #{g['entered_seq']}" for g in st["groups"].values()
                      if g["inside"] and g["last"]]
            now = f"step {st['step']}" + (f", {st['span']}" if st["span"] else "") + \
                (f", {inside[0]}" if inside else "") + \
                (f" ({r['process']})" if r["process"] not in (None, "running") else "")
        table.add_row(str(r["rank"]), escape(r["node"]), str(r["steps"]), _ms(r["step_s"]),
                      _ms(r["compute_s"]), _ms(r["collective_s"]), _ms(r["data_s"]),
                      _ms(r["checkpoint_s"]), escape(top_text), escape(now))
    print_table(out, table)
    if not any(r["steps"] for r in ranks):
        err.print("no trace windows yet (tracing writes one per rank every 5 s; "
                  "TRAINGUARD_TRACE=0 turns it off)")


def _print_hang(doc: Mapping[str, Any], origin: str) -> None:
    out.print(f"[bold]hang[/] ({escape(origin)}): {escape(str(doc['kind']))}")
    out.print(f"  {escape(str(doc['summary']))}")
    for c in doc.get("culprits", []):
        out.print(f"  [bold red]rank {c.get('rank')}[/] host {escape(str(c.get('node')))} "
                  f"local rank {c.get('local_rank')} GPU {c.get('gpu')} pid {c.get('pid')} "
                  f"({escape(str(c.get('process')))}): {escape(str(c.get('reason')))}")
        if c.get("last_completed"):
            out.print(f"    last completed {escape(str(c['last_completed']))}, step "
                      f"{c.get('step')}" + (f", in {escape(str(c['span']))}" if c.get("span")
                                            else ""))
        for line in list(c.get("stack_top") or [])[:6]:
            out.print(f"    [dim]{escape(str(line))}[/]")
        for line in list(c.get("node_evidence") or [])[:4]:
            out.print(f"    node: {escape(str(line))}")
    for note in doc.get("notes", []):
        out.print(f"  [dim]note: {escape(str(note))}[/]")


def _no_hang(run_dir: Path, attempt: int | None) -> str:
    where = (f"attempt {attempt} has no hang diagnosis" if attempt is not None
             else f"no attempt of {run_dir} has a hang diagnosis")
    return (f"no hang: {where} (the supervisor writes attempts/<i>/hang.json "
            f"when it declares a hang); for a job that is hung right now without a supervisor "
            f"timeout, --now localizes from the ranks' state files")


@diagnose_app.command("hang")
def hang(
    run_dir: RunArg,
    attempt: Annotated[int | None, typer.Option(
        "--attempt", min=0, help="Attempt number (default: the latest attempt with a hang "
        "diagnosis; with --now or --flight, the last attempt).")] = None,
    json_out: JsonOpt = False,
    now: Annotated[bool, typer.Option(
        "--now", help="Read the ranks' state files now, even when the supervisor already "
        "wrote a diagnosis (a job that is running, or hung without a supervisor timeout).")]
    = False,
    flight: Annotated[Path | None, typer.Option(
        "--flight", help="A directory of PyTorch flight-recorder dumps (one per rank) to "
        "localize from instead of trainguard's state files.")] = None,
) -> None:
    """Which rank, host and collective a hang comes from: the supervisor's diagnosis
    (attempts/<i>/hang.json, made while the ranks were alive, with their stacks; written for
    runs with or without the SDK) of the latest attempt that hung, or of --attempt. A run
    that never hung says "no hang". --now or --flight: a diagnosis made now from the ranks'
    collective state files or flight-recorder dumps instead.

    Exit status: 1 when a hang is found (the supervisor's diagnosis; with --now or --flight,
    one that names the rank(s) at fault), 0 when none, 2 when the run directory or the
    diagnosis is unusable.
    """
    try:
        if now or flight is not None:
            files = rank_files(run_dir, attempt)
            diagnosis = _diagnose_now(files, flight)
            found = bool(diagnosis.culprits)
            doc = {"attempt": files[0].attempt, **diagnosis.to_dict()}
            origin = (f"attempt {files[0].attempt}, "
                      + ("flight-recorder dumps" if flight is not None else "state files, now"))
        else:
            known = attempts(run_dir)
            if attempt is not None and attempt not in known:
                raise TraceError(f"{run_dir}: no attempt {attempt} (attempts: "
                                 f"{', '.join(map(str, known))})")
            hung = diagnosed_attempts(run_dir)
            chosen = attempt if attempt is not None else (hung[-1] if hung else None)
            if chosen is None or chosen not in hung:
                summary = _no_hang(run_dir, attempt)
                if json_out:
                    out.print_json(json.dumps({"run_dir": str(run_dir), "attempt": attempt,
                                               "hang": False, "summary": summary}))
                else:
                    out.print(escape(summary))
                return
            saved = hang_path(run_dir, chosen)
            found = True  # the supervisor declared the hang
            doc = {**read_hang(saved), "attempt": chosen}
            origin = f"attempt {chosen}, the supervisor's, {saved}"
    except TrainguardError as exc:
        fail(str(exc), 2)
    if json_out:
        out.print_json(json.dumps({"origin": origin, "hang": True, **doc}))
    else:
        _print_hang(doc, origin)
    raise typer.Exit(1 if found else 0)


def _diagnose_now(files: Sequence[RankFiles], flight: Path | None) -> HangDiagnosis:
    states: dict[int, RankState | None]
    if flight is not None:
        from trainguard.trace.flight import read_dumps

        states = {d.rank: d.rank_state() for d in read_dumps(flight)}
        notes: list[str] = []
    else:
        states, notes = read_states({f.rank: f.trace for f in files})
    pids: dict[int, int | None] = {}
    for f in files:
        st = states.get(f.rank)
        pids[f.rank] = st.pid if st is not None else None
    procs = {r: process_state(pid) if pid is not None else "exited" for r, pid in pids.items()}
    if all(p == "exited" for p in procs.values()):
        procs = dict.fromkeys(procs, "unknown")  # a post-mortem: nothing is running any more
        notes.append("no rank's process is running: this is where the ranks last stood, "
                     "not proof that they hung")
    places = {f.rank: RankPlace(f.rank, f.node, None, None, pids[f.rank], procs[f.rank])
              for f in files}
    return localize_hang(states, places, None, [f.rank for f in files], notes)


def _supervisor_stragglers(run_dir: Path, attempt: int) -> tuple[dict[str, Any], ...]:
    """The supervisor's live findings in `attempt` (a damaged file is warned about, not
    fatal: the trace windows are the analysis)."""
    try:
        return read_supervisor_stragglers(stragglers_path(run_dir, attempt))
    except TraceError as exc:
        warn(f"{exc}: ignored")
        return ()


def _read_attempts(run_dir: Path, order: Sequence[int], cfg: StragglerConfig,
                   supervisor: Mapping[int, tuple[dict[str, Any], ...]]
                   ) -> Iterator[AttemptStragglers]:
    """Each attempt's analysis in `order`, read only when asked for."""
    from trainguard.trace.straggler import detect_stragglers
    from trainguard.trace.straggler_attempt import AttemptStragglers

    for index in order:
        files = rank_files(run_dir, index)
        report = detect_stragglers(_windows(files), cfg, {f.rank: f.node for f in files})
        yield AttemptStragglers(index, report, supervisor[index])


def _which(read: AttemptStragglers, passed: Sequence[AttemptStragglers],
           chosen_by_default: bool) -> str:
    why = "the latest attempt whose trace windows compare ranks" \
        if read.report.conclusive else "the latest attempt the supervisor flagged a straggler in"
    head = f"read attempt {read.attempt}" + (f" ({why})" if chosen_by_default else "")
    return head + "".join(f"; passed over {r.lacks}" for r in passed)


@diagnose_app.command("stragglers")
def stragglers(
    run_dir: RunArg,
    attempt: Annotated[int | None, typer.Option(
        "--attempt", min=0, help="Attempt number (default: the latest attempt whose trace "
        "windows compare ranks, or in which the supervisor flagged a straggler).")] = None,
    json_out: JsonOpt = False,
    min_slowdown: Annotated[float, typer.Option(
        "--min-slowdown", min=0.01, help="Flag a rank whose work per step is at least this "
        "fraction above its peers' (default 0.15).")] = 0.15,
    window: Annotated[float, duration_option(
        "--window", min=5.0, help="Seconds of trace windows each evaluation looks at.")]
    = 45.0,
    timeline: Annotated[bool, typer.Option(
        "--timeline", help="With --json: every evaluation (time, per-rank slowdown).")] = False,
) -> None:
    """Ranks that persistently do more work per step than their peers (the others wait for
    them in collectives): since when, where the extra time goes (compute or data loading), and
    what it costs the job. A healthy run lists none. Reads the latest attempt that can tell
    (a short last attempt compares nothing), and says which.

    Exit status: 1 when a straggler is found (in the trace windows, or by the supervisor
    while the attempt ran), 0 when none, 2 when no attempt can tell (the reason for each) or
    the run directory is unusable.
    """
    from trainguard.trace.straggler import StragglerConfig
    from trainguard.trace.straggler_attempt import cannot_tell, pick_attempt

    try:
        cfg = StragglerConfig(min_slowdown=min_slowdown, window_s=window)
        known = attempts(run_dir)
        if attempt is not None and attempt not in known:
            raise TraceError(f"{run_dir}: no attempt {attempt} (attempts: "
                             f"{', '.join(map(str, known))})")
        supervisor = {a: _supervisor_stragglers(run_dir, a) for a in known}
        order = [attempt] if attempt is not None else known[::-1]
        read, passed = pick_attempt(_read_attempts(run_dir, order, cfg, supervisor))
    except TrainguardError as exc:
        fail(str(exc), 2)
    elsewhere = [a for a in known if supervisor[a] and (read is None or a != read.attempt)]
    if read is None:
        if json_out:
            out.print_json(json.dumps({"run_dir": str(run_dir), "attempt": attempt,
                                       "cannot_tell": [r.lacks for r in passed],
                                       "supervisor_flagged_attempts": elsewhere}))
        also = f"; the supervisor flagged a straggler in attempt(s) " \
            f"{', '.join(map(str, elsewhere))}" if elsewhere else ""
        fail(cannot_tell(passed) + also, 2)
    which = _which(read, passed, attempt is None)
    if json_out:
        out.print_json(json.dumps({
            "run_dir": str(run_dir), "attempt": read.attempt, "read": which,
            "straggler_found": read.found, "supervisor": list(read.supervisor),
            "supervisor_flagged_attempts": elsewhere,
            **read.report.to_dict(timeline=timeline)}))
        raise typer.Exit(1 if read.found else 0)
    _print_stragglers(run_dir, read, which, elsewhere)
    raise typer.Exit(1 if read.found else 0)


def _print_stragglers(run_dir: Path, read: AttemptStragglers, which: str,
                      elsewhere: Sequence[int]) -> None:
    from trainguard.trace.straggler_attempt import describe_supervisor

    report = read.report
    out.print(escape(which))
    table = Table(title=f"[bold]{escape(str(run_dir))}[/] attempt {read.attempt}: work per "
                        "step vs peers (ms)", title_justify="left")
    for col in ("rank", "host", "windows", "step", "compute", "data", "collectives",
                "vs peers", "straggler"):
        table.add_column(col, justify="left" if col in ("host", "straggler") else "right")
    for r in report.ranks:
        b = r.breakdown
        table.add_row(str(r.rank), escape(r.host or "-"), str(r.windows),
                      _ms(b.step_s if b else None), _ms(b.compute_s if b else None),
                      _ms(b.data_s if b else None), _ms(b.collective_s if b else None),
                      "-" if r.slowdown is None else f"{r.slowdown:+.0%}",
                      "[bold red]yes[/]" if r.straggler else "")
    print_table(out, table)
    if report.note:
        err.print(escape(report.note))
    for st in report.stragglers:
        out.print(f"[bold red]straggler[/] {escape(st.describe())}")
    for ep in read.supervisor if not report.stragglers else ():
        out.print(f"[bold red]straggler[/] (flagged by the supervisor while attempt "
                  f"{read.attempt} ran) {escape(describe_supervisor(ep))}")
    if not read.found:
        out.print(f"no straggler in attempt {read.attempt}")
    if elsewhere:
        out.print(f"the supervisor flagged a straggler in attempt(s) "
                  f"{', '.join(map(str, elsewhere))} (--attempt N reads one)")
    if report.silent:
        warn(f"rank(s) {', '.join(map(str, report.silent))} stopped reporting trace windows "
             "(see trainguard diagnose hang)")


__all__ = ["app", "diagnose_app", "hang", "show", "stragglers"]
