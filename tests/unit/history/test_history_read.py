"""read_history: every refusal rule (each names its line), merges, counts, whole-file errors."""

from __future__ import annotations

import json

import pytest

from trainguard.errors import HistoryError
from trainguard.history import FieldSpec, ImportResult, TimeSpec, read_history

XID = "GPU / Xid"
NIC = "Network / NIC"


def _jsonl(*rows: dict[str, object]) -> str:
    return "\n".join(json.dumps(row) for row in rows) + "\n"


def _ev(node: str, time: object, event: str = "fault_start", kind: str = XID) -> dict[str, object]:
    return {"node": node, "time": time, "event": event, "fault_type": kind}


def _end(node: str, time: object, kind: str = XID) -> dict[str, object]:
    return _ev(node, time, "fault_end", kind)


def _iv(node: str, start: object, end: object, kind: str = XID) -> dict[str, object]:
    return {"node": node, "start": start, "end": end, "type": kind}


def _read(*rows: dict[str, object], **kwargs: object) -> ImportResult:
    return read_history(_jsonl(*rows), source="h.jsonl", **kwargs)  # type: ignore[arg-type]


def _spans(result: ImportResult) -> list[tuple[int, str, float, float | None, str]]:
    return [(f.line, f.event.node, f.event.start, f.event.end, f.event.kind)
            for f in result.faults]


def _reasons(result: ImportResult) -> list[str]:
    return [str(r) for r in result.refused]


# --- event streams ---------------------------------------------------------------------------

def test_events_pair_per_node_and_kind() -> None:
    result = _read(_ev("a", 0), _ev("b", 1), _ev("a", 2, kind=NIC), _end("b", 3), _end("a", 4),
                   _end("a", 5, NIC))
    assert _spans(result) == [(1, "a", 0.0, 4.0, XID), (2, "b", 1.0, 3.0, XID),
                              (3, "a", 2.0, 5.0, NIC)]
    assert result.refused == ()
    assert result.fields.mode == "events"


def test_an_end_without_an_open_start_is_refused_naming_its_line() -> None:
    result = _read(_ev("x", 0), _end("x", 1), _end("x", 2), _end("y", 3, NIC))
    assert _reasons(result) == ["line 3: fault_end of node x (GPU / Xid) has no open fault_start",
                                "line 4: fault_end of node y (Network / NIC) has no open "
                                "fault_start"]
    assert _spans(result) == [(1, "x", 0.0, 1.0, XID)]


def test_an_end_of_another_kind_does_not_close_a_fault() -> None:
    result = _read(_ev("x", 0), _end("x", 1, NIC))
    assert _reasons(result) == ["line 2: fault_end of node x (Network / NIC) has no open "
                                "fault_start"]
    assert _spans(result) == [(1, "x", 0.0, None, XID)]


def test_a_second_start_of_the_same_node_and_kind_is_refused() -> None:
    result = _read(_ev("x", 0), _ev("y", 1), _ev("x", 2), _end("x", 3), _end("y", 4))
    assert _reasons(result) == ["line 3: node x already has an open 'GPU / Xid' fault since "
                                "line 1"]
    assert _spans(result) == [(1, "x", 0.0, 3.0, XID), (2, "y", 1.0, 4.0, XID)]


def test_overlapping_faults_of_different_kinds_on_one_node_are_accepted() -> None:
    result = _read(_ev("x", 0), _ev("x", 1, kind=NIC), _end("x", 2), _end("x", 3, NIC),
                   _ev("x", 3), _end("x", 4), _ev("x", 10), _end("x", 11))
    assert len(result.faults) == 4
    assert result.refused == ()
    assert result.counts.overlaps_merged == 3  # 0-2 and 1-3 overlap, 3-4 touches; 10-11 alone


def test_an_event_earlier_than_the_nodes_previous_one_is_refused() -> None:
    result = _read(_ev("x", 5), _ev("y", 1), _end("x", 4), _end("x", 6), _end("y", 2))
    assert _reasons(result) == ["line 3: event of node x at 4 is earlier than its previous event "
                                "(line 1): a node's events must be in time order"]
    assert _spans(result) == [(2, "y", 1.0, 2.0, XID), (1, "x", 5.0, 6.0, XID)]


def test_a_start_left_open_at_the_end_of_the_file_is_an_open_fault() -> None:
    result = _read(_ev("x", 0), _end("x", 1), _ev("x", 2), _ev("y", 3, kind=NIC))
    assert _spans(result) == [(1, "x", 0.0, 1.0, XID), (3, "x", 2.0, None, XID),
                              (4, "y", 3.0, None, NIC)]
    assert result.counts.open_faults == 2
    assert (result.first_time, result.last_time) == (0.0, 3.0)


def test_zero_length_fault_and_touching_faults_of_one_kind() -> None:
    result = _read(_ev("x", 1), _end("x", 1), _ev("x", 1), _end("x", 2))
    assert _spans(result) == [(1, "x", 1.0, 1.0, XID), (3, "x", 1.0, 2.0, XID)]
    assert result.refused == ()


@pytest.mark.parametrize(("row", "reason"), [
    ({"time": 1, "event": "fault_start"}, "line 2: no node (field 'node')"),
    ({"node": " ", "time": 1, "event": "fault_start"}, "line 2: no node (field 'node')"),
    ({"node": "x", "event": "fault_start"}, "line 2: no time (field 'time')"),
    ({"node": "x", "time": "", "event": "fault_start"}, "line 2: no time (field 'time')"),
    ({"node": "x", "time": "soon", "event": "fault_start"},
     "line 2: time (field 'time'): 'soon' is not ISO 8601 or unix seconds"),
    ({"node": "x", "time": 1}, "line 2: no event (field 'event')"),
    ({"node": "x", "time": 1, "event": "reboot"},
     "line 2: event 'reboot' (field 'event') is neither a start (fault_start, start, begin) "
     "nor an end (fault_end, end, stop)"),
])
def test_records_with_a_missing_or_bad_value_are_refused(row: dict[str, object],
                                                         reason: str) -> None:
    result = _read(_ev("a", 0), row, _end("a", 2))
    assert _reasons(result) == [reason]
    assert _spans(result) == [(1, "a", 0.0, 2.0, XID)]
    assert result.counts.records == 3


def test_given_event_values_and_case() -> None:
    rows = [{"node": "x", "time": 0, "state": "DOWN"}, {"node": "x", "time": 1, "state": "up"},
            {"node": "x", "time": 2, "state": "fault_start"}]
    result = _read(*rows, fields=FieldSpec(event="state", start_values=("down",),
                                           end_values=("UP",)))
    assert _spans(result) == [(1, "x", 0.0, 1.0, "unknown")]
    assert _reasons(result) == ["line 3: event 'fault_start' (field 'state') is neither a start "
                                "(down) nor an end (UP)"]
    assert result.faults[0].event.category == "unknown"


def test_a_refused_end_in_a_stream_that_never_started_names_the_start_value() -> None:
    rows = [{"node": "x", "time": 0, "state": "UP"}]
    result = _read(*rows, fields=FieldSpec(event="state", start_values=("DOWN",),
                                           end_values=("UP",)))
    assert _reasons(result) == ["line 1: UP of node x (unknown) has no open DOWN"]


# --- interval rows ---------------------------------------------------------------------------

def test_same_node_and_kind_intervals_that_overlap_are_refused_naming_both_lines() -> None:
    result = _read(_iv("x", 0, 10), _iv("x", 10, 20), _iv("x", 5, 12), _iv("y", 5, 12),
                   _iv("x", 25, 30), _iv("x", 21, 26))
    assert _reasons(result) == ["line 3: fault of node x ('GPU / Xid') overlaps the one at line 1",
                                "line 6: fault of node x ('GPU / Xid') overlaps the one at line 5"]
    assert [s[0] for s in _spans(result)] == [1, 4, 2, 5]
    assert result.fields.mode == "intervals"


def test_an_interval_overlapping_an_open_one_is_refused() -> None:
    result = _read(_iv("x", 10, None), _iv("x", 100, 200), _iv("x", 0, 10))
    assert _reasons(result) == ["line 2: fault of node x ('GPU / Xid') overlaps the one at line 1"]
    assert _spans(result) == [(3, "x", 0.0, 10.0, XID), (1, "x", 10.0, None, XID)]
    assert result.counts.open_faults == 1
    assert result.counts.overlaps_merged == 2  # touching


def test_intervals_of_different_kinds_on_one_node_are_accepted_and_counted() -> None:
    result = _read(_iv("x", 0, 10), _iv("x", 5, 15, NIC), _iv("x", 20, 30), _iv("y", 5, 15, NIC))
    assert result.refused == ()
    assert len(result.faults) == 4
    assert result.counts.overlaps_merged == 2


def test_exact_duplicates_are_merged_not_refused() -> None:
    result = _read(_iv("x", 0, 10), _iv("x", 0, 10), _iv("x", 0, 10, NIC), _iv("x", 0, 10),
                   _iv("x", 50, None), _iv("x", 50, None))
    assert result.refused == ()
    assert result.counts.duplicates_merged == 3
    assert [s[0] for s in _spans(result)] == [1, 3, 5]


@pytest.mark.parametrize(("row", "reason"), [
    (_iv("x", 10, 5), "line 2: fault of node x (GPU / Xid) ends (5) before it starts (10)"),
    ({"node": "x", "start": 10, "duration": -5, "type": "t"},
     "line 2: field 'duration': negative duration -5"),
    ({"node": "x", "start": 10, "duration": "long", "type": "t"},
     "line 2: field 'duration': duration 'long' is not a number of seconds"),
    ({"node": "x", "end": 10}, "line 2: no start (field 'start')"),
    (_iv("x", 1, "never"), "line 2: end (field 'end'): 'never' is not ISO 8601 or unix seconds"),
    (_iv(None, 1, 2), "line 2: no node (field 'node')"),  # type: ignore[arg-type]
])
def test_intervals_going_backwards_or_unreadable_are_refused(row: dict[str, object],
                                                              reason: str) -> None:
    result = _read({"node": "a", "start": 0, "end": 1, "duration": None, "type": "t"}, row,
                   fields=FieldSpec(duration="duration"), times=TimeSpec(duration_unit="seconds"))
    assert _reasons(result) == [reason]
    assert len(result.faults) == 1


def test_end_wins_over_a_given_duration_and_an_empty_end_falls_back_to_it() -> None:
    rows = [{"node": "x", "start": 0, "end": 5, "duration": 100},
            {"node": "y", "start": 0, "end": None, "duration": 100},
            {"node": "z", "start": 0, "end": "", "duration": ""}]
    result = _read(*rows, fields=FieldSpec(duration="duration"), times=TimeSpec(duration_unit="s"))
    assert [(f.event.node, f.event.end) for f in result.faults] == [("x", 5.0), ("y", 100.0),
                                                                    ("z", None)]
    assert result.duration_unit == "s"


def test_a_duration_field_is_not_found_where_an_end_field_is() -> None:
    rows = [{"node": "x", "start": 0, "end": 5, "duration": 100},
            {"node": "y", "start": 0, "end": None, "duration": 100}]
    result = _read(*rows)
    assert (result.fields.end, result.fields.duration, result.duration_unit) == ("end", None,
                                                                                 None)
    assert [(f.event.node, f.event.end) for f in result.faults] == [("x", 5.0), ("y", None)]


def test_counts_account_for_every_record() -> None:
    rows = [_iv("x", 0, 10), _iv("x", 0, 10), _iv("x", 5, 8), _iv("y", 3, 1), _iv("z", 1, None)]
    text = _jsonl(*rows) + "not json\n[1, 2]\n"
    result = read_history(text, source="h.jsonl")
    counts = result.counts
    assert (counts.records, counts.faults, counts.duplicates_merged, counts.refused,
            counts.open_faults) == (7, 2, 1, 4, 1)
    assert counts.records == counts.faults + counts.duplicates_merged + counts.refused
    assert [r.line for r in result.refused] == [3, 4, 6, 7]
    assert (result.first_time, result.last_time) == (0.0, 10.0)


# --- categories ------------------------------------------------------------------------------

def test_without_a_mapping_the_category_is_the_top_level_as_given() -> None:
    result = _read(_iv("x", 0, 1, "Hardware Failure / GPU / GPU xid Error"), _iv("x", 2, 3, "psu"),
                   {"node": "x", "start": 4, "end": 5})
    assert [(f.event.category, f.mapped) for f in result.faults] == [
        ("Hardware Failure", False), ("psu", False), ("unknown", False)]


# --- whole-file problems ---------------------------------------------------------------------

@pytest.mark.parametrize(("text", "kwargs", "message"), [
    ("[]", {}, "h.jsonl: no records to import"),
    ("[1, 2]", {}, r"h.jsonl: no records to import \(line 1: record is a JSON int"),
    ('[{"rack": "a", "time": 1, "event": "fault_start"}]', {}, "pass --node-field"),
    ('[{"node": "a", "when": 1}]', {}, "pass --time-field"),
    ("[]", {"fmt": "yaml"}, "unknown format 'yaml'"),
    ('[{"node": "a"', {}, "h.jsonl is not valid JSON"),
])
def test_whole_file_problems_are_history_errors(text: str, kwargs: dict[str, object],
                                                message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        read_history(text, source="h.jsonl", **kwargs)  # type: ignore[arg-type]


def test_an_unknown_time_unit_is_a_history_error_before_reading() -> None:
    with pytest.raises(HistoryError, match="unknown time unit 'weeks'"):
        _read(_ev("a", 0), times=TimeSpec(unit="weeks"))


# --- node identity, units --------------------------------------------------------------------

def test_several_node_fields_name_a_node_together() -> None:
    rows: list[dict[str, object]] = [
        {"System": "20", "node number": 15, "start": 0, "end": 5, "type": "t"},
        {"System": "2", "node number": 15, "start": 1, "end": 6, "type": "t"},
        {"System": "2", "node number": None, "start": 1, "end": 6, "type": "t"},
        {"System": "", "node number": 3, "start": 1, "end": 6, "type": "t"}]
    result = _read(*rows, fields=FieldSpec(node=("System", "node number")))
    assert [(f.line, f.event.node) for f in result.faults] == [(1, "20/15"), (2, "2/15")]
    assert _reasons(result) == ["line 3: no node (field 'node number')",
                                "line 4: no node (field 'System')"]
    assert result.fields.node == ("System", "node number")


def test_a_duration_field_reads_in_the_unit_its_name_states() -> None:
    result = _read({"node": "a", "start": 0, "duration_h": 2})
    assert (result.duration_unit, result.faults[0].event.end) == ("h", 7200.0)
    with pytest.raises(HistoryError, match=r"h\.jsonl: the duration field 'duration_h' says h but "
                                           r"--duration-unit is minutes"):
        _read({"node": "a", "start": 0, "duration_h": 2},
              times=TimeSpec(duration_unit="minutes"))
    with pytest.raises(HistoryError, match=r"h\.jsonl: the duration field 'ttr' does not say"):
        _read({"node": "a", "start": 0, "ttr": 2})


def test_epoch_milliseconds_are_refused_unless_said() -> None:
    row = {"node": "a", "start": 1717400000000, "end": 1717400060000}
    assert _reasons(_read(row)) == [
        "line 1: start (field 'start'): 1717400000000 is too large for unix seconds (the year "
        "5138 or later): pass --epoch-unit ms"]
    fault = _read(row, times=TimeSpec(epoch_unit="ms")).faults[0].event
    assert (fault.start, fault.end) == (1717400000.0, 1717400060.0)
