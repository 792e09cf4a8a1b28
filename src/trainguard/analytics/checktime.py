"""Host-check time of supervised runs: the intervals a run spent checking its hosts.

A supervised run checks its hosts before launching (``preflight``) and after an attempt stops
(``stop``); the store keeps one row per host per check (:meth:`Store.host_checks`), all rows of
one check sharing its start and length. Here those rows become each session's check intervals,
merged so that checks which overlap (or the rows of one check) count once; goodput
(:mod:`.goodput`) takes them out of the time they would otherwise count as.

    >>> merge([(0.0, 10.0), (5.0, 12.0), (20.0, 21.0)])
    ((0.0, 12.0), (20.0, 21.0))
    >>> overlap(((0.0, 12.0), (20.0, 21.0)), 10.0, 30.0)
    3.0
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from trainguard.store import HostCheckRecord

Interval = tuple[float, float]

RUN_CHECK_CONTEXTS = frozenset({"preflight", "stop"})
"""Checks a supervised run makes on its own time; ``trainguard check`` and ``nodes release
--verify`` are the operator's and cost no run anything."""


def merge(intervals: Iterable[Interval]) -> tuple[Interval, ...]:
    """Sorted, with overlapping or touching intervals joined and empty ones dropped."""
    out: list[Interval] = []
    for lo, hi in sorted((lo, hi) for lo, hi in intervals if hi > lo):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def total(intervals: Iterable[Interval]) -> float:
    return sum(hi - lo for lo, hi in intervals)


def overlap(intervals: Iterable[Interval], lo: float, hi: float) -> float:
    """How much of ``[lo, hi]`` the (merged) ``intervals`` cover."""
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in intervals)


def before(intervals: Iterable[Interval], cutoff: float | None) -> tuple[Interval, ...]:
    """The intervals cut at ``cutoff`` (None: all of them)."""
    if cutoff is None:
        return tuple(intervals)
    return tuple((lo, min(hi, cutoff)) for lo, hi in intervals if lo < cutoff)


def session_check_intervals(records: Iterable[HostCheckRecord]
                            ) -> dict[int, tuple[Interval, ...]]:
    """Each session's merged check intervals, from its pre-flight and stop-time checks."""
    raw: dict[int, list[Interval]] = defaultdict(list)
    for r in records:
        if r.session_id is not None and r.context in RUN_CHECK_CONTEXTS:
            raw[r.session_id].append((r.checked_at, r.checked_at + max(0.0, r.duration_s)))
    return {sid: merge(spans) for sid, spans in raw.items()}


@dataclass(frozen=True, slots=True)
class CheckCarve:
    """A run's host-check time by what it was taken out of (seconds)."""

    outside_s: float = 0.0
    """Before the first attempt or after the last: it lengthens the run's wall time."""
    productive_s: float = 0.0
    unknown_s: float = 0.0
    """Inside the window of an attempt without the SDK."""
    teardown_s: float = 0.0
    relaunch_wait_s: float = 0.0

    @property
    def total_s(self) -> float:
        return (self.outside_s + self.productive_s + self.unknown_s + self.teardown_s
                + self.relaunch_wait_s)


__all__ = ["RUN_CHECK_CONTEXTS", "CheckCarve", "Interval", "before", "merge", "overlap",
           "session_check_intervals", "total"]
