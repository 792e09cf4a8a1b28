"""What trace sources say about a rank: its collectives, its position, its time per step.

Two sources feed the same types, so the hang and straggler logic does not care where the facts
came from:

- trainguard's SDK tracer (`trainguard.train.tracing`): every rank keeps a small state file
  (`trainguard.trace.statefile`) with its last collective per process group, readable even while
  the rank is stopped or dead, and writes a ``trace`` record per window into its events file;
- PyTorch's flight recorder dumps (`trainguard.trace.flight`).

`CollectiveCall` is one collective as one rank saw it; `GroupState` is where a rank stands in one
process group; `RankState` is everything known about a rank at one moment; `TraceWindow` is one
rank's time per step over a window (the unit of straggler detection).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

WORLD = "world"
"""The name of the default process group."""

SPAN_DATA = "data"
SPAN_CHECKPOINT = "checkpoint"
STEP_SPANS = ("data", "forward", "backward", "optimizer", "checkpoint")
"""The step phases the example and the docs use; any other span name is recorded as well."""


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """One collective call (or point-to-point op) as one rank saw it."""

    seq: int
    """1-based count of the collectives this rank entered in `group` (the same call has the same
    number on every member that got as far)."""
    op: str
    """``all_reduce``, ``all_gather``, ``broadcast``, ``barrier``, ``send`` ..."""
    group: str = WORLD
    group_size: int = 0
    nbytes: int = 0
    """Bytes of the input tensors (0 for a barrier)."""
    entered: float | None = None
    """Unix time the rank called it (flight recorder: when the work was created)."""
    started: float | None = None
    """When it started running (flight recorder / CUDA events), when known."""
    ended: float | None = None
    """When it completed on this rank; None: not (yet) completed."""

    @property
    def completed(self) -> bool:
        return self.ended is not None

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "op": self.op, "group": self.group,
                "group_size": self.group_size, "nbytes": self.nbytes, "entered": self.entered,
                "started": self.started, "ended": self.ended}


@dataclass(frozen=True, slots=True)
class GroupState:
    """Where one rank stands in one process group."""

    group: str
    entered_seq: int
    """The last collective it entered (0: none yet)."""
    completed_seq: int
    """The last collective it completed; ``entered_seq - 1`` while it is inside one."""
    last: CollectiveCall | None = None
    """The last collective it entered (the one it is in, while ``inside``)."""

    @property
    def inside(self) -> bool:
        """Waiting in (or running) a collective right now."""
        return self.entered_seq > self.completed_seq

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "entered_seq": self.entered_seq,
                "completed_seq": self.completed_seq, "inside": self.inside,
                "last": None if self.last is None else self.last.to_dict()}


@dataclass(frozen=True, slots=True)
class RankState:
    """Everything one source knows about a rank at one moment."""

    rank: int
    groups: Mapping[str, GroupState] = field(default_factory=dict)
    step: int | None = None
    """The last step it reported (None: unknown)."""
    span: str | None = None
    """The innermost step phase it was in (``forward``, ``data`` ...), None outside any."""
    updated: float | None = None
    """When the source last wrote (unix time)."""
    pid: int | None = None
    source: str = "trainguard"
    """``trainguard`` (the SDK's state file) or ``flight-recorder``."""
    recent: tuple[CollectiveCall, ...] = ()
    """The last few collectives, oldest first (what the source kept)."""

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "step": self.step, "span": self.span,
                "updated": self.updated, "pid": self.pid, "source": self.source,
                "groups": {name: g.to_dict() for name, g in sorted(self.groups.items())},
                "recent": [c.to_dict() for c in self.recent]}


@dataclass(frozen=True, slots=True)
class OpTime:
    """Calls, seconds and bytes of one collective op (or one span name) within a window."""

    count: int
    seconds: float
    nbytes: int = 0


@dataclass(frozen=True, slots=True)
class TraceWindow:
    """One rank's timing over one window, as its ``trace`` record carries it::

        {"kind": "trace", "rank": 1, "start": 100.0, "end": 105.0, "steps": 92,
         "first_step": 300, "last_step": 391, "step_s": 4.98, "collective_s": 1.20,
         "spans": {"data": [92, 0.05, 0], "forward": [92, 1.5, 0], ...},
         "collectives": {"all_gather": [184, 1.18, 2408448], "barrier": [5, 0.02, 0]}}

    ``step_s`` is the wall time covered by the window's steps (from the previous step's report
    to this one's); ``collective_s`` the time blocked in collectives (nested calls counted once).
    """

    rank: int
    start: float
    end: float
    steps: int
    step_s: float
    collective_s: float
    spans: Mapping[str, OpTime] = field(default_factory=dict)
    collectives: Mapping[str, OpTime] = field(default_factory=dict)
    first_step: int | None = None
    last_step: int | None = None

    def span_s(self, name: str) -> float:
        op = self.spans.get(name)
        return 0.0 if op is None else op.seconds

    @property
    def data_s(self) -> float:
        return self.span_s(SPAN_DATA)

    @property
    def checkpoint_s(self) -> float:
        return self.span_s(SPAN_CHECKPOINT)

    @property
    def compute_s(self) -> float:
        """Step time that is neither waiting in collectives, nor loading data, nor saving a
        checkpoint: the rank's own work (and anything that delays it)."""
        return max(0.0, self.step_s - self.collective_s - self.data_s - self.checkpoint_s)

    def to_record(self) -> dict[str, Any]:
        """The record's fields (without ``t``/``kind``, which the event log adds)."""
        return {"rank": self.rank, "start": self.start, "end": self.end, "steps": self.steps,
                "first_step": self.first_step, "last_step": self.last_step,
                "step_s": self.step_s, "collective_s": self.collective_s,
                "spans": {k: [v.count, v.seconds, v.nbytes] for k, v in self.spans.items()},
                "collectives": {k: [v.count, v.seconds, v.nbytes]
                                for k, v in self.collectives.items()}}


def _optimes(value: object, what: str) -> dict[str, OpTime]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be an object")
    out: dict[str, OpTime] = {}
    for name, triple in value.items():
        if not (isinstance(triple, list) and len(triple) in (2, 3)
                and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                        for x in triple)):
            raise ValueError(f"{what}.{name} must be [count, seconds(, bytes)]")
        out[str(name)] = OpTime(int(triple[0]), float(triple[1]),
                                int(triple[2]) if len(triple) == 3 else 0)
    return out


def _number(rec: Mapping[str, Any], key: str) -> float:
    value = rec.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{key} must be a number")
    return float(value)


def _opt_int(rec: Mapping[str, Any], key: str) -> int | None:
    value = rec.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def window_from_record(rec: Mapping[str, Any]) -> TraceWindow:
    """A `TraceWindow` from a ``trace`` record; `ValueError` naming the field when malformed."""
    rank = rec.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise ValueError("rank must be an integer")
    steps = rec.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError("steps must be an integer >= 0")
    return TraceWindow(
        rank=rank, start=_number(rec, "start"), end=_number(rec, "end"), steps=steps,
        step_s=_number(rec, "step_s"), collective_s=_number(rec, "collective_s"),
        spans=_optimes(rec.get("spans", {}), "spans"),
        collectives=_optimes(rec.get("collectives", {}), "collectives"),
        first_step=_opt_int(rec, "first_step"), last_step=_opt_int(rec, "last_step"))


__all__ = [
    "SPAN_CHECKPOINT",
    "SPAN_DATA",
    "STEP_SPANS",
    "WORLD",
    "CollectiveCall",
    "GroupState",
    "OpTime",
    "RankState",
    "TraceWindow",
    "window_from_record",
]
