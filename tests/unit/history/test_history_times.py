"""Times of a history: ISO 8601, unix seconds, strptime formats, relative units, durations."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from trainguard.errors import HistoryError
from trainguard.history.times import TimeSpec, TimeValueError, parse_origin, unit_seconds

T0 = datetime(2024, 3, 30, 8, 15, tzinfo=UTC).timestamp()


@pytest.mark.parametrize("value", ["2024-03-30T08:15:00Z", "2024-03-30T08:15:00+00:00",
                                   "2024-03-30T16:15:00+08:00", "2024-03-30 08:15:00",
                                   "2024-03-30T03:15:00-05:00", T0, int(T0), str(T0)])
def test_absolute_times(value: object) -> None:
    assert TimeSpec().seconds(value) == T0


@pytest.mark.parametrize(("tz", "value"), [("+08:00", "2024-03-30T16:15:00"),
                                           ("-0500", "2024-03-30T03:15:00"),
                                           ("Asia/Shanghai", "2024-03-30T16:15"),
                                           ("UTC", "2024-03-30T08:15"),
                                           ("Asia/Shanghai", "2024-03-30T08:15:00Z")])
def test_naive_times_are_in_the_given_zone_and_zoned_ones_keep_theirs(tz: str,
                                                                       value: str) -> None:
    assert TimeSpec(tz=tz).seconds(value) == T0


def test_strptime_format_in_utc_or_the_given_zone() -> None:
    assert TimeSpec(time_format="%m/%d/%Y %H:%M").seconds("03/30/2024 08:15") == T0
    assert TimeSpec(time_format="%m/%d/%Y %H:%M", tz="+01:00").seconds("03/30/2024 09:15") == T0


@pytest.mark.parametrize(("unit", "value", "seconds"), [
    ("days", 1.5, 129600.0), ("d", "2", 172800.0), ("Day", 1, 86400.0),
    ("hours", 3, 10800.0), ("h", 0.5, 1800.0), ("hrs", 1, 3600.0),
    ("minutes", 2, 120.0), ("min", "1.5", 90.0), ("m", 1, 60.0),
    ("seconds", 7, 7.0), ("s", "8", 8.0), ("sec", 9, 9.0),
])
def test_relative_units_and_aliases(unit: str, value: object, seconds: float) -> None:
    assert TimeSpec(unit=unit).seconds(value) == seconds
    assert TimeSpec(unit=unit, origin=T0).seconds(value) == T0 + seconds


@pytest.mark.parametrize("option", ["unit", "duration_unit"])
def test_an_unknown_unit_is_a_history_error_naming_it(option: str) -> None:
    flag = "--time-unit" if option == "unit" else "--duration-unit"
    with pytest.raises(HistoryError, match=f"unknown time unit 'fortnights' \\({flag}\\)"):
        TimeSpec(**{option: "fortnights"})  # type: ignore[arg-type]


def test_bad_zone_and_conflicting_options_are_history_errors() -> None:
    with pytest.raises(HistoryError, match="unknown time zone 'Mars/Olympus'"):
        TimeSpec(tz="Mars/Olympus")
    with pytest.raises(HistoryError, match="one or the other"):
        TimeSpec(unit="days", time_format="%Y")
    with pytest.raises(HistoryError, match="origin must be finite"):
        TimeSpec(unit="days", origin=math.nan)


@pytest.mark.parametrize(("spec", "value", "reason"), [
    (TimeSpec(), "yesterday", "'yesterday' is not ISO 8601 or unix seconds"),
    (TimeSpec(), None, "None is not ISO 8601 or unix seconds"),
    (TimeSpec(), True, "True is not ISO 8601 or unix seconds"),
    (TimeSpec(), "nan", "'nan' is not a finite time"),
    (TimeSpec(unit="days"), "2024-03-30", "'2024-03-30' is not a number of days"),
    (TimeSpec(time_format="%m/%d/%Y %H:%M"), "2024-03-30T08:15",
     "is not a time in format '%m/%d/%Y %H:%M'"),
])
def test_unparseable_times_raise_time_value_error(spec: TimeSpec, value: object,
                                                  reason: str) -> None:
    with pytest.raises(TimeValueError, match=reason.replace("(", r"\(")):
        spec.seconds(value)


def test_durations() -> None:
    assert TimeSpec(duration_unit="s").duration(30) == 30.0
    assert TimeSpec(duration_unit="ms").duration(1500) == 1.5
    assert TimeSpec(duration_unit="minutes").duration("1.5") == 90.0
    assert TimeSpec(duration_unit="h").duration(0) == 0.0
    with pytest.raises(TimeValueError, match="negative duration -5"):
        TimeSpec(duration_unit="s").duration(-5)
    with pytest.raises(TimeValueError, match="duration 'soon' is not a number of minutes"):
        TimeSpec(duration_unit="minutes").duration("soon")


def test_parse_origin_and_unit_seconds() -> None:
    assert parse_origin("2024-03-30T08:15:00Z") == T0
    assert parse_origin(str(T0)) == T0
    assert parse_origin("2024-03-30T16:15", tz="+08:00") == T0
    with pytest.raises(HistoryError, match="--origin 'soon'"):
        parse_origin("soon")
    assert unit_seconds(" Hours ") == 3600.0


MS = 1717400000123


@pytest.mark.parametrize(("epoch", "value", "seconds"), [
    ("s", 1717400000, 1717400000.0), ("ms", MS, MS / 1000), ("ms", str(MS), MS / 1000),
    ("us", MS * 1000, MS / 1000), ("ns", MS * 10**6, MS / 1000), ("MS", MS, MS / 1000),
    ("ms", "2024-06-03T07:33:20Z", 1717400000.0),
])
def test_epoch_units(epoch: str, value: object, seconds: float) -> None:
    assert TimeSpec(epoch_unit=epoch).seconds(value) == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize(("epoch", "value", "hint"), [
    ("s", MS, "pass --epoch-unit ms"), ("s", str(MS), "pass --epoch-unit ms"),
    ("s", MS * 1000, "pass --epoch-unit us"), ("s", -MS, "pass --epoch-unit ms"),
    ("ms", MS * 1000, "pass --epoch-unit us"), ("ns", 10**30, "not a time"),
])
def test_numbers_too_large_for_the_epoch_unit_are_refused_naming_the_unit(
        epoch: str, value: object, hint: str) -> None:
    with pytest.raises(TimeValueError, match=f"too large for unix .*: {hint}"):
        TimeSpec(epoch_unit=epoch).seconds(value)


def test_epoch_unit_errors() -> None:
    with pytest.raises(HistoryError, match=r"unknown epoch unit 'minutes' \(--epoch-unit\)"):
        TimeSpec(epoch_unit="minutes")
    with pytest.raises(HistoryError, match="--time-unit relative ones: pass one or the other"):
        TimeSpec(epoch_unit="ms", unit="days")
    with pytest.raises(HistoryError, match="--time-format formatted ones"):
        TimeSpec(epoch_unit="ms", time_format="%Y")
    assert TimeSpec(epoch_unit="ms").describe() == "ISO 8601 or unix time in ms"


def test_a_duration_needs_its_unit() -> None:
    with pytest.raises(ValueError, match="needs a duration_unit"):
        TimeSpec().duration(5)
