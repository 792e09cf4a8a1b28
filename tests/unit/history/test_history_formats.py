"""The three source layouts the importer must read, on hand-made fixtures (see fixtures/README)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from trainguard.history import FieldSpec, TimeSpec, load_mapping, read_history

FIXTURES = Path(__file__).parent / "fixtures"
DAY = 86400.0


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp()


def test_infinitehbd_layout_needs_only_the_time_unit() -> None:
    text = (FIXTURES / "infinitehbd_like.json").read_text()
    result = read_history(text, times=TimeSpec(unit="days"), source="infinitehbd_like.json")
    assert result.fmt == "json"
    spec = result.fields
    assert (spec.mode, spec.node, spec.time, spec.event, spec.type_fields) == (
        "events", ("node_id",), "event_time", "event_type", ("fault_type",))
    assert result.refused == ()
    faults = {(f.line, f.event.node[-2:]): f.event for f in result.faults}
    assert sorted(faults) == [(2, "01"), (6, "02"), (8, "03"), (10, "02"), (18, "04"), (22, "04"),
                              (24, "01")]
    link = faults[(2, "01")]
    assert link.kind == "Hardware Failure / Network / Link Down"
    assert link.category == "Hardware Failure"
    assert (link.start, link.end) == (3.8955 * DAY, 3.9012 * DAY)
    dbe = faults[(10, "02")]
    assert dbe.kind == "Hardware Failure / GPU / GPU DBE(Double Bit ECC) > Threshold"
    assert (dbe.start, dbe.end) == (13.5 * DAY, 15.0 * DAY)
    assert faults[(22, "04")].kind == "Hardware Failure / GPU / GPU device unknow error"
    assert faults[(22, "04")].end is None
    counts = result.counts
    assert (counts.records, counts.faults, counts.open_faults, counts.refused,
            counts.duplicates_merged, counts.overlaps_merged) == (12, 7, 2, 0, 0, 4)
    assert (result.first_time, result.last_time) == (3.8955 * DAY, 30.0 * DAY)


def test_infinitehbd_layout_with_an_origin_and_a_mapping() -> None:
    text = (FIXTURES / "infinitehbd_like.json").read_text()
    origin = _utc(2024, 3, 30)
    mapping = load_mapping(FIXTURES / "infinitehbd_map.toml")
    result = read_history(text, times=TimeSpec(unit="d", origin=origin), mapping=mapping)
    got = sorted((f.line, f.event.category, f.mapped) for f in result.faults)
    assert got == [(2, "network", True), (6, "gpu", True), (8, "gpu", True),
                   (10, "memory-ecc", True), (18, "software", True), (22, "gpu", True),
                   (24, "Other Failure", False)]
    assert result.first_time == origin + 3.8955 * DAY


def test_lanl_like_csv_with_explicit_fields() -> None:
    text = (FIXTURES / "lanl_like.csv").read_text()
    fields = FieldSpec(node=("nodenum",), start="Problem Started", end="Problem Fixed",
                       type_fields=("Facilities", "Hardware", "Human Error", "Network",
                                    "Undetermined", "Software"), type_labels=True)
    result = read_history(text, fields=fields, times=TimeSpec(time_format="%m/%d/%Y %H:%M"),
                          source="lanl_like.csv")
    assert result.fmt == "csv"
    assert result.refused == ()
    got = [(f.line, f.event.node, f.event.start, f.event.end, f.event.kind, f.event.category)
           for f in result.faults]
    assert got == [
        (2, "12", _utc(2004, 6, 3, 8, 15), _utc(2004, 6, 3, 10, 45), "Hardware / Memory Dimm",
         "Hardware"),
        (3, "7", _utc(2004, 6, 4, 23, 50), _utc(2004, 6, 5, 1, 5), "Software / Kernel",
         "Software"),
        (4, "12", _utc(2004, 6, 10, 14), _utc(2004, 6, 10, 14, 30), "Facilities / Power Outage",
         "Facilities"),
        (5, "31", _utc(2004, 6, 12, 9), _utc(2004, 6, 12, 16), "Undetermined", "Undetermined"),
    ]
    # the same rows through their "Down Time" minutes instead of the fixed time
    by_duration = read_history(text, fields=FieldSpec(node=("nodenum",), start="Problem Started",
                                                      duration="Down Time"),
                               times=TimeSpec(time_format="%m/%d/%Y %H:%M",
                                              duration_unit="minutes"))
    assert [f.event.end for f in by_duration.faults] == [f.event.end for f in result.faults]


def test_generic_jsonl_with_iso_times_and_minutes() -> None:
    text = (FIXTURES / "generic.jsonl").read_text()
    result = read_history(text, times=TimeSpec(duration_unit="minutes"), source="generic.jsonl")
    assert result.fmt == "jsonl"
    spec = result.fields
    assert (spec.mode, spec.node, spec.start, spec.end, spec.duration, spec.type_fields) == (
        "intervals", ("host",), "start", None, "duration", ("kind",))
    got = [(f.line, f.event.node, f.event.start, f.event.end, f.event.kind)
           for f in result.faults]
    start_a02 = _utc(2025, 1, 6, 10, 30)
    assert got == [
        (1, "gpu-a01", _utc(2025, 1, 6, 10), _utc(2025, 1, 6, 11, 30), "nvlink"),
        (2, "gpu-a02", start_a02, start_a02 + 15.5 * 60, "xid-79"),
        (4, "gpu-a01", _utc(2025, 1, 8), _utc(2025, 1, 8, 4), "psu"),
        (5, "gpu-a03", _utc(2025, 1, 9, 6), None, "ib-link"),
    ]
    assert result.counts.open_faults == 1
    shifted = read_history(text, times=TimeSpec(duration_unit="minutes", tz="+01:00"))
    assert shifted.faults[2].event.start == _utc(2025, 1, 7, 23)  # naive time, zone given
    assert shifted.faults[0].event.start == got[0][2]  # "Z" keeps its zone
