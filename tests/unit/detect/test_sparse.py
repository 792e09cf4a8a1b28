"""Sparse error counters (detect/sparse.py): recurrence scores beyond the series' own chance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainguard.detect.config import DetectorConfig
from trainguard.detect.knowledge import is_repair_counter
from trainguard.detect.signals.counters import CounterConfig
from trainguard.detect.sparse import (
    RECUR_CHANCE,
    WINDOW,
    SparseCounters,
    at_least,
    recur_chance,
    step_rows,
)

ALPHA = 0.002  # about a 6-h half-life at 30-s blocks
WARM = 5.0


def _tail(count: int, p: float) -> float:
    return sum(math.comb(WINDOW, j) * p ** j * (1 - p) ** (WINDOW - j)
               for j in range(count, WINDOW + 1))


@pytest.mark.parametrize("p", [0.0, 0.01, 0.1, 0.37, 0.9, 1.0])
def test_at_least_is_the_binomial_tail(p: float) -> None:
    counts = np.arange(WINDOW + 1, dtype=np.float64)
    got = at_least(counts, np.full(counts.shape, p))
    assert got == pytest.approx([_tail(int(c), p) for c in counts], abs=1e-12)


def _feed(c: SparseCounters, active: list[bool]) -> list[float]:
    """One series; a block with activity holds one event."""
    zs = []
    for a in active:
        z, _ = c.step(np.array([1.0 if a else 0.0]), ALPHA, WARM)
        zs.append(float(z[0]))
    return zs


def _series() -> SparseCounters:
    c = SparseCounters()
    c.grow((1,))
    return c


def test_a_burst_after_a_quiet_history_scores_its_recurrence_at_once() -> None:
    c = _series()
    zs = _feed(c, [False] * 40 + [True] * 6)
    burst = zs[40:]
    assert burst == sorted(burst)
    # 2.5 per active block in the window, plus the excess of one event over a normal of ~0.
    assert burst[-1] > 2.5 * 6
    assert c.before[0] == 0.0  # the burst is still in the window: not yet "usual"


def test_a_series_that_counts_at_random_all_its_life_does_not_score_its_recurrence() -> None:
    """A trickle in about 1 block of 8: its window holds 3 or 4 active blocks now and then by
    chance, which the plain recurrence term scored 7.5-10 each time."""
    rng = np.random.default_rng(7)
    trickle = list(rng.random(4000) < 0.12)
    chronic = _feed(_series(), trickle)
    quiet_first = _feed(_series(), [False] * 3000 + trickle[3000:])
    late = slice(3200, 4000)  # both have seen the same last 800 blocks
    high = [z for z in chronic[late] if z >= 7.5]
    assert len(high) <= 0.01 * 800, len(high)
    # The same blocks on a series that was quiet until block 3000 score high, in two runs (10
    # blocks; 0 on the chronic series): the gate, not the data, makes the difference. Its rate
    # before the window is learnt slowly, and the gate closes as it is.
    assert sum(z >= 7.5 for z in quiet_first[3000:3200]) >= 5 > len(high)


@pytest.mark.parametrize("p", [0.05, 0.12])
def test_a_trickle_rarely_passes_the_gate_by_chance(p: float) -> None:
    """64 series counting at random, each in a fraction `p` of 2-minute blocks, for 12 days:
    every block is a look, 720 a day. At 1e-3 per look (before 2026-12-02) each series opened a
    chance recurrence (3+ active blocks in the window, scored 7.5+) about once a day (0.9-1.1
    per series-day measured); at `recur_chance(120)` with the rate read two standard errors low,
    0.02-0.05; at the rate as learnt, 0.001-0.004."""
    rng = np.random.default_rng(1)
    cfg = CounterConfig.of(DetectorConfig())     # 2-minute blocks, 6-hour half-life
    c = SparseCounters()
    c.grow((64,))
    opened, was = 0, np.zeros(64, dtype=bool)
    for b in range(14 * 720):
        z, _ = c.step((rng.random(64) < p).astype(np.float64), cfg.alpha, cfg.warm_n,
                      chance=cfg.chance)
        high = z >= 2.5 * 3
        if b >= 2 * 720:                        # 2 days to learn each series' own rate
            opened += int(np.count_nonzero(high & ~was))
        was = high
    assert opened <= 0.01 * 64 * 12, opened
    assert recur_chance(120) == RECUR_CHANCE and recur_chance(60) == RECUR_CHANCE / 2


def test_a_recurrence_well_beyond_the_series_rate_still_scores() -> None:
    rng = np.random.default_rng(3)
    c = _series()
    _feed(c, list(rng.random(3000) < 0.05))
    zs = _feed(c, [True] * 8)
    assert c.before[0] < 0.1
    assert at_least(np.array([8.0]), c.before[:1])[0] <= RECUR_CHANCE
    assert zs[-1] >= 2.5 * 8


def test_step_rows_keeps_the_rate_before_the_window_of_the_rows_it_steps() -> None:
    c = SparseCounters()
    c.grow((3, 2))
    rows = np.array([0, 2])
    for i in range(30):
        k = np.array([[1.0, 0.0], [float(i % 2), 0.0]])
        step_rows(c, rows, k, ALPHA, WARM)
    assert c.before[0, 0] == 1.0 and c.before[2, 0] == pytest.approx(0.5, abs=0.06)
    assert (c.before[1] == 0.0).all() and (c.n[1] == 0.0).all()  # not stepped
    c.reset_row(2)
    assert (c.before[2] == 0.0).all() and c.before[0, 0] == 1.0


def test_a_repair_counter_ramping_since_before_the_history_still_scores() -> None:
    """Rows remapped block after block on a GPU that was already remapping when the history
    began: its rate before the window is high, but a spare spent is never chance, so its row
    is not gated; the same counts on a gated row (a replay counter) are."""
    rng = np.random.default_rng(11)
    ramp = list(rng.random(600) < np.linspace(0.1, 0.2, 600))
    repair, transient = SparseCounters(), SparseCounters()
    repair.grow((1,))
    transient.grow((1,))
    zr, zt = [], []
    for a in ramp:
        k = np.array([1.0 if a else 0.0])
        zr.append(float(repair.step(k, ALPHA, WARM, gated=np.array([False]))[0][0]))
        zt.append(float(transient.step(k, ALPHA, WARM)[0][0]))
    assert sum(z >= 7.5 for z in zr[300:]) > 3 * max(1, sum(z >= 7.5 for z in zt[300:]))


@pytest.mark.parametrize(("name", "repair"), [
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", True),
    ('DCGM_FI_DEV_RETIRED_SBE{gpu="0"}', True),
    ("nvidia_gpu_retired_pages_total", True),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", False),  # hard evidence, not a precursor
    ("DCGM_FI_DEV_RETIRED_DBE", False),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", False),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", False),
])
def test_which_counters_are_repairs(name: str, repair: bool) -> None:
    assert is_repair_counter(name) is repair


def test_a_series_is_judged_at_the_rate_it_was_active_before_the_window() -> None:
    """Two active blocks in the 110 before, then two in the window: at the rate learnt (about 2
    in 110) two in ten happen by chance one look in 70, and the recurrence term stays off. The
    same window after a quiet history scores it. (Reading the rate two standard errors low, as
    before 2026-12-02, took two events for no proof of a rate and scored this window.)"""
    history = [False] * 50 + [True] + [False] * 30 + [True] + [False] * 40
    trickle, quiet = _series(), _series()
    _feed(trickle, history)
    _feed(quiet, [False] * len(history))
    assert 0.005 < trickle.before[0] < 0.05 and quiet.before[0] == 0.0
    assert at_least(np.array([2.0]), trickle.before[:1])[0] > 100 * RECUR_CHANCE
    assert _feed(trickle, [True, True])[-1] < 2.5 * 2
    assert _feed(quiet, [True, True])[-1] >= 2.5 * 2
