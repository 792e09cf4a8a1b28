"""Where a supervised run keeps each rank's trace files, and reading them back.

``trainguard run`` gives every rank of attempt A on node N::

    RUN/attempts/A/N/rank{R}.events.jsonl   SDK records, ``trace`` windows among them
    RUN/attempts/A/N/rank{R}.log            the rank's output
    RUN/attempts/A/N/rank{R}.trace          the rank's collective state file (statefile.py)
    RUN/attempts/A/N/rank{R}.stacks.txt     Python stacks the rank dumped on request
    RUN/attempts/A/hang.json                the supervisor's hang diagnosis, when it declared one
    RUN/attempts/A/stragglers.json          the supervisor's live straggler findings, if any

Only the log is there for every rank: a script without the SDK writes no events or state file,
and the hang diagnosis does not depend on either (it can come from py-spy stacks).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.errors import TraceError
from trainguard.trace.model import TraceWindow, window_from_record

_RANK_FILE = re.compile(r"rank(\d+)\.(?:events\.jsonl|log|trace)")
HANG_FILE = "hang.json"
STRAGGLERS_FILE = "stragglers.json"


@dataclass(frozen=True, slots=True)
class RankFiles:
    """The files of one rank in one attempt (``events`` and ``trace`` need not exist: a
    script without the SDK writes neither)."""

    attempt: int
    rank: int
    node: str
    events: Path

    @property
    def directory(self) -> Path:
        return self.events.parent

    @property
    def log(self) -> Path:
        return self.directory / f"rank{self.rank}.log"

    @property
    def trace(self) -> Path:
        return trace_path(self.events)

    @property
    def stacks(self) -> Path:
        return stacks_path(self.events)


def trace_path(events: Path) -> Path:
    """The state file next to an events file (``rank3.events.jsonl`` -> ``rank3.trace``)."""
    name = events.name
    base = name[: -len(".events.jsonl")] if name.endswith(".events.jsonl") else events.stem
    return events.with_name(base + ".trace")


def stacks_path(events: Path) -> Path:
    """The stack-dump file next to an events file."""
    return trace_path(events).with_suffix(".stacks.txt")


def attempts(run_dir: Path) -> list[int]:
    """The attempt numbers of a run, ascending; `TraceError` when `run_dir` is not a run."""
    root = run_dir / "attempts"
    if not run_dir.is_dir():
        raise TraceError(f"{run_dir}: no such run directory")
    if not root.is_dir():
        raise TraceError(f"{run_dir}: not a trainguard run directory (no attempts/ in it)")
    found = sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())
    if not found:
        raise TraceError(f"{run_dir}: the run has no attempts yet")
    return found


def rank_files(run_dir: Path, attempt: int | None = None) -> list[RankFiles]:
    """Every rank's files in `attempt` (default: the last one), ordered by rank."""
    known = attempts(run_dir)
    index = known[-1] if attempt is None else attempt
    if index not in known:
        raise TraceError(f"{run_dir}: no attempt {index} (attempts: "
                         f"{', '.join(map(str, known))})")
    found: dict[int, RankFiles] = {}
    for node_dir in sorted(p for p in (run_dir / "attempts" / str(index)).iterdir()
                           if p.is_dir()):
        for path in node_dir.iterdir():
            m = _RANK_FILE.fullmatch(path.name)
            if m:
                rank = int(m.group(1))
                found.setdefault(rank, RankFiles(index, rank, node_dir.name,
                                                 node_dir / f"rank{rank}.events.jsonl"))
    if not found:
        raise TraceError(f"{run_dir}: attempt {index} has no rank files (rank<R>.log, "
                         f".events.jsonl or .trace under attempts/{index}/<node>/)")
    return [found[r] for r in sorted(found)]


def hang_path(run_dir: Path, attempt: int) -> Path:
    """Where the supervisor writes its hang diagnosis of `attempt`."""
    return run_dir / "attempts" / str(attempt) / HANG_FILE


def diagnosed_attempts(run_dir: Path) -> list[int]:
    """The attempts of a run that have a hang diagnosis, ascending (`TraceError` when
    `run_dir` is not a run)."""
    return [a for a in attempts(run_dir) if hang_path(run_dir, a).is_file()]


def read_hang(path: Path) -> dict[str, Any]:
    """A saved hang diagnosis (``hang.json``); `TraceError` when it is unreadable or not one."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: unreadable ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str) \
            or not isinstance(doc.get("summary"), str):
        raise TraceError(f"{path}: not a hang diagnosis (no kind and summary)")
    for key in ("culprits", "notes"):
        if not isinstance(doc.setdefault(key, []), list):
            raise TraceError(f"{path}: not a hang diagnosis ({key} is not a list)")
    if not all(isinstance(c, dict) for c in doc["culprits"]):
        raise TraceError(f"{path}: not a hang diagnosis (a culprit is not an object)")
    return doc


def stragglers_path(run_dir: Path, attempt: int) -> Path:
    """Where the supervisor writes the stragglers it found in `attempt` while it ran."""
    return run_dir / "attempts" / str(attempt) / STRAGGLERS_FILE


def read_supervisor_stragglers(path: Path) -> tuple[dict[str, Any], ...]:
    """The straggler episodes in a supervisor's ``stragglers.json`` (none when there is no
    file); `TraceError` when it is unreadable or not one."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceError(f"{path}: unreadable ({exc})") from exc
    found = doc.get("stragglers") if isinstance(doc, dict) else None
    if not isinstance(found, list) or not all(
            isinstance(s, dict) and isinstance(s.get("rank"), int) for s in found):
        raise TraceError(f"{path}: not the supervisor's straggler findings (no stragglers list "
                         "of ranks)")
    return tuple(found)


@dataclass(frozen=True, slots=True)
class WindowRead:
    """The ``trace`` windows of one events file, and what could not be read."""

    windows: tuple[TraceWindow, ...]
    bad_lines: tuple[str, ...]
    """``file:line: why`` for every malformed trace record (never dropped silently)."""


def read_windows(events: Path) -> WindowRead:
    """The ``trace`` records of an events file; a torn last line (the rank was killed while
    writing) is not an error, other malformed records are listed in ``bad_lines``."""
    try:
        lines = events.read_text(encoding="utf-8", errors="replace").split("\n")
    except FileNotFoundError:  # the rank ran without the SDK: no windows
        return WindowRead((), ())
    except OSError as exc:
        raise TraceError(f"cannot read {events}: {exc.strerror or exc}") from exc
    windows: list[TraceWindow] = []
    bad: list[str] = []
    last = len(lines) - 1
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if number - 1 < last:  # the final line may be torn: not an error
                bad.append(f"{events}:{number}: not JSON")
            continue
        if not isinstance(rec, dict) or rec.get("kind") != "trace":
            continue
        try:
            windows.append(window_from_record(rec))
        except ValueError as exc:
            bad.append(f"{events}:{number}: {exc}")
    return WindowRead(tuple(windows), tuple(bad))


__all__ = ["HANG_FILE", "STRAGGLERS_FILE", "RankFiles", "WindowRead", "attempts",
           "diagnosed_attempts", "hang_path", "rank_files", "read_hang",
           "read_supervisor_stragglers", "read_windows", "stacks_path", "stragglers_path",
           "trace_path"]
