"""One record to what it says: an event (node, kind, time, start or end) or a fault interval
(node, kind, start, end), or a refusal of that record with a one-line reason.

A record is refused here when its node or time is missing, a time or duration does not parse, a
duration is negative, an interval ends before it starts, or an event value is neither a start
nor an end value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trainguard.history.fields import NODE_JOIN, FieldSpec
from trainguard.history.kinds import UNKNOWN_KIND, kind_of
from trainguard.history.result import Refusal
from trainguard.history.sources import Record
from trainguard.history.times import TimeSpec, TimeValueError
from trainguard.textsafe import terminal_safe

_SHOWN_CHARS = 80


def shown(value: object) -> str:
    """``value`` as a refusal quotes it: printable, one line, at most 80 characters."""
    text = terminal_safe(value if isinstance(value, str) else repr(value))
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Occurrence:
    """A start or end event of one node's fault of one kind; ``value``: the event as spelled,
    ``stamp``: the time as spelled."""

    line: int
    node: str
    kind: str
    time: float
    start: bool
    value: str
    stamp: str


@dataclass(frozen=True, slots=True)
class Span:
    """A fault as read: its record's line, node, kind, start and end (None: still open)."""

    line: int
    node: str
    kind: str
    start: float
    end: float | None


def _node_part(values: Mapping[str, object], field: str) -> str | None:
    value = values.get(field)
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return None


def node_of(values: Mapping[str, object], fields: tuple[str, ...]) -> str | Refusal:
    """The node a record names: its node fields' values joined with "/", or (as a Refusal
    without a line) the reason it names none.

    >>> node_of({"System": "20", "node number": 15}, ("System", "node number"))
    '20/15'
    """
    parts: list[str] = []
    for field in fields:
        part = _node_part(values, field)
        if part is None:
            return Refusal(0, f"no node (field {field!r})")
        parts.append(part)
    if not parts:
        raise ValueError("node_of needs at least one node field")
    return NODE_JOIN.join(parts)


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _kind(values: Mapping[str, object], spec: FieldSpec) -> str:
    return kind_of(values, spec.type_fields, labels=spec.type_labels) or UNKNOWN_KIND


def _time(values: Mapping[str, object], field: str, times: TimeSpec, what: str) -> float | str:
    """Seconds, or the reason the value is refused."""
    raw = values.get(field)
    if _missing(raw):
        return f"no {what} (field {field!r})"
    try:
        return times.seconds(raw)
    except TimeValueError as exc:
        return f"{what} (field {field!r}): {terminal_safe(str(exc))}"


def read_event(record: Record, spec: FieldSpec, times: TimeSpec,
               values: tuple[frozenset[str], frozenset[str]]) -> Occurrence | Refusal:
    """The event a record of an event stream is; ``values``: (start, end) event values,
    case-folded."""
    if spec.time is None or spec.event is None:
        raise ValueError("read_event needs a resolved event-stream FieldSpec")
    data, line = record.values, record.line
    node = node_of(data, spec.node)
    if isinstance(node, Refusal):
        return Refusal(line, node.reason)
    raw_event = data.get(spec.event)
    if _missing(raw_event):
        return Refusal(line, f"no event (field {spec.event!r})")
    event = str(raw_event).strip()
    folded = event.casefold()
    if folded not in values[0] and folded not in values[1]:
        return Refusal(line, f"event {shown(event)!r} (field {spec.event!r}) is neither a start "
                             f"({', '.join(spec.start_values[:3])}) nor an end "
                             f"({', '.join(spec.end_values[:3])})")
    time = _time(data, spec.time, times, "time")
    if isinstance(time, str):
        return Refusal(line, time)
    return Occurrence(line, node, _kind(data, spec), time, folded in values[0], event,
                      shown(data.get(spec.time)))


def _end(data: Mapping[str, object], spec: FieldSpec, times: TimeSpec,
         start: float) -> float | str | None:
    """The end (None: still open), or the reason the record is refused."""
    if spec.end is not None and not _missing(data.get(spec.end)):
        return _time(data, spec.end, times, "end")
    if spec.duration is not None and not _missing(data.get(spec.duration)):
        try:
            return start + times.duration(data.get(spec.duration))
        except TimeValueError as exc:
            return f"field {spec.duration!r}: {terminal_safe(str(exc))}"
    return None


def read_interval(record: Record, spec: FieldSpec, times: TimeSpec) -> Span | Refusal:
    """The fault a record of an interval table is."""
    if spec.start is None:
        raise ValueError("read_interval needs a resolved interval FieldSpec")
    data, line = record.values, record.line
    node = node_of(data, spec.node)
    if isinstance(node, Refusal):
        return Refusal(line, node.reason)
    start = _time(data, spec.start, times, "start")
    if isinstance(start, str):
        return Refusal(line, start)
    end = _end(data, spec, times, start)
    if isinstance(end, str):
        return Refusal(line, end)
    kind = _kind(data, spec)
    if end is not None and end < start:
        return Refusal(line, f"fault of node {shown(node)} ({shown(kind)}) ends "
                             f"({shown(data.get(spec.end or ''))}) before it starts "
                             f"({shown(data.get(spec.start))})")
    return Span(line, node, kind, start, end)


__all__ = ["Occurrence", "Span", "node_of", "read_event", "read_interval", "shown"]
