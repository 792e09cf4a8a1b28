"""Fold repeats of one event into a single event with a count, so memory stays bounded.

A failing GPU can print the same XID a million times; keeping a :class:`FailureEvent` per line
cost ~1.1 KB each (1.17 GB for 1M lines). :class:`EventAggregator` keeps one event per *run* of
repeats instead: the same signature, category, severity, host, GPU, XID and rank from the same
file, each within ``gap_s`` of the previous one (or, for lines without a time, with no timed
event of that file in between). The folded event is the run's first, with

- ``repeats`` (a field): how many events it stands for, so every count still adds up;
- ``last_time`` (a field, when the run is timed and spans time): the last repeat's time;
- evidence: the first line and the last repeat's line (at most two lines, however long the run).

With ``gap_s`` no larger than the correlation window, incidents come out as they would have
from the unfolded events (``incidents.py`` stretches a folded event to its ``last_time``).

    >>> agg = EventAggregator(gap_s=900)
    >>> for ev in events_from_one_log:  # doctest: +SKIP
    ...     agg.add(ev)
    >>> folded = agg.events()  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainguard.evidence.events import FailureEvent, TimeKind

REPEATS_FIELD = "repeats"
LAST_TIME_FIELD = "last_time"


def repeats(ev: FailureEvent) -> int:
    """How many log events ``ev`` stands for (1 unless it was folded)."""
    value = ev.field_value(REPEATS_FIELD)
    return int(value) if value is not None and value.isdigit() else 1


def last_time(ev: FailureEvent) -> float | None:
    """The time of the last repeat folded into ``ev`` (its own time when none were)."""
    value = ev.field_value(LAST_TIME_FIELD)
    if value is None:
        return ev.time
    try:
        return float(value)
    except ValueError:
        return ev.time


@dataclass(slots=True)
class _Run:
    order: int
    first: FailureEvent
    last: FailureEvent
    count: int
    timed_seen: int
    """The file's timed-event counter when the run started (untimed runs only)."""

    def event(self) -> FailureEvent:
        if self.count == 1:
            return self.first
        fields = [kv for kv in self.first.fields if kv[0] not in (REPEATS_FIELD, LAST_TIME_FIELD)]
        fields.append((REPEATS_FIELD, str(self.count)))
        if self.last.time is not None and self.last.time != self.first.time:
            fields.append((LAST_TIME_FIELD, repr(self.last.time)))
        evidence = self.first.evidence[:1] + tuple(
            e for e in self.last.evidence[:1] if e not in self.first.evidence[:1])
        return replace(self.first, fields=tuple(fields), evidence=evidence)


def _key(ev: FailureEvent) -> tuple[object, ...]:
    path = ev.evidence[0].path if ev.evidence else ""
    return (path, ev.signature, ev.category, ev.action, ev.severity, ev.host, ev.gpu_pci,
            ev.gpu_index, ev.xid, ev.caused_by_xid, ev.rank, ev.time_kind)


class EventAggregator:
    """Collects events, folding runs of repeats (see the module docstring)."""

    def __init__(self, gap_s: float) -> None:
        if gap_s < 0:
            raise ValueError("scan.merge_gap_s must be >= 0")
        self._gap_s = gap_s
        self._open: dict[tuple[object, ...], _Run] = {}
        self._closed: list[_Run] = []
        self._timed_seen: dict[str, int] = {}
        self._order = 0
        self.total = 0
        """Events added (repeats included)."""

    def add(self, ev: FailureEvent) -> None:
        self.total += repeats(ev)
        path = ev.evidence[0].path if ev.evidence else ""
        timed = ev.time is not None and ev.time_kind is not TimeKind.NONE
        if timed:
            self._timed_seen[path] = self._timed_seen.get(path, 0) + 1
        seen = self._timed_seen.get(path, 0)
        key = _key(ev)
        run = self._open.get(key)
        if run is not None and self._continues(run, ev, seen):
            run.count += repeats(ev)
            run.last = ev
            return
        if run is not None:
            self._closed.append(run)
        self._open[key] = _Run(self._order, ev, ev, repeats(ev), seen)
        self._order += 1

    def _continues(self, run: _Run, ev: FailureEvent, seen: int) -> bool:
        if ev.time is None or run.last.time is None:
            # Untimed lines take their time from the file's previous timed line: fold them only
            # while that is still the same line.
            return ev.time is None and run.last.time is None and run.timed_seen == seen
        return 0.0 <= ev.time - run.last.time <= self._gap_s

    def events(self) -> list[FailureEvent]:
        """The folded events, in the order their runs started."""
        runs = sorted([*self._closed, *self._open.values()], key=lambda r: r.order)
        return [r.event() for r in runs]


__all__ = ["LAST_TIME_FIELD", "REPEATS_FIELD", "EventAggregator", "last_time", "repeats"]
