"""Which fields of a fault-history record mean what: given, or found by their usual names.

A history is read in one of two layouts:

- **events**: one record per event, a ``time`` and an ``event`` whose value says start or end
  (InfiniteHBD: ``event_time`` + ``event_type`` = ``fault_start`` / ``fault_end``);
- **intervals**: one record per fault, a ``start`` and an ``end`` or a ``duration`` (an empty end
  = still open).

Every record also has a node (one field, or several joined with "/": LANL's ``System`` and
``node number`` give ``20/15``, since node numbers repeat across systems) and, usually, a
type (one or several ``type_fields``). A field not given is looked for under the names
:mod:`.names` lists (case, spaces, hyphens, camelCase and a trailing ``(...)`` note ignored:
``Event Time`` is ``event_time``, ``Prob Started (mm/dd/yy hh:mm)`` is ``prob_started``).
When two fields of the history could mean the same thing, the import stops naming both and
the option that chooses: a field is never guessed.

Intervals are chosen when a start field and an end or duration field are found, else events
when a time field and an event field are. A duration field is found only when there is no end
field (give ``--duration-field`` to read it where an end is empty). A history without any type
field gets the kind ``unknown``.

    >>> spec = resolve_fields(FieldSpec(), ("node_id", "event_time", "event_type", "fault_type"),
    ...                       "trace.json")
    >>> spec.mode, spec.node, spec.time, spec.event, spec.type_fields
    ('events', ('node_id',), 'event_time', 'event_type', ('fault_type',))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.errors import HistoryError
from trainguard.history.names import (
    DURATION,
    END,
    EVENT,
    NODE,
    START,
    TIME,
    TYPE,
    Meaning,
    normal_name,
    sub_level_names,
)

NODE_NAMES = NODE.names
TIME_NAMES = TIME.names
EVENT_NAMES = EVENT.names
START_NAMES = START.names
END_NAMES = END.names
DURATION_NAMES = DURATION.names
TYPE_NAMES = TYPE.names

DEFAULT_START_VALUES = ("fault_start", "start", "begin", "started", "down", "open", "opened")
"""Event values that open a fault when none are given (compared without case)."""
DEFAULT_END_VALUES = ("fault_end", "end", "stop", "ended", "up", "close", "closed", "resolved",
                      "repaired", "recovered", "fixed")
"""Event values that close a fault when none are given (compared without case)."""

NODE_JOIN = "/"
"""Joins the values of several node fields into one node name."""

_SHOWN_KEYS = 12
_SHOWN_NAMES = 4


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """Which field means what; None (or empty) = find it (see the module docstring).

    ``node``: the field naming the node, or several whose values joined with "/" name it
    (``("System", "node number")``); a single name (a string) is taken as one field.
    ``type_fields``: one field (a string, or an object whose values are the levels, e.g.
    ``{"Level", "Class", "Desc"}``) or several (one level each), joined " / " in order.
    ``type_labels``: each non-empty type field adds "field / value" (a flag such as ``1``, ``x``
    or ``yes`` adds just the field's name): for sources with one column per category, such as
    LANL's ``Hardware`` / ``Software`` / ``Network`` columns.
    """

    node: tuple[str, ...] = ()
    time: str | None = None
    start: str | None = None
    end: str | None = None
    duration: str | None = None
    event: str | None = None
    start_values: tuple[str, ...] = ()
    end_values: tuple[str, ...] = ()
    type_fields: tuple[str, ...] = ()
    type_labels: bool = False

    def __post_init__(self) -> None:
        node: object = self.node
        if isinstance(node, str):
            object.__setattr__(self, "node", (node,))

    @property
    def mode(self) -> str:
        """``events`` or ``intervals`` (of a resolved spec: see :func:`resolve_fields`)."""
        return "events" if self.time is not None else "intervals"


def _listing(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:_SHOWN_KEYS])
    more = len(keys) - _SHOWN_KEYS
    return (shown + (f" and {more} more" if more > 0 else "")) or "none"


def _names(meaning: Meaning) -> str:
    """The first names a meaning is found under, for a message."""
    names = meaning.names
    return ", ".join(names[:_SHOWN_NAMES]) + (", ..." if len(names) > _SHOWN_NAMES else "")


def _both(fields: Sequence[str]) -> str:
    quoted = [repr(f) for f in fields]
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


class _Keys:
    """The field names a history has, looked up as given or by their compared name."""

    def __init__(self, keys: Sequence[str], source: str) -> None:
        self.keys = tuple(keys)
        self.source = source
        self.by_normal: dict[str, list[str]] = {}
        for key in self.keys:
            self.by_normal.setdefault(normal_name(key), []).append(key)

    def given(self, name: str, option: str) -> str:
        if name in self.keys:
            return name
        found = self.by_normal.get(normal_name(name), [])
        if len(found) > 1:
            raise HistoryError(f"{self.source}: {option} {name!r} could be the field "
                               f"{_both(found)}: pass {option} with its exact name")
        if not found:
            raise HistoryError(f"{self.source}: no field {name!r} ({option}); its fields are: "
                               f"{_listing(self.keys)}")
        return found[0]

    def candidates(self, meaning: Meaning) -> list[str]:
        """Every field that has ``meaning`` by its name, in the history's order."""
        return [key for key in self.keys if meaning.matches(normal_name(key))]

    def has(self, meaning: Meaning) -> bool:
        return bool(self.candidates(meaning))

    def find(self, meaning: Meaning) -> str | None:
        """The one field with ``meaning``; None if none; a HistoryError naming them all (and
        the option that chooses) if several."""
        found = self.candidates(meaning)
        if len(found) > 1:
            raise HistoryError(f"{self.source}: the fields {_both(found)} could each be the "
                               f"{meaning.what} field: pass {meaning.option} with the one to use")
        return found[0] if found else None

    def pick(self, given: str | None, meaning: Meaning) -> str | None:
        return self.given(given, meaning.option) if given is not None else self.find(meaning)

    def missing(self, meaning: Meaning, extra: str = "") -> str:
        """Part of a message: no field with ``meaning`` among the history's."""
        return (f"no {meaning.what} field ({_names(meaning)}){extra} among its fields "
                f"({_listing(self.keys)})")


def _events(spec: FieldSpec, keys: _Keys, node: tuple[str, ...],
            types: tuple[str, ...]) -> FieldSpec:
    time = keys.pick(spec.time, TIME)
    event = keys.pick(spec.event, EVENT)
    if time is None or event is None:
        meaning = TIME if time is None else EVENT
        raise HistoryError(f"{keys.source}: {keys.missing(meaning)}; pass {meaning.option}")
    return FieldSpec(node=node, time=time, event=event,
                     start_values=spec.start_values or DEFAULT_START_VALUES,
                     end_values=spec.end_values or DEFAULT_END_VALUES,
                     type_fields=types, type_labels=spec.type_labels)


def _intervals(spec: FieldSpec, keys: _Keys, node: tuple[str, ...],
               types: tuple[str, ...]) -> FieldSpec:
    start = keys.pick(spec.start, START)
    end = keys.pick(spec.end, END)
    duration = keys.given(spec.duration, DURATION.option) if spec.duration is not None else (
        keys.find(DURATION) if end is None else None)
    if start is None:
        raise HistoryError(f"{keys.source}: {keys.missing(START)}; pass --start-field")
    if end is None and duration is None:
        raise HistoryError(f"{keys.source}: {keys.missing(END, ' or duration field')}; pass "
                           "--end-field or --duration-field")
    return FieldSpec(node=node, start=start, end=end, duration=duration, type_fields=types,
                     type_labels=spec.type_labels)


def _types(spec: FieldSpec, keys: _Keys) -> tuple[str, ...]:
    if spec.type_fields:
        return tuple(keys.given(name, TYPE.option) for name in spec.type_fields)
    found = keys.find(TYPE)
    if found is None:
        return ()
    subs = sub_level_names(normal_name(found))
    sub = [key for key in keys.keys if normal_name(key) in subs]
    return (found, sub[0]) if len(sub) == 1 else (found,)


def _node(spec: FieldSpec, keys: _Keys) -> tuple[str, ...]:
    if spec.node:
        return tuple(keys.given(name, NODE.option) for name in spec.node)
    found = keys.find(NODE)
    if found is None:
        raise HistoryError(f"{keys.source}: {keys.missing(NODE)}; pass --node-field (repeat it "
                           "for a node named by several fields)")
    return (found,)


def resolve_fields(spec: FieldSpec, keys: Sequence[str], source: str) -> FieldSpec:
    """``spec`` with every field it needs named as the history spells it, and its event values
    filled in; a :class:`HistoryError` (naming the option to pass) when one cannot be found or
    several fields could be the one.

    ``keys``: every field name the history's records have.
    """
    found = _Keys(keys, source)
    if spec.time is not None and (spec.start is not None or spec.end is not None
                                  or spec.duration is not None):
        raise HistoryError(f"{source}: --time-field reads events, --start-field/--end-field/"
                           "--duration-field read intervals: pass one or the other")
    node = _node(spec, found)
    types = _types(spec, found)
    explicit_interval = spec.start is not None or spec.end is not None or spec.duration is not None
    explicit_event = spec.time is not None or spec.event is not None
    if explicit_interval:
        return _intervals(spec, found, node, types)
    if explicit_event:
        return _events(spec, found, node, types)
    if found.has(START) and (found.has(END) or found.has(DURATION)):
        return _intervals(spec, found, node, types)
    if not found.has(TIME) and not found.has(START):
        raise HistoryError(f"{source}: no time fields among its fields ({_listing(found.keys)}):"
                           " pass --time-field with --event-field (events), or --start-field "
                           "with --end-field or --duration-field (intervals)")
    if not found.has(TIME):
        return _intervals(spec, found, node, types)
    return _events(spec, found, node, types)


__all__ = [
    "DEFAULT_END_VALUES",
    "DEFAULT_START_VALUES",
    "DURATION_NAMES",
    "END_NAMES",
    "EVENT_NAMES",
    "NODE_JOIN",
    "NODE_NAMES",
    "START_NAMES",
    "TIME_NAMES",
    "TYPE_NAMES",
    "FieldSpec",
    "normal_name",
    "resolve_fields",
]
