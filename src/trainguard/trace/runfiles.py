"""Where a supervised run keeps each rank's trace files, and reading them back.

``trainguard run`` gives every rank of attempt A on node N::

    RUN/attempts/A/N/rank{R}.events.jsonl   SDK records, ``trace`` windows among them
    RUN/attempts/A/N/rank{R}.log            the rank's output
    RUN/attempts/A/N/rank{R}.trace          the rank's collective state file (statefile.py)
    RUN/attempts/A/N/rank{R}.stacks.txt     Python stacks the rank dumped on request
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from trainguard.errors import TraceError
from trainguard.trace.model import TraceWindow, window_from_record

_RANK_FILE = re.compile(r"rank(\d+)\.events\.jsonl")


@dataclass(frozen=True, slots=True)
class RankFiles:
    """The files of one rank in one attempt."""

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
    out: list[RankFiles] = []
    for node_dir in sorted(p for p in (run_dir / "attempts" / str(index)).iterdir()
                           if p.is_dir()):
        for events in node_dir.iterdir():
            m = _RANK_FILE.fullmatch(events.name)
            if m:
                out.append(RankFiles(index, int(m.group(1)), node_dir.name, events))
    if not out:
        raise TraceError(f"{run_dir}: attempt {index} has no rank event files")
    return sorted(out, key=lambda f: f.rank)


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


__all__ = ["RankFiles", "WindowRead", "attempts", "rank_files", "read_windows", "stacks_path",
           "trace_path"]
