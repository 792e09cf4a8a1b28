"""Fault events, the window, clipping and the outage merging rule."""

from __future__ import annotations

import math

import pytest

from trainguard.errors import FleetError, TrainguardError
from trainguard.fleet.events import (
    FaultEvent,
    FleetWindow,
    category_of,
    clip,
    counted_faults,
    merge_outages,
)

W = FleetWindow(100.0, 1000.0, fleet_size=3)


def ev(node: str, start: float, end: float | None, kind: str = "GPU / DBE",
       category: str = "Hardware") -> FaultEvent:
    return FaultEvent(node, start, end, kind, category)


@pytest.mark.parametrize("make", [
    lambda: ev("", 1.0, 2.0),
    lambda: ev("n", 5.0, 4.0),
    lambda: ev("n", math.nan, 4.0),
    lambda: ev("n", 1.0, math.inf),
    lambda: ev("n", 1.0, 2.0, kind=" "),
    lambda: ev("n", 1.0, 2.0, category=""),
    lambda: FleetWindow(10.0, 10.0, 3),
    lambda: FleetWindow(0.0, 10.0, 0),
    lambda: FleetWindow(0.0, math.inf, 3),
])
def test_bad_input_raises_fleet_error(make: object) -> None:
    with pytest.raises(FleetError):
        make()  # type: ignore[operator]
    assert issubclass(FleetError, TrainguardError)


def test_window_exposure() -> None:
    w = FleetWindow(0.0, 3 * 86400.0, fleet_size=63)
    assert w.days == 3.0
    assert w.node_days == 189.0


def test_category_of_hierarchical_kind() -> None:
    assert category_of("Hardware Failure / GPU / GPU DBE > Threshold") == "Hardware Failure"
    assert category_of("NIC") == "NIC"


def test_clip() -> None:
    assert clip(ev("a", 50.0, 200.0), W) == (100.0, 200.0)
    assert clip(ev("a", 900.0, None), W) == (900.0, 1000.0)
    assert clip(ev("a", 900.0, 5000.0), W) == (900.0, 1000.0)
    assert clip(ev("a", 10.0, 100.0), W) is None  # ends as the window starts
    assert clip(ev("a", 1000.0, 1200.0), W) is None  # starts as the window ends
    assert clip(ev("a", 300.0, 300.0), W) == (300.0, 300.0)


def test_counted_faults_start_inside_window() -> None:
    events = [ev("a", 50.0, 200.0), ev("a", 100.0, 120.0), ev("b", 999.0, None),
              ev("c", 1000.0, None)]
    assert [e.start for e in counted_faults(events, W)] == [100.0, 999.0]


def test_merge_overlapping_touching_and_disjoint() -> None:
    events = [
        ev("a", 200.0, 300.0), ev("a", 250.0, 280.0),  # contained
        ev("a", 300.0, 350.0),  # touching
        ev("a", 500.0, 600.0),  # disjoint
        ev("b", 50.0, 150.0),  # clipped at window start
        ev("b", 140.0, None),  # open: to the window end, overlaps the one before
        ev("c", 10.0, 20.0),  # outside the window
    ]
    got = [(o.node, o.start, o.end, o.faults) for o in merge_outages(events, W)]
    assert got == [("a", 200.0, 350.0, 3), ("a", 500.0, 600.0, 1), ("b", 100.0, 1000.0, 2)]


def test_merge_is_order_independent() -> None:
    events = [ev("a", 500.0, 600.0), ev("a", 300.0, 350.0), ev("a", 200.0, 300.0)]
    assert merge_outages(events, W) == merge_outages(list(reversed(events)), W)


def test_more_faulty_nodes_than_fleet_raises() -> None:
    events = [ev(n, 200.0, 300.0) for n in "abcd"]
    with pytest.raises(FleetError, match="fleet size is 3"):
        merge_outages(events, W)
    with pytest.raises(FleetError):
        counted_faults(events, W)
