"""Which fields of a fault-history record mean what: given, or found by their usual names.

A history is read in one of two layouts:

- **events**: one record per event, a ``time`` and an ``event`` whose value says start or end
  (InfiniteHBD: ``event_time`` + ``event_type`` = ``fault_start`` / ``fault_end``);
- **intervals**: one record per fault, a ``start`` and an ``end`` or a ``duration`` (an empty end
  = still open).

Every record also has a ``node`` and, usually, a type (one or several ``type_fields``). A field
not given is looked for under these names, in this order (case, spaces and hyphens ignored:
``Event Time`` is ``event_time``):

======== ===================================
node     node, node_id, host, hostname
time     time, event_time, timestamp
event    event_type, event
start    start, start_time
end      end, end_time
duration duration
type     fault_type, type, kind
======== ===================================

Intervals are chosen when a start field and an end or duration field are found, else events
when a time field and an event field are. A history without any type field gets the kind
``unknown``.

    >>> spec = resolve_fields(FieldSpec(), ("node_id", "event_time", "event_type", "fault_type"),
    ...                       "trace.json")
    >>> spec.mode, spec.node, spec.time, spec.event, spec.type_fields
    ('events', 'node_id', 'event_time', 'event_type', ('fault_type',))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.errors import HistoryError

NODE_NAMES = ("node", "node_id", "host", "hostname")
TIME_NAMES = ("time", "event_time", "timestamp")
EVENT_NAMES = ("event_type", "event")
START_NAMES = ("start", "start_time")
END_NAMES = ("end", "end_time")
DURATION_NAMES = ("duration",)
TYPE_NAMES = ("fault_type", "type", "kind")

DEFAULT_START_VALUES = ("fault_start", "start", "begin", "started", "down", "open", "opened")
"""Event values that open a fault when none are given (compared without case)."""
DEFAULT_END_VALUES = ("fault_end", "end", "stop", "ended", "up", "close", "closed", "resolved",
                      "repaired", "recovered", "fixed")
"""Event values that close a fault when none are given (compared without case)."""

_SHOWN_KEYS = 12


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """Which field means what; None (or empty) = find it (see the module docstring).

    ``type_fields``: one field (a string, or an object whose values are the levels, e.g.
    ``{"Level", "Class", "Desc"}``) or several (one level each), joined " / " in order.
    ``type_labels``: each non-empty type field adds "field / value" (a flag such as ``1``, ``x``
    or ``yes`` adds just the field's name): for sources with one column per category, such as
    LANL's ``Hardware`` / ``Software`` / ``Network`` columns.
    """

    node: str | None = None
    time: str | None = None
    start: str | None = None
    end: str | None = None
    duration: str | None = None
    event: str | None = None
    start_values: tuple[str, ...] = ()
    end_values: tuple[str, ...] = ()
    type_fields: tuple[str, ...] = ()
    type_labels: bool = False

    @property
    def mode(self) -> str:
        """``events`` or ``intervals`` (of a resolved spec: see :func:`resolve_fields`)."""
        return "events" if self.time is not None else "intervals"


def normal_name(name: str) -> str:
    """A field name compared without case, and with spaces and hyphens as underscores."""
    return "_".join(name.strip().casefold().replace("-", " ").split())


def _listing(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:_SHOWN_KEYS])
    more = len(keys) - _SHOWN_KEYS
    return (shown + (f" and {more} more" if more > 0 else "")) or "none"


class _Keys:
    """The field names a history has, looked up as given or by their normal name."""

    def __init__(self, keys: Sequence[str], source: str) -> None:
        self.keys = tuple(keys)
        self.source = source
        self.by_normal: dict[str, str] = {}
        for key in self.keys:
            self.by_normal.setdefault(normal_name(key), key)

    def given(self, name: str, option: str) -> str:
        if name in self.keys:
            return name
        found = self.by_normal.get(normal_name(name))
        if found is None:
            raise HistoryError(f"{self.source}: no field {name!r} ({option}); its fields are: "
                               f"{_listing(self.keys)}")
        return found

    def find(self, names: Sequence[str]) -> str | None:
        for name in names:
            found = self.by_normal.get(name)
            if found is not None:
                return found
        return None

    def pick(self, given: str | None, names: Sequence[str], option: str) -> str | None:
        return self.given(given, option) if given is not None else self.find(names)


def _events(spec: FieldSpec, keys: _Keys, node: str, types: tuple[str, ...]) -> FieldSpec:
    time = keys.pick(spec.time, TIME_NAMES, "--time-field")
    event = keys.pick(spec.event, EVENT_NAMES, "--event-field")
    if time is None or event is None:
        missing = "time field (" + ", ".join(TIME_NAMES) + ")" if time is None else \
            "event field (" + ", ".join(EVENT_NAMES) + ")"
        option = "--time-field" if time is None else "--event-field"
        raise HistoryError(f"{keys.source}: no {missing} among its fields "
                           f"({_listing(keys.keys)}); pass {option}")
    return FieldSpec(node=node, time=time, event=event,
                     start_values=spec.start_values or DEFAULT_START_VALUES,
                     end_values=spec.end_values or DEFAULT_END_VALUES,
                     type_fields=types, type_labels=spec.type_labels)


def _intervals(spec: FieldSpec, keys: _Keys, node: str, types: tuple[str, ...]) -> FieldSpec:
    start = keys.pick(spec.start, START_NAMES, "--start-field")
    end = keys.pick(spec.end, END_NAMES, "--end-field")
    duration = keys.pick(spec.duration, DURATION_NAMES, "--duration-field")
    if start is None:
        raise HistoryError(f"{keys.source}: no start field (" + ", ".join(START_NAMES)
                           + f") among its fields ({_listing(keys.keys)}); pass --start-field")
    if end is None and duration is None:
        raise HistoryError(f"{keys.source}: no end field (" + ", ".join(END_NAMES)
                           + ") or duration field among its fields "
                           f"({_listing(keys.keys)}); pass --end-field or --duration-field")
    return FieldSpec(node=node, start=start, end=end, duration=duration, type_fields=types,
                     type_labels=spec.type_labels)


def resolve_fields(spec: FieldSpec, keys: Sequence[str], source: str) -> FieldSpec:
    """``spec`` with every field it needs named as the history spells it, and its event values
    filled in; a :class:`HistoryError` (naming the option to pass) when one cannot be found.

    ``keys``: every field name the history's records have.
    """
    found = _Keys(keys, source)
    if spec.time is not None and (spec.start is not None or spec.end is not None
                                  or spec.duration is not None):
        raise HistoryError(f"{source}: --time-field reads events, --start-field/--end-field/"
                           "--duration-field read intervals: pass one or the other")
    node = found.pick(spec.node, NODE_NAMES, "--node-field")
    if node is None:
        raise HistoryError(f"{source}: no node field (" + ", ".join(NODE_NAMES)
                           + f") among its fields ({_listing(found.keys)}); pass --node-field")
    if spec.type_fields:
        types = tuple(found.given(name, "--type-field") for name in spec.type_fields)
    else:
        auto = found.find(TYPE_NAMES)
        types = () if auto is None else (auto,)
    explicit_interval = spec.start is not None or spec.end is not None or spec.duration is not None
    explicit_event = spec.time is not None or spec.event is not None
    if explicit_interval:
        return _intervals(spec, found, node, types)
    if explicit_event:
        return _events(spec, found, node, types)
    if found.find(START_NAMES) and (found.find(END_NAMES) or found.find(DURATION_NAMES)):
        return _intervals(spec, found, node, types)
    if found.find(TIME_NAMES) is None and found.find(START_NAMES) is None:
        raise HistoryError(f"{source}: no time fields among its fields ({_listing(found.keys)}):"
                           " pass --time-field with --event-field (events), or --start-field "
                           "with --end-field or --duration-field (intervals)")
    if found.find(TIME_NAMES) is None:
        return _intervals(spec, found, node, types)
    return _events(spec, found, node, types)


__all__ = [
    "DEFAULT_END_VALUES",
    "DEFAULT_START_VALUES",
    "DURATION_NAMES",
    "END_NAMES",
    "EVENT_NAMES",
    "NODE_NAMES",
    "START_NAMES",
    "TIME_NAMES",
    "TYPE_NAMES",
    "FieldSpec",
    "normal_name",
    "resolve_fields",
]
