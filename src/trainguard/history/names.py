"""The names a fault history's fields go by: how a name is compared, which names each meaning
is found under, and the unit a duration field's name states.

**Compared names.** A name is compared after: a trailing parenthesised note is dropped
(``Prob Started (mm/dd/yy hh:mm)`` is ``Prob Started``), camelCase is split (``startedAt`` is
``started_at``), case is ignored, and spaces, hyphens and dots become one underscore.

**Names tried** for a field not given (in the compared form):

======== ==========================================================================
node     node, node_id, nodeid, node_name, nodename, host, host_id, hostname,
         host_name, server, server_id, machine, machine_id, instance, instance_id
time     time, event_time, timestamp, event_timestamp, ts, datetime, occurred_at
event    event_type, event, event_name
start    start, start_time, started, started_at, starts_at, begin, begin_time,
         fault_start, failure_start, opened, opened_at, created, created_at,
         problem_started, prob_started
end      end, end_time, ended, ended_at, ends_at, finish, finish_time, finished,
         finished_at, fault_end, failure_end, fixed, problem_fixed, prob_fixed,
         resolved, resolved_at, repaired, repaired_at, recovered, recovered_at,
         closed, closed_at
duration duration, downtime, down_time, repair_time, time_to_repair, ttr, each also
         with a unit after it (duration_s, duration_min, downtime_hours, ttr_h)
type     fault_type, failure_type, error_type, type, kind, category, cause,
         root_cause, reason, component
======== ==========================================================================

A type field found this way takes its sub-level along when the history has one named
``sub`` + its name (``category`` then ``subcategory`` or ``sub_category``).

**Duration units.** A duration field's name may state its unit: ``duration_min``,
``downtime_hours``, ``Down Time (minutes)`` (a unit of :data:`~trainguard.history.times.UNITS`
as the last word of the name, or of its parenthesised note). :func:`duration_unit_for` uses the
unit given (``--duration-unit``), else the one the name states; when they disagree, or when
neither says, it stops: the unit of a duration is never guessed.

    >>> normal_name("Prob Started (mm/dd/yy hh:mm)"), normal_name("startedAt")
    ('prob_started', 'started_at')
    >>> name_unit("Down Time (minutes)"), name_unit("duration_h"), name_unit("Down Time")
    ('minutes', 'h', None)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainguard.errors import HistoryError
from trainguard.history.times import UNITS, unit_seconds

_NOTE = re.compile(r"\s*\(([^()]*)\)\s*$")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s\-.]+")


def _note(name: str) -> tuple[str, str | None]:
    """The name without its trailing parenthesised note, and the note (None: none)."""
    match = _NOTE.search(name)
    if match is None or not name[:match.start()].strip():
        return name, None
    return name[:match.start()], match.group(1)


def normal_name(name: str) -> str:
    """A field name as it is compared (see the module docstring).

    >>> normal_name("  Event-Time "), normal_name("nodeID"), normal_name("Down Time (min)")
    ('event_time', 'node_id', 'down_time')
    """
    bare, _ = _note(name)
    split = _CAMEL.sub("_", bare.strip())
    return "_".join(part for part in _SEPARATORS.split(split.casefold().replace("_", " "))
                    if part)


def name_unit(name: str) -> str | None:
    """The time unit a field's name states, as spelled there (None: it states none): the last
    word of its parenthesised note, else the last of two or more words of its name."""
    bare, note = _note(name)
    if note is not None:
        words = note.replace(",", " ").split()
        if words and words[-1].casefold() in UNITS:
            return words[-1]
    words = normal_name(bare).split("_")
    if len(words) >= 2 and words[-1] in UNITS:
        return words[-1]
    return None


@dataclass(frozen=True, slots=True)
class Meaning:
    """What a field means, the names it is found under, and the option that names it."""

    what: str
    option: str
    names: tuple[str, ...]
    unit_suffix: bool = False

    def matches(self, normal: str) -> bool:
        """Whether a field with this compared name has this meaning."""
        if normal in self.names:
            return True
        if not self.unit_suffix:
            return False
        base, _, unit = normal.rpartition("_")
        return base in self.names and unit in UNITS


NODE = Meaning("node", "--node-field", (
    "node", "node_id", "nodeid", "node_name", "nodename", "host", "host_id", "hostname",
    "host_name", "server", "server_id", "machine", "machine_id", "instance", "instance_id"))
TIME = Meaning("time", "--time-field", (
    "time", "event_time", "timestamp", "event_timestamp", "ts", "datetime", "occurred_at"))
EVENT = Meaning("event", "--event-field", ("event_type", "event", "event_name"))
START = Meaning("start", "--start-field", (
    "start", "start_time", "started", "started_at", "starts_at", "begin", "begin_time",
    "fault_start", "failure_start", "opened", "opened_at", "created", "created_at",
    "problem_started", "prob_started"))
END = Meaning("end", "--end-field", (
    "end", "end_time", "ended", "ended_at", "ends_at", "finish", "finish_time", "finished",
    "finished_at", "fault_end", "failure_end", "fixed", "problem_fixed", "prob_fixed",
    "resolved", "resolved_at", "repaired", "repaired_at", "recovered", "recovered_at",
    "closed", "closed_at"))
DURATION = Meaning("duration", "--duration-field", (
    "duration", "downtime", "down_time", "repair_time", "time_to_repair", "ttr"),
    unit_suffix=True)
TYPE = Meaning("type", "--type-field", (
    "fault_type", "failure_type", "error_type", "type", "kind", "category", "cause",
    "root_cause", "reason", "component"))
MEANINGS = (NODE, TIME, EVENT, START, END, DURATION, TYPE)


def sub_level_names(normal: str) -> tuple[str, str]:
    """The compared names of a type field's sub-level: ``subcategory``, ``sub_category``."""
    return "sub" + normal, "sub_" + normal


def duration_unit_for(field: str, given: str | None) -> str:
    """The unit of the duration field ``field``: ``given`` (``--duration-unit``) or the one its
    name states; a :class:`HistoryError` when they disagree or neither says.

    >>> duration_unit_for("duration_min", None), duration_unit_for("ttr", "h")
    ('min', 'h')
    """
    stated = name_unit(field)
    if given is None:
        if stated is None:
            raise HistoryError(f"the duration field {field!r} does not say its unit: pass "
                               "--duration-unit (s, min, h or d)")
        return stated
    if stated is not None and unit_seconds(stated) != unit_seconds(given, "--duration-unit"):
        raise HistoryError(f"the duration field {field!r} says {stated} but --duration-unit is "
                           f"{given}: pass --duration-unit {stated}, or the field that holds "
                           f"{given} with --duration-field")
    return given


__all__ = ["DURATION", "END", "EVENT", "MEANINGS", "NODE", "START", "TIME", "TYPE", "Meaning",
           "duration_unit_for", "name_unit", "normal_name", "sub_level_names"]
