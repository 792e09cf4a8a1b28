"""Field names: how they compare, the names each meaning is found under, units in names."""

from __future__ import annotations

import itertools

import pytest

from trainguard.errors import HistoryError
from trainguard.history.names import (
    DURATION,
    END,
    MEANINGS,
    NODE,
    START,
    TYPE,
    Meaning,
    duration_unit_for,
    name_unit,
    normal_name,
)


@pytest.mark.parametrize(("name", "normal"), [
    ("Prob Started (mm/dd/yy hh:mm)", "prob_started"),
    ("Down Time (minutes)", "down_time"),
    ("startedAt", "started_at"),
    ("NodeID", "node_id"),
    ("host.name", "host_name"),
    ("  Event-Time ", "event_time"),
    ("node__id", "node_id"),
    ("(note)", "(note)"),  # a name that is only a note keeps it
    ("IPAddress", "ipaddress"),
])
def test_normal_name(name: str, normal: str) -> None:
    assert normal_name(name) == normal


@pytest.mark.parametrize(("name", "unit"), [
    ("duration_min", "min"), ("duration_s", "s"), ("downtime_hours", "hours"),
    ("Down Time (minutes)", "minutes"), ("Repair (in hours)", "hours"), ("TTR (h)", "h"),
    ("durationMs", "ms"), ("Down Time", None), ("duration", None), ("ttr", None),
    ("Prob Started (mm/dd/yy hh:mm)", None), ("s", None),
])
def test_name_unit(name: str, unit: str | None) -> None:
    assert name_unit(name) == unit


def test_no_name_has_two_meanings() -> None:
    for a, b in itertools.combinations(MEANINGS, 2):
        assert not set(a.names) & set(b.names), (a.what, b.what)


@pytest.mark.parametrize(("meaning", "names"), [
    (NODE, ["node_id", "nodename", "host_name", "server_id", "machine", "instance_id"]),
    (START, ["started_at", "opened_at", "created", "problem_started", "prob_started"]),
    (END, ["resolved_at", "closed", "problem_fixed", "recovered_at", "finished_at"]),
    (DURATION, ["duration", "duration_s", "duration_min", "down_time", "ttr_h", "downtime_ms",
                "repair_time_hours"]),
    (TYPE, ["fault_type", "category", "root_cause", "component", "error_type"]),
])
def test_meanings_match_their_synonyms(meaning: Meaning, names: list[str]) -> None:
    assert all(meaning.matches(name) for name in names)


@pytest.mark.parametrize(("meaning", "name"), [
    (START, "down_time"), (DURATION, "duration_type"), (DURATION, "time"), (NODE, "nodes"),
    (NODE, "machine_type"), (TYPE, "event_type"), (END, "fixed_by"),
])
def test_meanings_do_not_match_lookalikes(meaning: Meaning, name: str) -> None:
    assert not meaning.matches(name)


def test_duration_unit_given_stated_or_required() -> None:
    assert duration_unit_for("duration_min", None) == "min"
    assert duration_unit_for("duration_min", "minutes") == "minutes"
    assert duration_unit_for("Down Time (minutes)", "m") == "m"
    assert duration_unit_for("ttr", "h") == "h"
    with pytest.raises(HistoryError, match=r"'ttr' does not say its unit: pass --duration-unit"):
        duration_unit_for("ttr", None)
    with pytest.raises(HistoryError, match=r"'Down Time \(minutes\)' says minutes but "
                                           r"--duration-unit is s: pass --duration-unit minutes"):
        duration_unit_for("Down Time (minutes)", "s")
    with pytest.raises(HistoryError, match="unknown time unit 'weeks'"):
        duration_unit_for("duration_min", "weeks")
