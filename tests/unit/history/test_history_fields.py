"""Which field means what: auto-detection, given names, and the errors that name the option."""

from __future__ import annotations

import pytest

from trainguard.errors import HistoryError
from trainguard.history.fields import (
    DEFAULT_END_VALUES,
    DEFAULT_START_VALUES,
    FieldSpec,
    normal_name,
    resolve_fields,
)


def test_infinitehbd_fields_are_found_as_an_event_stream() -> None:
    spec = resolve_fields(FieldSpec(), ("node_id", "event_time", "event_type", "fault_type"), "t")
    assert spec == FieldSpec(node=("node_id",), time="event_time", event="event_type",
                             start_values=DEFAULT_START_VALUES, end_values=DEFAULT_END_VALUES,
                             type_fields=("fault_type",))
    assert spec.mode == "events"


@pytest.mark.parametrize(("keys", "expected"), [
    (("hostname", "timestamp", "event", "type"), (("hostname",), "timestamp", "event", "type")),
    (("Host", "Time", "Event", "Kind"), (("Host",), "Time", "Event", "Kind")),
    (("Node ID", "Event Time", "event-type"), (("Node ID",), "Event Time", "event-type", None)),
    (("nodeId", "eventTime", "eventType"), (("nodeId",), "eventTime", "eventType", None)),
])
def test_event_fields_are_found_ignoring_case_spaces_and_hyphens(
        keys: tuple[str, ...], expected: tuple[object, ...]) -> None:
    spec = resolve_fields(FieldSpec(), keys, "t")
    assert (spec.node, spec.time, spec.event, spec.type_fields[0] if spec.type_fields else None) \
        == expected


def test_interval_fields_win_when_start_and_end_or_duration_exist() -> None:
    spec = resolve_fields(FieldSpec(), ("host", "start_time", "end_time", "kind"), "t")
    assert (spec.mode, spec.start, spec.end, spec.duration) == ("intervals", "start_time",
                                                                "end_time", None)
    spec = resolve_fields(FieldSpec(), ("node", "start", "duration"), "t")
    assert (spec.mode, spec.start, spec.end, spec.duration, spec.type_fields) == (
        "intervals", "start", None, "duration", ())
    assert spec.start_values == ()


def test_given_fields_are_used_and_matched_without_case() -> None:
    given = FieldSpec(node=("nodenum",), start="problem started", end="Problem Fixed",
                      type_fields=("Hardware", "Software"), type_labels=True)
    keys = ("nodenum", "Problem Started", "Problem Fixed", "Hardware", "Software", "node")
    spec = resolve_fields(given, keys, "t")
    assert (spec.node, spec.start, spec.end, spec.type_fields, spec.type_labels) == (
        ("nodenum",), "Problem Started", "Problem Fixed", ("Hardware", "Software"), True)


def test_given_event_values_replace_the_defaults() -> None:
    spec = resolve_fields(FieldSpec(event="state", start_values=("DOWN",), end_values=("UP",)),
                          ("node", "time", "state"), "t")
    assert (spec.event, spec.start_values, spec.end_values) == ("state", ("DOWN",), ("UP",))


@pytest.mark.parametrize(("given", "keys", "message"), [
    (FieldSpec(), ("nodenum", "time", "event"),
     r"t.json: no node field \(node, node_id, nodeid, node_name, ...\) among its fields "
     r"\(nodenum, time, event\); pass --node-field \(repeat it"),
    (FieldSpec(node=("nodename",)), ("node", "time", "event"),
     r"t.json: no field 'nodename' \(--node-field\); its fields are: node, time, event"),
    (FieldSpec(type_fields=("Level",)), ("node", "time", "event"),
     r"no field 'Level' \(--type-field\)"),
    (FieldSpec(), ("node", "when", "what"), r"no time fields .* pass --time-field"),
    (FieldSpec(), ("node", "time", "what"),
     r"no event field \(event_type, event, event_name\) .*pass --event-field"),
    (FieldSpec(), ("node", "start"), r"no end field .*pass --end-field or --duration-field"),
    (FieldSpec(event="what"), ("node", "what"), r"no time field \(time, .*pass --time-field"),
    (FieldSpec(end="stop"), ("node", "when", "stop"), r"no start field .*pass --start-field"),
    (FieldSpec(time="t", start="s"), ("node", "t", "s"), r"one or the other"),
])
def test_fields_that_cannot_be_found_are_a_history_error_naming_the_option(
        given: FieldSpec, keys: tuple[str, ...], message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        resolve_fields(given, keys, "t.json")


def test_a_long_field_list_is_shortened_in_errors() -> None:
    keys = tuple(f"f{i}" for i in range(30))
    with pytest.raises(HistoryError, match="f11 and 18 more"):
        resolve_fields(FieldSpec(), keys, "t")


def test_normal_name() -> None:
    assert normal_name("  Event-Time ") == "event_time"
    assert normal_name("Problem  Started") == "problem_started"


@pytest.mark.parametrize(("keys", "expected"), [
    (("hostname", "opened_at", "resolved_at", "category", "subcategory"),
     (("hostname",), "opened_at", "resolved_at", None, ("category", "subcategory"))),
    (("Server", "Prob Started (mm/dd/yy hh:mm)", "Prob Fixed (mm/dd/yy hh:mm)", "Down Time"),
     (("Server",), "Prob Started (mm/dd/yy hh:mm)", "Prob Fixed (mm/dd/yy hh:mm)", None, ())),
    (("instanceId", "startedAt", "durationMin", "rootCause"),
     (("instanceId",), "startedAt", None, "durationMin", ("rootCause",))),
    (("machine", "created", "closed", "type", "sub_type"),
     (("machine",), "created", "closed", None, ("type", "sub_type"))),
])
def test_interval_synonyms_are_found(keys: tuple[str, ...],
                                     expected: tuple[object, ...]) -> None:
    spec = resolve_fields(FieldSpec(), keys, "t")
    assert (spec.node, spec.start, spec.end, spec.duration, spec.type_fields) == expected


@pytest.mark.parametrize(("keys", "message"), [
    (("host", "hostname", "start", "end"),
     "t.csv: the fields 'host' and 'hostname' could each be the node field: pass --node-field "
     "with the one to use"),
    (("node", "opened_at", "created_at", "closed_at"),
     "the fields 'opened_at' and 'created_at' could each be the start field: pass "
     "--start-field"),
    (("node", "start", "resolved_at", "closed_at", "repaired"),
     "the fields 'resolved_at', 'closed_at' and 'repaired' could each be the end field"),
    (("node", "start", "duration_s", "ttr"),
     "the fields 'duration_s' and 'ttr' could each be the duration field"),
    (("node", "start", "end", "type", "category"),
     "the fields 'type' and 'category' could each be the type field: pass --type-field"),
    (("node", "time", "timestamp", "event"), "'time' and 'timestamp' could each be the time"),
    (("Node", "node", "start", "end"), "'Node' and 'node' could each be the node field"),
])
def test_two_fields_with_one_meaning_stop_naming_both(keys: tuple[str, ...],
                                                      message: str) -> None:
    with pytest.raises(HistoryError) as info:
        resolve_fields(FieldSpec(), keys, "t.csv")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_given_field_ends_the_ambiguity_and_unused_meanings_are_not_checked() -> None:
    keys = ("host", "hostname", "start", "resolved_at", "closed_at", "duration", "ttr",
            "time", "timestamp")
    spec = resolve_fields(FieldSpec(node=("hostname",), end="closed_at"), keys, "t")
    assert (spec.node, spec.start, spec.end, spec.duration) == (("hostname",), "start",
                                                                "closed_at", None)


def test_a_given_name_matching_two_fields_by_its_compared_form_stops() -> None:
    with pytest.raises(HistoryError, match="--node-field 'HOST' could be the field 'Host' and "
                                           "'host'"):
        resolve_fields(FieldSpec(node=("HOST",)), ("Host", "host", "start", "end"), "t")
    spec = resolve_fields(FieldSpec(node=("host",)), ("Host", "host", "start", "end"), "t")
    assert spec.node == ("host",)


def test_several_node_fields_and_a_string_node() -> None:
    keys = ("System", "node number", "Prob Started", "Prob Fixed")
    spec = resolve_fields(FieldSpec(node=("system", "Node Number")), keys, "t")
    assert spec.node == ("System", "node number")
    assert FieldSpec(node="host").node == ("host",)  # type: ignore[arg-type]
    with pytest.raises(HistoryError, match="no field 'rack' \\(--node-field\\)"):
        resolve_fields(FieldSpec(node=("System", "rack")), keys, "t")


def test_a_duration_field_is_found_only_without_an_end_field() -> None:
    spec = resolve_fields(FieldSpec(), ("node", "start", "end", "downtime"), "t")
    assert (spec.end, spec.duration) == ("end", None)
    spec = resolve_fields(FieldSpec(), ("node", "start", "downtime"), "t")
    assert (spec.end, spec.duration) == (None, "downtime")
    spec = resolve_fields(FieldSpec(duration="downtime"), ("node", "start", "end", "downtime"),
                          "t")
    assert (spec.end, spec.duration) == ("end", "downtime")
