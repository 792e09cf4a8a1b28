"""Faults trainguard delivered to an attempt, so that the failure one causes is named as injected.

Three sources, one record (:class:`Injection`):

- the drills of ``trainguard run --inject`` that the supervisor fires (kill, hang, XID, alert;
  :mod:`trainguard.recover.drills`);
- the requests of ``trainguard inject kill|hang|xid``: the command appends each one to
  ``attempts/<i>/injected.jsonl`` in the run dir *before* it sends the signal, and the
  supervisor reads that file when the attempt ends (:func:`record_injection`,
  :func:`read_injections`);
- the SDK's in-process faults (``exception``, ``cuda_error``, ``nan``...), which each rank
  reports as a ``fault`` event (:func:`from_fault_event`).

Whether an injection explains what the supervisor saw is decided by the pure matchers: a kill
explains its rank's death by SIGKILL, a hang (SIGSTOP) its rank found stopped, an SDK fault the
failure of the rank that fired it, an XID or alert the evidence on its node.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.errors import ConfigError
from trainguard.faultspec import FaultKind, parse_fault

INJECTED_FILE = "injected.jsonl"
BY_COMMAND = "trainguard inject"
"""The source of the injections ``trainguard inject`` records."""
SIGNALS = {FaultKind.KILL.value: signal.SIGKILL, FaultKind.HANG.value: signal.SIGSTOP}
"""The signal each rank-signalling fault is delivered as."""
CRASH_KINDS = frozenset({FaultKind.EXCEPTION.value, FaultKind.CUDA_ERROR.value})
"""SDK faults that make their rank exit non-zero."""


@dataclass(frozen=True, slots=True)
class Injection:
    """One fault trainguard delivered (or was asked to deliver) to an attempt."""

    kind: str
    """A :class:`~trainguard.faultspec.FaultKind` value: ``kill``, ``hang``, ``xid``..."""
    rank: int | None = None
    node: str | None = None
    source: str = BY_COMMAND
    """Who delivered it: ``trainguard inject``, or the ``--inject`` spec of the run."""
    time: float | None = None

    def describe(self) -> str:
        """E.g. ``injected kill of rank 1 (trainguard inject)``."""
        if self.rank is not None:
            where = f" of rank {self.rank}"
        elif self.node:
            where = f" on {self.node}"
        else:
            where = ""
        return f"injected {self.kind.replace('_', ' ')}{where} ({self.source})"

    def to_record(self) -> dict[str, Any]:
        return {"kind": self.kind, "rank": self.rank, "node": self.node, "source": self.source,
                "t": self.time}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Injection | None:
        """The injection a record holds; None for a record that is not one."""
        kind, rank, node, source, t = (rec.get(k) for k in ("kind", "rank", "node", "source",
                                                              "t"))
        if kind not in {k.value for k in FaultKind}:
            return None
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
            return None
        return cls(str(kind), rank, str(node) if node else None,
                   str(source) if source else BY_COMMAND,
                   float(t) if isinstance(t, (int, float)) else None)


def injections_path(run_dir: Path, attempt: int) -> Path:
    """Where ``trainguard inject`` records its requests for attempt ``attempt``."""
    return run_dir / "attempts" / str(attempt) / INJECTED_FILE


def record_injection(path: Path, injection: Injection) -> None:
    """Append ``injection`` to ``path`` in one write; OSError when it cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(injection.to_record()) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_injections(path: Path) -> list[Injection]:
    """The injections recorded in ``path`` (none when it does not exist; bad lines skipped)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        found = Injection.from_record(rec) if isinstance(rec, dict) else None
        if found is not None:
            out.append(found)
    return out


def from_fault_event(text: str, rank: int, node: str) -> Injection | None:
    """The injection an SDK ``fault`` event reports (``exception:step=5``) for the rank that
    fired it; None when the text is not a fault spec."""
    try:
        spec = parse_fault(text)
    except ConfigError:
        return None
    return Injection(spec.kind.value, rank, node, f"--inject {text}")


def attempt_injections(drilled: Iterable[Injection], run_dir: Path, attempt: int,
                       faults: Mapping[int, tuple[str, Sequence[str]]]) -> tuple[Injection, ...]:
    """Everything trainguard injected into attempt ``attempt``: the run's fired drills, the
    requests of ``trainguard inject`` recorded in the run dir, and the SDK faults each rank
    reported (``faults``: rank -> (node, its ``fault`` events))."""
    found = [*drilled, *read_injections(injections_path(run_dir, attempt))]
    for rank, (node, texts) in sorted(faults.items()):
        found += [inj for text in texts if (inj := from_fault_event(text, rank, node))]
    return tuple(found)


def _of_rank(injections: Iterable[Injection], rank: int, kinds: Iterable[str]) -> Injection | None:
    wanted = frozenset(kinds)
    return next((i for i in injections if i.rank == rank and i.kind in wanted), None)


def explains_exit(injections: Iterable[Injection], rank: int,
                  returncode: int | None) -> Injection | None:
    """The injection behind rank ``rank``'s failed exit: a kill when it died by SIGKILL, an SDK
    fault that exits (an exception, a CUDA error) when it exited non-zero."""
    if returncode is None or returncode == 0:
        return None
    if returncode == -signal.SIGKILL:
        found = _of_rank(injections, rank, (FaultKind.KILL.value,))
        if found is not None:
            return found
    return _of_rank(injections, rank, CRASH_KINDS) if returncode > 0 else None


def explains_stop(injections: Iterable[Injection], rank: int) -> Injection | None:
    """The injected hang (SIGSTOP) of a rank found stopped."""
    return _of_rank(injections, rank, (FaultKind.HANG.value,))


def explains_slowdown(injections: Iterable[Injection], rank: int) -> Injection | None:
    """The injected ``slow`` fault (the SDK's extra sleep per step) of a hang's culprit rank."""
    return _of_rank(injections, rank, (FaultKind.SLOW.value,))


def explains_nonfinite(injections: Iterable[Injection], rank: int) -> Injection | None:
    """The injected ``nan`` that rank ``rank`` fired."""
    return _of_rank(injections, rank, (FaultKind.NAN.value,))


def explains_node(injections: Iterable[Injection], nodes: Iterable[str]) -> Injection | None:
    """An injected XID or detector alert on one of ``nodes``."""
    names = frozenset(nodes)
    kinds = {FaultKind.XID.value, FaultKind.ALERT.value}
    return next((i for i in injections if i.kind in kinds and i.node in names), None)


__all__ = [
    "BY_COMMAND",
    "CRASH_KINDS",
    "INJECTED_FILE",
    "SIGNALS",
    "Injection",
    "attempt_injections",
    "explains_exit",
    "explains_node",
    "explains_nonfinite",
    "explains_slowdown",
    "explains_stop",
    "from_fault_event",
    "injections_path",
    "read_injections",
    "record_injection",
]
