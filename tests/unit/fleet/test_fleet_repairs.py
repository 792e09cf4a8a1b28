"""Repair times by category, open faults apart, the long tail."""

from __future__ import annotations

import random

import pytest

from trainguard.errors import FleetError
from trainguard.fleet.events import FaultEvent, FleetWindow
from trainguard.fleet.repairs import fleet_repairs, quantile, repair_stats


def test_hand_computed_stats() -> None:
    s = repair_stats([10.0, 20.0, 30.0, 40.0, 900.0], open_faults=2)
    assert (s.count, s.open) == (5, 2)
    assert s.median_s == 30.0
    assert s.p90_s == pytest.approx(40.0 + 0.6 * 860.0)  # position 3.6
    assert s.mean_s == 200.0
    assert s.max_s == 900.0
    assert s.total_s == 1000.0
    assert s.tail_share == 0.9  # ceil(0.1 x 5) = 1 longest repair: 900 of 1000


def test_tail_uses_ceil_of_fraction() -> None:
    xs = [float(i) for i in range(1, 21)]  # 20 repairs: the top 2 are 19 and 20
    assert repair_stats(xs).tail_share == pytest.approx(39 / 210)
    assert repair_stats(xs, tail_fraction=0.25).tail_share == pytest.approx((16 + 17 + 18 + 19 + 20)
                                                                            / 210)


def test_quantile_matches_numpy() -> None:
    np = pytest.importorskip("numpy")
    rng = random.Random(7)
    xs = sorted(rng.expovariate(1 / 3600) for _ in range(37))
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        assert quantile(xs, q) == pytest.approx(float(np.percentile(xs, q * 100)))


def test_empty_and_bad() -> None:
    s = repair_stats([], open_faults=3)
    assert (s.count, s.open, s.median_s, s.tail_share) == (0, 3, 0.0, 0.0)
    with pytest.raises(FleetError):
        repair_stats([-1.0])
    with pytest.raises(FleetError):
        repair_stats([1.0], tail_fraction=0.0)


def test_fleet_repairs_by_category() -> None:
    w = FleetWindow(0.0, 1000.0, fleet_size=5)
    events = [
        FaultEvent("a", 10.0, 70.0, "GPU / DBE", "Hardware"),
        FaultEvent("b", 20.0, 5020.0, "GPU / XID", "Hardware"),  # runs past the window: whole
        FaultEvent("c", 30.0, None, "PSU", "Hardware"),  # open: apart
        FaultEvent("d", 40.0, 100.0, "IB", "Network"),
        FaultEvent("e", -500.0, 10.0, "IB", "Network"),  # started before: not counted
    ]
    r = fleet_repairs(events, w)
    assert list(r.by_category) == ["Hardware", "Network"]
    hw = r.by_category["Hardware"]
    assert (hw.count, hw.open, hw.max_s, hw.median_s) == (2, 1, 5000.0, 2530.0)
    assert r.by_category["Network"].total_s == 60.0
    assert (r.overall.count, r.overall.open, r.overall.total_s) == (3, 1, 5120.0)
