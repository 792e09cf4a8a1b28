"""The time-weighted distribution of concurrently-down nodes, against brute force over time."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from trainguard.errors import FleetError
from trainguard.fleet.down import (
    DownBucket,
    down_seconds,
    down_series,
    down_steps,
    mean_down,
    nodes_down,
    time_quantile,
)
from trainguard.fleet.events import FaultEvent, FleetWindow


def ev(node: str, start: float, end: float | None) -> FaultEvent:
    return FaultEvent(node, start, end, "x", "x")


def test_hand_example_with_overlap_on_one_node() -> None:
    w = FleetWindow(0.0, 100.0, fleet_size=4)
    events = [ev("a", 10.0, 50.0), ev("a", 20.0, 60.0),  # one outage 10..60
              ev("b", 40.0, 70.0), ev("c", 45.0, None)]  # c open to 100
    d = nodes_down(events, w)
    # 0-10: 0; 10-40: 1; 40-45: 2; 45-60: 3; 60-70: 2; 70-100: 1
    assert dict(d.seconds_at) == {0: 10.0, 1: 60.0, 2: 15.0, 3: 15.0}
    assert (d.p50, d.p90, d.p99, d.max) == (1, 3, 3, 3)
    assert d.fraction_at_least(2) == pytest.approx(0.30)
    assert d.fraction_at_least(3) == pytest.approx(0.15)
    assert d.fraction_at_least(0) == 1.0
    assert d.at_least() == pytest.approx({1: 0.9, 2: 0.3, 3: 0.15})


def test_no_faults_means_zero_down_all_the_time() -> None:
    d = nodes_down([], FleetWindow(0.0, 10.0, 2))
    assert dict(d.seconds_at) == {0: 10.0}
    assert (d.p50, d.p99, d.max) == (0, 0, 0)


def test_time_quantile_boundaries() -> None:
    seconds = {0: 50.0, 1: 40.0, 4: 10.0}
    assert time_quantile(seconds, 0.5) == 0
    assert time_quantile(seconds, 0.9) == 1
    assert time_quantile(seconds, 0.91) == 4


def brute_force(events: list[FaultEvent], w: FleetWindow) -> Counter[int]:
    """Count down nodes at every unit step's midpoint (all times are integers)."""
    out: Counter[int] = Counter()
    for t in range(int(w.start), int(w.end)):
        mid = t + 0.5
        down = {e.node for e in events
                if e.start <= mid < (w.end if e.end is None else e.end)}
        out[len(down)] += 1
    return out


@pytest.mark.parametrize("seed", range(5))
def test_sweep_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    w = FleetWindow(100.0, 600.0, fleet_size=8)
    events = []
    for _ in range(30):
        start = float(rng.randrange(0, 650))
        end = None if rng.random() < 0.1 else start + rng.randrange(0, 120)
        events.append(ev(f"n{rng.randrange(8)}", start, end))
    expected = brute_force(events, w)
    got = down_seconds(events, w)
    assert got == {c: float(s) for c, s in sorted(expected.items())}
    assert nodes_down(events, w).max == max(expected)


def test_steps_and_series_hand_example() -> None:
    w = FleetWindow(0.0, 100.0, fleet_size=4)
    events = [ev("a", 10.0, 50.0), ev("a", 20.0, 60.0),  # one outage 10..60
              ev("b", 40.0, 70.0), ev("c", 45.0, None),  # c open to 100
              ev("d", 80.0, 80.0)]  # zero length: changes nothing
    steps = down_steps(events, w)
    assert steps == [(0.0, 0), (10.0, 1), (40.0, 2), (45.0, 3), (60.0, 2), (70.0, 1)]
    series = down_series(steps, w, 30.0)
    # 0-30: 0 for 10 s then 1 for 20 s; 30-60: 1 x10, 2 x5, 3 x15; 60-90: 2 x10, 1 x20;
    # 90-100 (shorter): 1.
    assert [(b.start, b.end, b.max) for b in series] == [
        (0.0, 30.0, 1), (30.0, 60.0, 3), (60.0, 90.0, 2), (90.0, 100.0, 1)]
    assert [b.mean for b in series] == pytest.approx([20 / 30, 65 / 30, 40 / 30, 1.0])
    assert mean_down(down_seconds(events, w)) == pytest.approx((60 + 30 + 45) / 100)
    assert isinstance(series[0], DownBucket)


def test_steps_merge_a_start_at_the_window_start_and_simultaneous_changes() -> None:
    w = FleetWindow(0.0, 10.0, fleet_size=3)
    events = [ev("a", -5.0, 4.0), ev("b", 4.0, 6.0), ev("c", 0.0, 2.0)]
    # a ends as b starts: the level stays 1 at t=4 (no step)
    assert down_steps(events, w) == [(0.0, 2), (2.0, 1), (6.0, 0)]
    assert mean_down({}) == 0.0
    with pytest.raises(FleetError):
        down_series(down_steps(events, w), w, 0.0)


@pytest.mark.parametrize("seed", range(3))
def test_series_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    w = FleetWindow(0.0, 300.0, fleet_size=6)
    events = [ev(f"n{rng.randrange(6)}", float(s), None if rng.random() < 0.1
                 else float(s + rng.randrange(0, 60)))
              for s in (rng.randrange(-20, 300) for _ in range(25))]
    bucket = 7.0
    series = down_series(down_steps(events, w), w, bucket)
    assert len(series) == 43  # ceil(300 / 7), the last one 6 s long
    for b in series:
        levels = []
        for t in range(int(b.start), int(b.end)):  # bucket edges are whole seconds
            mid = t + 0.5
            levels.append(len({e.node for e in events
                               if e.start <= mid < (w.end if e.end is None else e.end)}))
        assert b.max == max(levels)
        assert b.mean == pytest.approx(sum(levels) / len(levels))
