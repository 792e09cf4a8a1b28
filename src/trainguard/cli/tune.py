"""`trainguard tune`: detector thresholds under a false-alarm budget, from the cluster's history."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from trainguard.cli.console import EXIT_FAILED, err, fail, out, stderr_is_tty, warn
from trainguard.cli.detect import (
    BasicAuth,
    End,
    MaxMemory,
    Metrics,
    PromUrl,
    Sources,
    Start,
    Step,
    Token,
    _load_truth,
    _need_input,
    load_telemetry,
    max_memory_bytes,
)
from trainguard.cli.helptext import reflowed_doc
from trainguard.detect.calibration import DetectorFile, detector_file, dumps
from trainguard.detect.truth import GroundTruth
from trainguard.detect.tune import (
    EARLY_RUNS,
    Budget,
    BudgetUnreachable,
    Figures,
    TuneResult,
    tune,
)
from trainguard.errors import TrainguardError

__all__ = ["tune_command"]


def _fmt_t(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%MZ")


class TuneProgress:
    """`tune`'s progress(stage, done, total) on `console`: with `bar`, a progress bar per stage
    (scoring the history block by block, replaying each candidate setting, the early-warning
    search's detector runs, measuring the chosen one); without, one line when a stage starts
    and one when it is done (logs, --json)."""

    def __init__(self, console: Console, *, bar: bool) -> None:
        self.console = console
        self.stage = ""
        self.bar: Progress | None = Progress(
            TextColumn("tune: {task.description}"), BarColumn(), TaskProgressColumn(),
            TimeElapsedColumn(), console=console) if bar else None
        self._task: TaskID | None = None

    def __enter__(self) -> TuneProgress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, stage: str, done: int, total: int) -> None:
        new = stage != self.stage
        self.stage = stage
        if self.bar is None:
            if new:
                self.console.print(f"tune: {stage}...")
            if done >= total:
                self.console.print(f"tune: {stage} done")
            return
        if new or self._task is None:
            self._task = self.bar.add_task(stage, total=total)
        self.bar.update(self._task, completed=done, total=total)


def want_bar(json_out: bool, is_tty: bool) -> bool:
    """A progress bar only on a terminal, and not with --json (its output is for programs)."""
    return is_tty and not json_out


def _row(label: str, f: Figures) -> tuple[str, ...]:
    return (label, f"{_fmt_t(f.span[0])} .. {_fmt_t(f.span[1])}", str(f.n_failures),
            str(f.detected), str(f.early), str(f.false_positives), f"{f.fp_per_day:.2f}",
            f"{f.fp_per_day_upper95:.2f}")


def _print(res: TuneResult, out_file: Path | None) -> None:
    c = res.chosen
    out.print(f"chosen: score_on={c.score_on:g} score_off={c.score_off:g} "
              f"persist_blocks={c.persist_blocks} persist_gauge_blocks={c.persist_gauge_blocks} "
              f"cooldown_s={c.cooldown_s:g} ({res.candidates} settings tried)")
    out.print(early_line(res))
    t = Table(title=f"budget {res.budget.fp_per_day:g} false alarms/day per "
              f"{res.budget.per_nodes} nodes; {res.size}; early = alerted >= 1 min "
              "before the XID", title_justify="left")
    for col in ("config / part", "range (UTC)", "failures", "detected", "early", "false alarms",
                f"FA/day/{res.budget.per_nodes}", "95% up to"):
        t.add_column(col)
    t.add_row(*_row("tuned, tuning part", res.tune))
    t.add_row(*_row("tuned, held-out part", res.heldout))
    t.add_row(*_row("default, tuning part", res.base_tune))
    t.add_row(*_row("default, held-out part", res.base_heldout))
    out.print(t)
    kinds = ", ".join(f"{k.kind} {k.fp_per_day:.2f} (95% up to {k.fp_per_day_upper95:.2f})"
                      for k in res.heldout.kinds)
    out.print(f"held-out false alarms/day/{res.budget.per_nodes} by kind: {kinds}")
    if out_file is not None:
        out.print(f"wrote {out_file}")


def early_line(res: TuneResult) -> str:
    """What the early-warning search chose, in one line."""
    e = res.early
    if e is None:
        return "early warnings: not searched (--no-early-search): the base config's thresholds"
    tried = (f"{len(e.trials) - 1} settings tried besides the base, {e.runs} detector runs, "
             f"--early-runs {e.max_runs}")
    if not e.moved:
        return f"early warnings: the base config's thresholds kept ({tried})"
    moved = ", ".join(f"{k} {b:g} -> {c:g}" for k, b, c in e.changes())
    way = "stricter" if e.chosen.step > 0 else "looser"
    return f"early warnings: {e.chosen.group} one level {way}: {moved} ({tried})"


def heldout_bound_warning(res: TuneResult) -> str | None:
    """When the held-out part is too short for its 95% upper bound to fit the budget: the
    bound, and how many held-out days would make it fit at zero observed false alarms."""
    if not res.heldout_too_short:
        return None
    h, b = res.heldout, res.budget
    head = (f"the held-out part ({h.days:.1f} days, {res.n_nodes} nodes, {h.false_positives} "
            f"false alarms) bounds the false alarms at {h.fp_per_day_upper95:.2f}/day per "
            f"{b.per_nodes} nodes (95% upper bound), over the {b.fp_per_day:g} budget: too "
            "short to show that the budget is met")
    need = res.heldout_days_needed
    if math.isinf(need):
        return head + "; no length of history can show a budget of 0"
    total_days = res.tune.days + h.days
    share = h.days / total_days if total_days > 0 else 1.0
    return (head + f"; with no false alarm the bound fits the budget after {need:.1f} held-out "
            f"days on {res.n_nodes} nodes (about {need / share:.0f} days of history at this "
            "--split)")


def tune_warnings(res: TuneResult) -> list[str]:
    """What the figures do not show, one line each (stderr, and "warnings" in --json)."""
    found: list[str] = []
    if res.hard_over_budget:
        found.append(
            f"hard-evidence alerts alone gave {res.replayed_tune.hard_fp_per_day:.2f} false "
            f"alarms/day per {res.budget.per_nodes} nodes on the tuning part, over the budget: "
            "predictive alerts were tuned to raise none; the findings below say which metrics")
        found += [f.text(res.budget.per_nodes, "tuning part") for f in res.replayed_tune.hard]
    if res.heldout.fp_per_day > res.budget.fp_per_day:
        found.append(
            f"the held-out part has {res.heldout.fp_per_day:.2f} false alarms/day per "
            f"{res.budget.per_nodes} nodes, over the budget: the tuning part did not predict "
            "it (more history helps)")
    bound = heldout_bound_warning(res)
    if bound is not None:
        found.append(bound)
    if res.heldout.n_failures == 0:
        found.append("no known failure in the held-out part: its detection figures say nothing")
    return found


def _write(path: Path, text: str) -> None:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    except OSError as exc:
        fail(f"--out: cannot write {path}: {exc.strerror or exc}", 2)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        fail(f"--out: cannot write {path}: {exc.strerror or exc}", 2)


def _store_truth(db: str) -> GroundTruth:
    """Read before the telemetry: a wrong --db fails at once, not after minutes of reading."""
    from trainguard.cli.storeopen import open_store
    from trainguard.detect.tune_truth import truth_from_events

    with open_store(db, readonly=True) as store:
        return truth_from_events(store.events())


@reflowed_doc
def tune_command(
    ctx: typer.Context,
    sources: Sources = None,
    prometheus: PromUrl = None,
    start: Start = None,
    end: End = None,
    step: Step = None,
    metric: Metrics = None,
    bearer_token_file: Token = None,
    basic_auth: BasicAuth = None,
    failures: Annotated[Path | None, typer.Option(
        help="Known failures as JSON lines (node, time, xid[, type]); default: --kernel-logs, "
        "else --db, else labels.jsonl next to the telemetry, else the XID gauge.")] = None,
    kernel_logs: Annotated[list[Path] | None, typer.Option(
        "--kernel-logs", help="Take the failures from NVRM XID lines in these kernel logs.")
    ] = None,
    db: Annotated[str | None, typer.Option(
        "--db", help="Take the failures from the XID events in this event store (SQLite path "
        "or postgresql:// URL), as `logs --db` and `watch` record them.")] = None,
    fp_per_day: Annotated[float, typer.Option(
        "--fp-per-day", help="False-alarm budget: alerts per day per --per-nodes nodes.",
        min=0.0)] = 0.3,
    per_nodes: Annotated[int, typer.Option(
        "--per-nodes", help="Cluster size the budget is stated for.", min=1)] = 64,
    split: Annotated[float, typer.Option(
        help="Tune on this fraction of the history (the earliest), measure on the rest.",
        min=0.05, max=0.95)] = 0.5,
    config: Annotated[Path | None, typer.Option(
        "--config", help="Start from this detector config file (default: built-in defaults).")
    ] = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="Write the chosen config and its calibration (TOML) to this file, for "
        "`trainguard detect --config`, `trainguard backtest --config` and `trainguard watch "
        "--detector-config`.")] = None,
    no_early_search: Annotated[bool, typer.Option(
        "--no-early-search", help="Keep the early-warning (precursor) thresholds of the base "
        "config: tune the episode settings only.")] = False,
    early_runs: Annotated[int, typer.Option(
        "--early-runs", help="At most this many detector runs over the history for the "
        "early-warning search (each setting tried is one, a looser one's guard another).",
        min=1)] = EARLY_RUNS,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    max_memory: MaxMemory = "8GiB",
) -> None:
    """Choose the detector's thresholds and persistence from the cluster's own history and
    known failures: the most failures alerted at least a minute early, within a false-alarm
    budget. Tunes on the earlier part of the history and reports the figures of the later part
    it never saw.

    The early-warning (precursor) thresholds are searched too, at the cost of one detector run
    over the history per setting tried (--early-runs, --no-early-search).

    Exit status: 0 when a config was chosen; 1 when no setting meets the budget on the tuning
    part; 2 when the history or the failures cannot be read, or are too few to tune on.
    """
    _need_input(ctx, sources, prometheus)
    mem = max_memory_bytes(max_memory)
    if out_file is not None and out_file.is_dir():
        fail(f"--out: {out_file} is a directory", 2)
    if out_file is not None and not out_file.parent.is_dir():
        fail(f"--out: no such directory: {out_file.parent}", 2)
    try:
        base = detector_file(config, mem).detect
        budget = Budget(fp_per_day, per_nodes)
        stored = _store_truth(db) if db is not None and failures is None and not kernel_logs \
            else None
        tel = load_telemetry(sources, prometheus, start, end, step, metric, bearer_token_file,
                             basic_auth, max_memory=mem)
        if stored is not None:
            truth, truth_from = stored, f"the XID events in {db}"
        else:
            truth, truth_from = _load_truth(tel, sources, failures, kernel_logs)[:2]
        days = tel.times.size * tel.step_s / 86400
        err.print(f"tune: {len(tel.nodes)} nodes, {days:.1f} days; {len(truth.failures)} "
                  f"failures from {truth_from}")
        with TuneProgress(err, bar=want_bar(json_out, stderr_is_tty())) as progress:
            res = tune(tel, truth, budget, base=base, fraction=split, progress=progress,
                       early_runs=0 if no_early_search else early_runs)
    except BudgetUnreachable as exc:
        fail(str(exc), EXIT_FAILED)
    except TrainguardError as exc:
        fail(str(exc), 2)
    if out_file is not None:
        header = (f"written by trainguard tune: budget {fp_per_day:g} false alarms/day per "
                  f"{per_nodes} nodes, tuned on {_fmt_t(res.tune.span[0])} .. "
                  f"{_fmt_t(res.tune.span[1])},",
                  f"measured on {_fmt_t(res.heldout.span[0])} .. {_fmt_t(res.heldout.span[1])} "
                  f"({res.size})")
        _write(out_file, dumps(DetectorFile(res.chosen, res.calibration()), header))
    warnings = tune_warnings(res)
    for line in warnings:
        warn(line)
    if json_out:
        doc = res.to_dict()
        doc["warnings"] = warnings
        doc["truth"] = truth_from
        if out_file is not None:
            doc["out"] = str(out_file)
        typer.echo(json.dumps(doc, indent=2))
        return
    _print(res, out_file)
