"""Lemon nodes (Poisson tail + Benjamini-Hochberg), over-dispersion, top-k share."""

from __future__ import annotations

import math

import pytest

from trainguard.errors import FleetError
from trainguard.fleet.events import FaultEvent, FleetWindow
from trainguard.fleet.lemons import benjamini_hochberg, dispersion, lemon_report, node_counts

DAY = 86400.0


def faults(node: str, n: int) -> list[FaultEvent]:
    return [FaultEvent(node, float(i), float(i) + 60.0, "GPU / DBE", "Hardware")
            for i in range(n)]


def test_benjamini_hochberg_hand_example() -> None:
    p = [0.01, 0.04, 0.03, 0.005, 0.5]
    adjusted, rejected = benjamini_hochberg(p, q=0.05)
    # Sorted: 0.005 (1), 0.01 (2), 0.03 (3), 0.04 (4), 0.5 (5); thresholds r x 0.01.
    # 0.04 <= 0.04 at rank 4: ranks 1..4 rejected.
    assert rejected == [True, True, True, True, False]
    assert adjusted == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.5])


def test_benjamini_hochberg_step_up_rescues_earlier_ranks() -> None:
    # Rank 1 fails its own threshold (0.02 > 0.0125) but rank 2 passes (0.024 <= 0.025).
    _, rejected = benjamini_hochberg([0.02, 0.024, 0.9, 0.9], q=0.05)
    assert rejected == [True, True, False, False]


def test_dispersion_hand_example() -> None:
    d = dispersion([0, 0, 1, 3])  # mean 1, ss = 1 + 1 + 0 + 4 = 6, variance 2
    assert (d.mean, d.variance, d.index, d.statistic) == (1.0, 2.0, 2.0, 6.0)
    # chi2 with 3 df, upper tail at 6: closed form Q(1.5, 3).
    expected = math.erfc(math.sqrt(3)) + 2 * math.sqrt(3 / math.pi) * math.exp(-3)
    assert d.p_value == pytest.approx(expected, rel=1e-10)


def test_dispersion_without_faults_and_too_few_nodes() -> None:
    assert dispersion([0, 0, 0]).p_value == 1.0
    with pytest.raises(FleetError):
        dispersion([3])


def test_node_counts_pad_zeros() -> None:
    assert node_counts(faults("a", 2) + faults("b", 5), 4) == [5, 2, 0, 0]


def test_report_like_fleet_flags_its_three_lemons() -> None:
    w = FleetWindow(0.0, 30 * DAY, fleet_size=63)
    events = faults("bad1", 12) + faults("bad2", 10) + faults("bad3", 9)
    for i in range(20):
        events += faults(f"n{i:02d}", 1)
    r = lemon_report(events, w)
    assert r.lemons == ["bad1", "bad2", "bad3"]
    assert r.top3_share == pytest.approx(31 / 51)
    assert r.looks_like_report
    assert r.dispersion.nodes == 63
    assert r.dispersion.p_value < 1e-6
    mu = 51 / 63
    top = r.nodes[0]
    assert top.expected == pytest.approx(mu)
    below = math.fsum(math.exp(-mu) * mu**j / math.factorial(j) for j in range(12))
    assert top.p_value == pytest.approx(1 - below, rel=1e-9)
    assert not any(n.lemon for n in r.nodes[3:])


def test_even_fleet_has_no_lemons_and_does_not_look_like_report() -> None:
    w = FleetWindow(0.0, 30 * DAY, fleet_size=10)
    events = [e for i in range(10) for e in faults(f"n{i}", 2)]
    r = lemon_report(events, w)
    assert r.lemons == []
    assert r.top3_share == pytest.approx(0.3)
    assert not r.looks_like_report
    assert r.dispersion.index == 0.0
    assert r.dispersion.p_value == pytest.approx(1.0)


def test_top_k_is_configurable_but_verdict_stays_top3() -> None:
    w = FleetWindow(0.0, DAY, fleet_size=5)
    events = faults("a", 4) + faults("b", 3) + faults("c", 2) + faults("d", 1)
    r = lemon_report(events, w, top_k=1)
    assert r.concentration.top_k_share == pytest.approx(0.4)
    assert r.top3_share == pytest.approx(0.9)
    assert r.looks_like_report


def test_faults_outside_window_do_not_count() -> None:
    w = FleetWindow(100.0, DAY, fleet_size=3)
    r = lemon_report(faults("a", 20), w)  # starts 0..19: before the window
    assert r.nodes == [] and r.lemons == []
