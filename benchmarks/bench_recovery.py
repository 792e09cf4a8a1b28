"""Benchmark: failure-to-resume of `trainguard run` vs `torchrun --max-restarts` (issue #4).

Issue #4's target: on the local backend, the time from a fault to the first completed step after
the restart is <= 30 s for a crash and no slower than torchrun on the same fault; a hang is
detected within ``--hang-timeout`` + 5 s.

Both systems run examples/train_gpt.py with the same arguments and the same world size, and the
benchmark delivers the fault itself, the same way for both: it follows the loss log until step
``--kill-step`` is done, then sends SIGKILL (crash) or SIGSTOP (hang) to the process of rank 1.
The time from the fault to the first step after the restart is split at these points:

1. detected: trainguard's ``failed_at``; torchrun's "Sending process ... closing signal" line;
2. stopped: the old ranks are gone (trainguard's attempt ``ended``; torchrun's "failed
   (exitcode ...)" line, logged once it has closed every worker);
3. relaunched: trainguard's next attempt ``started``; for torchrun the first new process's start
   (its SDK ``imports`` phase, read from /proc): torchrun has no backoff, so the "backoff" column
   is its re-rendezvous of the agents before it spawns the workers;
4. ready: the last rank begins loading the checkpoint (imports, process group, model built);
5. loaded: the last rank ends its ``ckpt_load`` phase;
6. first step: the last rank ends its ``first_step`` phase (the first step after the restart).

The columns are the gaps between consecutive points, so they add up to the total. Phases come
from the SDK's event files; torchrun's ranks write theirs through ``TRAINGUARD_EVENTS`` with
``{rank}`` and ``{restart}`` in the path.

torchrun runs with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (``--torchrun-shared-store`` drops
it): with the TCP store shared between the agent and the workers (the c10d default), a restarted
worker can read the previous round's gloo addresses from the store and its process group never
forms (pytorch/pytorch#135712). With torch 2.13 on a 2-core machine, 3 of 5 such runs never
recovered (a restart failed in gloo's connectFullMesh and a later one hung in
``init_process_group``), one needed three restarts and one recovered at once.

    python benchmarks/bench_recovery.py                # 3 repeats, about 3 minutes on 2 cores
    python benchmarks/bench_recovery.py --repeats 1 --hang-timeout 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_gpt.py"

COLUMNS = ("detection", "teardown", "backoff", "relaunch", "ckpt_load", "first_step")
"""The split, in order: the gaps between consecutive `Timeline` points."""

CRASH_TARGET_S = 30.0
HANG_MARGIN_S = 5.0
TORCHRUN_HANG_WAIT_S = 30.0
"""How long past the hang timeout torchrun gets to notice a hang."""
EXIT_GRACE_S = 15.0
"""How long a run may take to exit once its last step is logged (normally well under 1 s)."""

Events = Mapping[int, Sequence[Mapping[str, Any]]]
"""SDK records of one attempt, by rank."""


# ---- pure: timelines and splits ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timeline:
    """Unix times of one recovery, fault first; None where it could not be observed."""

    fault: float
    detected: float | None
    stopped: float | None
    relaunched: float | None
    ready: float | None
    loaded: float | None
    first_step: float | None


@dataclass(frozen=True, slots=True)
class Split:
    """Seconds of each recovery stage (`COLUMNS`) and the total, fault to first step.

    A stage whose end was not observed is None and the next observed stage absorbs it (its name
    is in ``merged``), so the stages always add up to ``total_s``.
    """

    detection_s: float | None
    teardown_s: float | None
    backoff_s: float | None
    relaunch_s: float | None
    ckpt_load_s: float | None
    first_step_s: float | None
    total_s: float | None
    restarts: int
    merged: tuple[str, ...] = ()

    def stage(self, name: str) -> float | None:
        value: float | None = getattr(self, f"{name}_s")
        return value


def split_timeline(line: Timeline, restarts: int) -> Split:
    """The gaps between consecutive observed points of ``line``."""
    points = (line.detected, line.stopped, line.relaunched, line.ready, line.loaded,
              line.first_step)
    stages: dict[str, float | None] = {}
    merged: list[str] = []
    last, skipped = line.fault, False
    for name, point in zip(COLUMNS, points, strict=True):
        if point is None:
            stages[name], skipped = None, True
            continue
        stages[name] = point - last
        if skipped:
            merged.append(name)
        last, skipped = point, False
    total = None if line.first_step is None else line.first_step - line.fault
    return Split(stages["detection"], stages["teardown"], stages["backoff"], stages["relaunch"],
                 stages["ckpt_load"], stages["first_step"], total, restarts, tuple(merged))


@dataclass(frozen=True, slots=True)
class Span:
    """One phase over the ranks: the first start, the last start and the last end."""

    first_start: float
    last_start: float
    last_end: float


def phase_spans(events: Events) -> dict[str, Span]:
    """Each phase over the ranks (for a rank that recorded one twice, its last record)."""
    per_rank: dict[str, dict[int, tuple[float, float]]] = {}
    for rank, records in events.items():
        for rec in records:
            if rec.get("kind") == "phase":
                per_rank.setdefault(str(rec["name"]), {})[rank] = (float(rec["start"]),
                                                                   float(rec["end"]))
    return {name: Span(min(s for s, _ in spans.values()), max(s for s, _ in spans.values()),
                       max(e for _, e in spans.values()))
            for name, spans in per_rank.items()}


def _restart_points(events: Events) -> tuple[float | None, float | None, float | None]:
    """ready (every rank begins loading the checkpoint), loaded, first step."""
    spans = phase_spans(events)
    ckpt, first = spans.get("ckpt_load"), spans.get("first_step")
    ready = ckpt.last_start if ckpt is not None else None
    if ready is None and "dist_init" in spans:
        ready = spans["dist_init"].last_end
    return (ready, None if ckpt is None else ckpt.last_end,
            None if first is None else first.last_end)


def trainguard_split(summary: Mapping[str, Any], restart_events: Events, fault: float) -> Split:
    """The split of a `trainguard run` that recovered: ``summary`` is its summary.json,
    ``restart_events`` the SDK records of its last attempt."""
    attempts = summary["attempts"]
    if len(attempts) < 2:
        raise ValueError("the run has no restart (one attempt)")
    first, last = attempts[0], attempts[-1]
    failed_at = first.get("failed_at")
    ready, loaded, first_step = _restart_points(restart_events)
    line = Timeline(fault, None if failed_at is None else float(failed_at), float(first["ended"]),
                    float(last["started"]), ready, loaded, first_step)
    return split_timeline(line, len(attempts) - 1)


# ---- pure: torchrun's log ----------------------------------------------------------------------

_GLOG = re.compile(r"([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})\s+\d+ [^\]]*\] (.*)")
_CLOSING = re.compile(r"Sending process \d+ closing signal SIG\w+")
_FAILED = re.compile(r"failed \(exitcode: -?\d+\) local_rank: \d+ \(pid: \d+\)")


@dataclass(frozen=True, slots=True)
class LogLine:
    t: float
    level: str
    message: str


def parse_glog(text: str, near: float) -> list[LogLine]:
    """torchrun's log lines (``W1121 14:34:44.786000 19989 file.py:874] message``).

    The stamp is local time without a year: the year that puts it nearest ``near`` is taken.
    Other lines (the workers' output on the same stream) are skipped.
    """
    ref_year = datetime.fromtimestamp(near).year
    lines = []
    for raw in text.splitlines():
        m = _GLOG.search(raw)
        if m is None:
            continue
        level, mon, day, hh, mm, ss, us, message = m.groups()
        stamps = []
        for year in (ref_year - 1, ref_year, ref_year + 1):
            with suppress(ValueError):  # 29 February
                stamps.append(datetime(year, int(mon), int(day), int(hh), int(mm), int(ss),
                                       int(us)).timestamp())
        if stamps:
            lines.append(LogLine(min(stamps, key=lambda t: abs(t - near)), level, message))
    return lines


def torchrun_detection(lines: Sequence[LogLine], fault: float) -> tuple[float | None, float | None]:
    """When torchrun noticed the failure after ``fault`` and when it had closed the workers.

    It logs "Sending process P closing signal SIGTERM" for each worker still running right after
    it notices a failure, then "failed (exitcode: ...)" once they are gone. With no worker left
    to close, only the second line appears: it is then both points. The stamps have millisecond
    resolution, hence the small allowance before ``fault``.
    """
    after = [ln for ln in lines if ln.t >= fault - 0.002]
    closing = next((ln.t for ln in after if _CLOSING.search(ln.message)), None)
    failed = next((ln.t for ln in after if _FAILED.search(ln.message)
                   and (closing is None or ln.t >= closing)), None)
    if closing is None:
        return failed, failed
    return closing, failed


def torchrun_split(log_text: str, restart_events: Events, restart: int, fault: float) -> Split:
    """The split of a torchrun run that recovered in round ``restart``; ``restart_events``
    are that round's SDK records (``imports`` starts when a process started)."""
    detected, stopped = torchrun_detection(parse_glog(log_text, fault), fault)
    spans = phase_spans(restart_events)
    relaunched = spans["imports"].first_start if "imports" in spans else None
    ready, loaded, first_step = _restart_points(restart_events)
    return split_timeline(Timeline(fault, detected, stopped, relaunched, ready, loaded,
                                   first_step), restart)


# ---- pure: small parsers -----------------------------------------------------------------------


def last_loss(text: str) -> tuple[int, str] | None:
    """The last complete ``step loss`` line of a loss log (a partly written line is skipped)."""
    complete = text[: text.rfind("\n") + 1]
    for line in reversed(complete.splitlines()):
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            return int(parts[0]), parts[1]
    return None


def parse_events(text: str) -> list[dict[str, Any]]:
    """SDK records (JSON lines); a partly written last line is skipped."""
    records = []
    for line in text.splitlines():
        with suppress(json.JSONDecodeError):
            rec = json.loads(line)
            if isinstance(rec, dict):
                records.append(rec)
    return records


def environ_has(environ: bytes, wanted: Mapping[str, str]) -> bool:
    """Whether a ``/proc/PID/environ`` blob sets every ``wanted`` variable to its value."""
    have = set(environ.split(b"\0"))
    return all(f"{k}={v}".encode() in have for k, v in wanted.items())


def descendants_of(root: int, parents: Mapping[int, int]) -> list[int]:
    """Every process below ``root`` given each process's parent, nearest first."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    queue = [root]
    while queue:
        kids = sorted(children.get(queue.pop(0), []))
        found.extend(kids)
        queue.extend(kids)
    return found


# ---- pure: the report --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stat:
    median: float
    low: float
    high: float
    n: int


def stat(values: Sequence[float | None]) -> Stat | None:
    """Median, min and max of the observed values (None when there are none)."""
    seen = [v for v in values if v is not None]
    if not seen:
        return None
    return Stat(statistics.median(seen), min(seen), max(seen), len(seen))


@dataclass(frozen=True, slots=True)
class Row:
    """One system/variant of the report: a split per run."""

    name: str
    splits: tuple[Split, ...]
    loss_ok: tuple[bool, ...] = ()
    """Per run: the final loss equals the fault-free run's."""
    note: str = ""
    """Shown instead of the stages (a fault that was not recovered from)."""
    compare: bool = True
    """Show total / torchrun's crash total (not for a hang: a different fault)."""
    runs: int | None = None
    """Runs behind the row (default: one per split)."""

    def values(self, column: str) -> list[float | None]:
        if column == "total":
            return [s.total_s for s in self.splits]
        return [s.stage(column) for s in self.splits]


def render_table(rows: Sequence[Row], torchrun_total: float | None) -> str:
    """Aligned text: per row the medians, and below them the min-max over the runs."""
    head = ["system", "runs", "restarts", *COLUMNS, "total", "vs torchrun", "loss=ref"]
    table: list[tuple[list[str], list[str]]] = []
    notes: dict[int, str] = {}
    any_merged = False
    for row in rows:
        restarts = sorted({s.restarts for s in row.splits})
        top = [row.name, str(len(row.splits) if row.runs is None else row.runs),
               ",".join(map(str, restarts)) or "-"]
        low = ["", "", ""]
        for column in (*COLUMNS, "total"):
            merged = any(column in s.merged for s in row.splits)
            any_merged |= merged
            st = stat(row.values(column))
            top.append("-" if st is None else f"{st.median:.2f}{'*' if merged else ''}")
            low.append(f"{st.low:.2f}-{st.high:.2f}" if st is not None and st.n > 1 else "")
        total = stat(row.values("total"))
        top.append(f"{total.median / torchrun_total:.2f}x"
                   if total is not None and torchrun_total and row.compare else "-")
        top.append(f"{sum(row.loss_ok)}/{len(row.loss_ok)}" if row.loss_ok else "-")
        low += ["", ""]
        if row.note:
            notes[len(table)] = row.note
        table.append((top, low))
    widths = [max(len(r[i]) for r in (head, *(c for pair in table for c in pair)))
              for i in range(len(head))]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join([cells[0].ljust(widths[0]),
                          *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    out = [fmt(head), "-" * len(fmt(head))]
    for i, (top, low) in enumerate(table):
        if i in notes:
            out.append(fmt(top[:3] + [""] * (len(head) - 3)).rstrip() + "  " + notes[i])
            continue
        out.append(fmt(top))
        if any(low):
            out.append(fmt(low).rstrip())
    out.append("seconds: median over the runs, min-max below it; vs torchrun: total / "
               "torchrun's total (medians)")
    if any_merged:
        out.append("* includes the stage before it, which could not be observed")
    return "\n".join(out)


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    text: str

    def __str__(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.text}"


def verdicts(crash_rows: Sequence[Row], torchrun: Row, hang: Row,
             hang_timeout_s: float) -> list[Verdict]:
    """Issue #4's targets, judged on the worst repeat (crash time, hang detection) and on the
    medians (trainguard vs torchrun)."""
    out = []
    tr_total = stat(torchrun.values("total"))
    for row in crash_rows:
        total = stat(row.values("total"))
        if total is None:
            out.append(Verdict(False, f"{row.name}: no recovery measured"))
            continue
        out.append(Verdict(total.high <= CRASH_TARGET_S,
                           f"{row.name}: crash recovered in <= {CRASH_TARGET_S:g} s "
                           f"(worst {total.high:.2f} s)"))
        if tr_total is None:
            out.append(Verdict(False, f"{row.name}: no torchrun recovery to compare with"))
        else:
            out.append(Verdict(total.median <= tr_total.median,
                               f"{row.name}: no slower than torchrun (median {total.median:.2f}"
                               f" s vs {tr_total.median:.2f} s)"))
    detections = stat(hang.values("detection"))
    limit = hang_timeout_s + HANG_MARGIN_S
    out.append(Verdict(detections is not None and detections.high <= limit,
                       f"{hang.name}: hang detected within --hang-timeout + {HANG_MARGIN_S:g} s"
                       f" = {limit:g} s (worst "
                       f"{'-' if detections is None else f'{detections.high:.2f}'} s)"))
    return out


# ---- processes ---------------------------------------------------------------------------------


class BenchError(Exception):
    """A run did not do what the benchmark needs (exit status, missing files, timeout)."""


class StuckAtExit(BenchError):
    """Training finished but a rank never exited.

    With torch 2.13 and gloo, roughly one run of the example in ten did this on a 2-core machine
    (seen under trainguard, fault-free runs included): the main thread frees DDP's reducer at the
    end of ``main()`` and, holding the GIL, waits in ``~ProcessGroupGloo`` for the work queue,
    while the gloo thread drops the last all-gather's work, whose tensors need the GIL
    (pytorch/pytorch#56297). It says nothing about recovery, so such a run is run again (once)
    and counted.
    """


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        if len(fields) > 1:
            parents[int(entry)] = int(fields[1])
    return parents


def find_rank_pid(root: int, wanted: Mapping[str, str]) -> int | None:
    """The process below ``root`` whose environment sets ``wanted`` (e.g. RANK=1)."""
    for pid in descendants_of(root, _parents()):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if environ_has(f.read(), wanted):
                    return pid
        except OSError:
            continue
    return None


def kill_tree(root: int) -> None:
    """SIGKILL ``root``'s process group and every process below it (torchrun starts each
    worker in a session of its own)."""
    below = descendants_of(root, _parents())
    for pid in (root, *below):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@contextmanager
def started(argv: Sequence[str], output: Path, env: Mapping[str, str]) -> Iterator[
        subprocess.Popen[bytes]]:
    """Start ``argv`` in a session of its own; whatever is left of it dies on the way out."""
    with open(output, "wb") as out:
        proc = subprocess.Popen(list(argv), cwd=ROOT, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:  # once reaped, its pid may already be someone else's
            kill_tree(proc.pid)
            proc.wait()


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def wait_for_step(loss_log: Path, step: int, proc: subprocess.Popen[bytes], output: Path,
                  timeout_s: float) -> None:
    """Poll the loss log every 10 ms until it shows ``step`` done."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with suppress(OSError):
            last = last_loss(loss_log.read_text())
            if last is not None and last[0] >= step:
                return
        if proc.poll() is not None:
            raise BenchError(f"{output.name}: exited with {proc.returncode} before step {step}:"
                             f"\n{_tail(output)}")
        time.sleep(0.01)
    raise BenchError(f"{output.name}: step {step} not reached in {timeout_s:g} s")


def wait_exit(proc: subprocess.Popen[bytes], output: Path, loss_log: Path, last_step: int,
              timeout_s: float) -> None:
    """Wait for a clean exit; `StuckAtExit` when the loss log shows ``last_step`` done but the
    run is still there `EXIT_GRACE_S` later."""
    deadline = time.monotonic() + timeout_s
    done_at = None
    while proc.poll() is None:
        now = time.monotonic()
        if done_at is None:
            with suppress(OSError):
                last = last_loss(loss_log.read_text())
                if last is not None and last[0] >= last_step:
                    done_at = now
        elif now - done_at > EXIT_GRACE_S:
            raise StuckAtExit(f"{output.name}: training finished, but the run had not exited "
                              f"{EXIT_GRACE_S:g} s later")
        if now > deadline:
            raise BenchError(f"{output.name}: still running after {timeout_s:g} s:\n"
                             f"{_tail(output)}")
        time.sleep(0.05)
    if proc.returncode != 0:
        raise BenchError(f"{output.name}: exit status {proc.returncode}:\n{_tail(output)}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _program(name: str) -> str:
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise BenchError(f"{name} not found next to {sys.executable} or on PATH")
    return found


def _base_env() -> dict[str, str]:
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRAINGUARD_", "TORCHELASTIC_")) and k not in drop}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _read_events(paths: Sequence[Path]) -> dict[int, list[dict[str, Any]]]:
    events: dict[int, list[dict[str, Any]]] = {}
    for path in paths:
        for rec in parse_events(path.read_text()):
            rank = rec.get("rank")
            events.setdefault(int(rank) if isinstance(rank, int) else -1, []).append(rec)
    return events


# ---- scenarios ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    repeats: int
    hang_repeats: int
    nproc: int
    steps: int
    kill_step: int
    ckpt_every: int
    hang_timeout_s: float
    run_timeout_s: float
    torchrun_shared_store: bool


@dataclass(frozen=True, slots=True)
class Outcome:
    """One run with a fault: its split (None when it did not recover) and what it left."""

    split: Split | None
    final: tuple[int, str] | None
    summary: Mapping[str, Any]
    detection_s: float | None = None


def _train_args(cfg: Config, out: Path) -> list[str]:
    return [str(EXAMPLE), "--steps", str(cfg.steps), "--ckpt-every", str(cfg.ckpt_every),
            "--ckpt-dir", str(out / "ckpt"), "--loss-log", str(out / "loss.txt")]


def _final(out: Path) -> tuple[int, str] | None:
    try:
        return last_loss((out / "loss.txt").read_text())
    except OSError:
        return None


def _rank_pid_from_state(run_dir: Path, rank: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with suppress(OSError, json.JSONDecodeError):
            state = json.loads((run_dir / "state.json").read_text())
            for r in state.get("ranks", []):
                if r.get("rank") == rank and isinstance(r.get("pid"), int):
                    return int(r["pid"])
        time.sleep(0.01)
    raise BenchError(f"{run_dir}/state.json names no pid for rank {rank}")


def run_trainguard(cfg: Config, out: Path, *, fault: signal.Signals | None,
                   backoff_s: float | None = None) -> Outcome:
    """`trainguard run` on ``cfg.nproc`` virtual nodes; ``fault`` goes to rank 1 at the kill
    step (SIGKILL: a crash, SIGSTOP: a hang)."""
    out.mkdir(parents=True)
    run_dir = out / "run"
    argv = [_program("trainguard"), "run", "--no-db", "-q",
            "--nodes", ",".join(f"node{i + 1}" for i in range(cfg.nproc)),
            "--nproc-per-node", "1", "--run-dir", str(run_dir)]
    if backoff_s is not None:
        argv += ["--backoff", f"{backoff_s:g}"]
    if fault is signal.SIGSTOP:
        argv += ["--hang-timeout", f"{cfg.hang_timeout_s:g}"]
    argv += ["--", sys.executable, *_train_args(cfg, out)]
    output = out / "trainguard.out"
    with started(argv, output, _base_env()) as proc:
        t_fault = None
        if fault is not None:
            wait_for_step(out / "loss.txt", cfg.kill_step, proc, output, cfg.run_timeout_s)
            pid = _rank_pid_from_state(run_dir, 1, 5.0)
            os.kill(pid, fault)
            t_fault = time.time()
        wait_exit(proc, output, out / "loss.txt", cfg.steps - 1, cfg.run_timeout_s)
    summary = json.loads((run_dir / "summary.json").read_text())
    if t_fault is None:
        return Outcome(None, _final(out), summary)
    attempts = summary["attempts"]
    if len(attempts) < 2:
        raise BenchError(f"{out.name}: the fault did not cause a restart")
    last = len(attempts) - 1
    events = _read_events(sorted((run_dir / "attempts" / str(last)).glob("*/rank*.events.jsonl")))
    split = trainguard_split(summary, events, t_fault)
    failed_at = attempts[0].get("failed_at")
    detection = None if failed_at is None else float(failed_at) - t_fault
    return Outcome(split, _final(out), summary, detection)


def run_torchrun(cfg: Config, out: Path, *, fault: signal.Signals) -> Outcome:
    """`torchrun --max-restarts 3` on one node with ``cfg.nproc`` workers, the same fault.

    For SIGSTOP (a hang) torchrun gets ``--hang-timeout`` + `TORCHRUN_HANG_WAIT_S` to notice;
    its ``detection_s`` is None when it did not, and the run is then killed.
    """
    out.mkdir(parents=True)
    argv = [_program("torchrun"), "--nnodes", "1", "--nproc-per-node", str(cfg.nproc),
            "--max-restarts", "3", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{free_port()}", *_train_args(cfg, out)]
    env = _base_env()
    env["TRAINGUARD_EVENTS"] = str(out / "r{rank}.a{restart}.jsonl")
    if not cfg.torchrun_shared_store:
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    output = out / "torchrun.out"
    with started(argv, output, env) as proc:
        wait_for_step(out / "loss.txt", cfg.kill_step, proc, output, cfg.run_timeout_s)
        pid = find_rank_pid(proc.pid, {"RANK": "1", "TORCHELASTIC_RESTART_COUNT": "0"})
        if pid is None:
            raise BenchError(f"{out.name}: no process of rank 1 below torchrun")
        os.kill(pid, fault)
        t_fault = time.time()
        if fault is signal.SIGSTOP:
            detected = _torchrun_notices(proc, output, t_fault,
                                         cfg.hang_timeout_s + TORCHRUN_HANG_WAIT_S)
            return Outcome(None, None, {}, None if detected is None else detected - t_fault)
        wait_exit(proc, output, out / "loss.txt", cfg.steps - 1, cfg.run_timeout_s)
    restarts = [int(m.group(1)) for p in out.glob("r*.a*.jsonl")
                if (m := re.fullmatch(r"r\d+\.a(\d+)\.jsonl", p.name))]
    last = max(restarts, default=0)
    if last == 0:
        raise BenchError(f"{out.name}: torchrun did not restart the workers")
    events = _read_events(sorted(out.glob(f"r*.a{last}.jsonl")))
    split = torchrun_split(output.read_text(errors="replace"), events, last, t_fault)
    return Outcome(split, _final(out), {}, split.detection_s)


def _torchrun_notices(proc: subprocess.Popen[bytes], output: Path, fault: float,
                      wait_s: float) -> float | None:
    """When torchrun reacted to the stopped worker (None: not within ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        detected, _ = torchrun_detection(parse_glog(output.read_text(errors="replace"), fault),
                                         fault)
        if detected is not None:
            return detected
        if proc.poll() is not None:
            return time.time()
        time.sleep(0.1)
    return None


# ---- main --------------------------------------------------------------------------------------


def _env_default(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def parse_args(argv: Sequence[str] | None) -> Config:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int,
                    default=int(_env_default("BENCH_RECOVERY_REPEATS", 3)),
                    help="crash runs per system (default 3, $BENCH_RECOVERY_REPEATS)")
    ap.add_argument("--hang-repeats", type=int,
                    default=int(_env_default("BENCH_RECOVERY_HANG_REPEATS", 1)),
                    help="hang runs per system (default 1: torchrun's wait dominates)")
    ap.add_argument("--nproc", type=int, default=int(_env_default("BENCH_RECOVERY_NPROC", 2)),
                    help="ranks: trainguard N nodes x 1, torchrun 1 node x N (default 2)")
    ap.add_argument("--steps", type=int, default=int(_env_default("BENCH_RECOVERY_STEPS", 80)))
    ap.add_argument("--kill-step", type=int,
                    default=int(_env_default("BENCH_RECOVERY_KILL_STEP", 30)))
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--hang-timeout", type=float,
                    default=_env_default("BENCH_RECOVERY_HANG_TIMEOUT", 10.0),
                    help="trainguard's --hang-timeout in seconds (default 10)")
    ap.add_argument("--run-timeout", type=float, default=240.0,
                    help="give up on a run after this many seconds")
    ap.add_argument("--torchrun-shared-store", action="store_true",
                    help="let torchrun share its rendezvous TCP store with the workers "
                         "(torch's default; see the module docstring)")
    a = ap.parse_args(argv)
    if a.nproc < 2:
        ap.error("--nproc must be >= 2 (rank 1 receives the fault)")
    if not 0 < a.kill_step < a.steps - 1:
        ap.error("--kill-step must be between 1 and --steps - 2")
    if a.repeats < 1 or a.hang_repeats < 1 or a.hang_timeout <= 0:
        ap.error("--repeats and --hang-repeats must be >= 1, --hang-timeout > 0")
    return Config(a.repeats, a.hang_repeats, a.nproc, a.steps, a.kill_step, a.ckpt_every,
                  a.hang_timeout, a.run_timeout, a.torchrun_shared_store)


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the report; 0 when every target is met, 1 when one is not,
    2 when a run failed."""
    cfg = parse_args(argv)
    try:
        return _main(cfg)
    except BenchError as exc:
        print(f"bench_recovery: {exc}", file=sys.stderr)
        return 2


def _main(cfg: Config) -> int:
    t0 = time.perf_counter()
    H = cfg.hang_timeout_s
    crash_variants: list[tuple[str, float | None]] = [
        ("trainguard crash, backoff 1 s (default)", None), ("trainguard crash, backoff 0", 0.0)]
    results: dict[str, list[Outcome]] = {name: [] for name, _ in crash_variants}
    results["torchrun crash"] = []
    results["tg hang"], results["tr hang"] = [], []
    reruns: list[str] = []

    def once(run: Callable[[Path], Outcome], out: Path) -> Outcome:
        try:
            return run(out)
        except StuckAtExit as exc:
            reruns.append(out.name)
            _progress(f"{exc}: running it again")
            return run(out.with_name(f"{out.name}-again"))

    tmp = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    try:
        ref = once(partial(run_trainguard, cfg, fault=None), tmp / "reference").final
        _progress(f"fault-free reference: final loss {ref}")
        for i in range(cfg.repeats):
            for name, backoff in crash_variants:
                o = once(partial(run_trainguard, cfg, fault=signal.SIGKILL, backoff_s=backoff),
                         tmp / f"tg-b{backoff}-{i}")
                results[name].append(o)
                _progress(f"{name} #{i + 1}: total {_fmt(o.split)} s")
            o = once(partial(run_torchrun, cfg, fault=signal.SIGKILL), tmp / f"torchrun-{i}")
            results["torchrun crash"].append(o)
            _progress(f"torchrun crash #{i + 1}: total {_fmt(o.split)} s")
        for i in range(cfg.hang_repeats):
            o = once(partial(run_trainguard, cfg, fault=signal.SIGSTOP), tmp / f"tg-hang-{i}")
            category = o.summary["attempts"][0].get("failure_category")
            if category != "collective_hang":
                raise BenchError(f"trainguard hang: attempt 0 classified {category!r}, "
                                 "expected 'collective_hang'")
            results["tg hang"].append(o)
            _progress(f"trainguard hang #{i + 1}: detected after {o.detection_s:.2f} s")
            o = run_torchrun(cfg, tmp / f"torchrun-hang-{i}", fault=signal.SIGSTOP)
            results["tr hang"].append(o)
            _progress(f"torchrun hang #{i + 1}: "
                      + ("not detected" if o.detection_s is None else
                         f"detected after {o.detection_s:.2f} s"))
    except BenchError as exc:
        raise BenchError(f"{exc}\n(the runs are kept in {tmp})") from None
    shutil.rmtree(tmp, ignore_errors=True)

    def row(name: str, key: str, compare: bool = True) -> Row:
        outs = results[key]
        return Row(name, tuple(o.split for o in outs if o.split is not None),
                   tuple(o.final == ref for o in outs), compare=compare)

    crash_rows = [row(name, name) for name, _ in crash_variants]
    torchrun = row("torchrun crash", "torchrun crash")
    hang = row(f"trainguard hang, --hang-timeout {H:g}", "tg hang", compare=False)
    tr_hang = Row("torchrun hang", (), note=_hang_note(
        [o.detection_s for o in results["tr hang"]], H + TORCHRUN_HANG_WAIT_S),
        runs=len(results["tr hang"]))
    tr_total = stat(torchrun.values("total"))
    print(f"fault: rank 1 of {cfg.nproc}, SIGKILL (crash) or SIGSTOP (hang) after step "
          f"{cfg.kill_step} of {cfg.steps}; checkpoint every {cfg.ckpt_every} steps; "
          f"fault-free final loss {ref[1] if ref else '?'}")
    print(render_table([*crash_rows, torchrun, hang, tr_hang],
                       None if tr_total is None else tr_total.median))
    checks = verdicts(crash_rows, torchrun, hang, H)
    for v in checks:
        print(v)
    if reruns:
        print(f"run again after a rank hung at exit (see StuckAtExit): {', '.join(reruns)}")
    print(f"wall time {time.perf_counter() - t0:.0f} s")
    return 0 if all(v.ok for v in checks) else 1


def _hang_note(detections: Sequence[float | None], waited_s: float) -> str:
    if all(d is None for d in detections):
        return f"hang not detected in {waited_s:g} s after the fault (then killed)"
    return "hang detected after " + ", ".join("never" if d is None else f"{d:.2f} s"
                                              for d in detections)


def _fmt(split: Split | None) -> str:
    return "-" if split is None or split.total_s is None else f"{split.total_s:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
