"""The time-weighted distribution of concurrently-down nodes, against brute force over time."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from trainguard.fleet.down import down_seconds, nodes_down, time_quantile
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
