"""The counter-deviation unit (detect/signals/counters.py): recurrence of rare error counts."""

from __future__ import annotations

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.signals.counters import CounterConfig, CounterDeviation, events

N, G = 10, 8
CFG = CounterConfig.of(DetectorConfig(warmup_s=600.0))  # warm after 5 blocks


def _unit() -> CounterDeviation:
    c = CounterDeviation(CFG)
    c.grow(2, 0, N, G)
    return c


NO_VOLUME = np.array([False, False])


def _run(c: CounterDeviation, x: np.ndarray, volume: np.ndarray = NO_VOLUME
         ) -> tuple[np.ndarray, np.ndarray]:
    """One block: metric 0 a gauge, metric 1 a counter (rates, one event per block = 1.0)."""
    z1 = np.full((2, N, G), 0.25)
    z2 = np.full((2, N), 0.25)
    led = c.step(x, np.zeros((0, N)), np.array([1.0, 1.0]), np.array([False, True]), z1, z2,
                 volume)
    return z1, led


def test_a_rare_counter_recurring_on_one_gpu_scores_more_block_after_block() -> None:
    c = _unit()
    quiet = np.zeros((2, N, G))
    for _ in range(8):
        _run(c, quiet)
    scores = []
    for _ in range(4):
        x = quiet.copy()
        x[1, 4, 6] = 2.0
        z1, led = _run(c, x)
        scores.append(z1[1, 4, 6])
    assert scores == sorted(scores) and scores[0] > 2.5 and scores[-1] >= 10
    assert (z1[0] == 0.25).all()  # the gauge keeps its baseline deviation
    assert z1[1, 0, 0] == 0.0  # a quiet sparse series scores 0, not its baseline deviation
    assert led[1, 4] and led.sum() == N  # the counter row: every node's series is sparse


def test_a_counter_with_events_everywhere_is_not_error_like() -> None:
    c = _unit()
    busy = np.zeros((2, N, G))
    busy[1] = 3.0  # bytes or time: counts on every series
    for _ in range(10):
        z1, led = _run(c, busy)
    assert (z1 == 0.25).all() and not led.any()
    assert c.busy_frac[1] == 1.0 and np.isnan(c.busy_frac[0])


def _idle_then_busy(volume: np.ndarray) -> list[float]:
    """A counter quiet on every GPU for hours (an idle cluster), then moving on a few nodes as a
    job starts there: the scores of one of its series over the job's first blocks."""
    c = _unit()
    for _ in range(200):
        _run(c, np.zeros((2, N, G)), volume)
    x = np.zeros((2, N, G))
    x[1, :3] = 3.0  # the job runs on three nodes
    return [float(_run(c, x, volume)[0][1, 0, 0]) for _ in range(6)]


def test_a_counter_of_work_done_is_not_error_like_after_a_long_idle_spell() -> None:
    # Energy or bytes counted on an idle cluster look as rare as errors; when a job starts,
    # every block of it would recur as an event and page on a healthy GPU.
    assert max(_idle_then_busy(NO_VOLUME)) >= 10  # the failure this guards against
    assert _idle_then_busy(np.array([False, True])) == [0.25] * 6  # baseline deviation kept


def test_reset_forgets_a_metric() -> None:
    c = _unit()
    x = np.zeros((2, N, G))
    x[1, 0, 0] = 1.0
    for _ in range(6):
        _run(c, x)
    assert c.sparse1.n[1].all() and c.sparse1.mask[1, 0, 0]
    c.reset_metric(1)
    assert not c.sparse1.n[1].any() and not c.sparse1.mask[1].any() and np.isnan(c.busy_frac[1])


def test_events_divide_by_the_known_increment_and_count_blocks_where_it_is_unknown() -> None:
    rate = np.array([[0.0, 3.0, np.nan], [0.0, 5e6, np.nan]])
    unit = np.array([[1.5], [0.0]])
    k = events(rate, unit)
    assert k[0, 1] == 2.0 and k[0, 0] == 0.0 and np.isnan(k[0, 2])
    # A counter whose increment was never seen: one event per block with an increase, not
    # 5e6 / a vanishing unit.
    assert k[1, 1] == 1.0 and k[1, 0] == 0.0 and np.isnan(k[1, 2])


def test_a_first_isolated_burst_of_a_counter_never_seen_moving_stays_bounded() -> None:
    c = _unit()
    quiet = np.zeros((2, N, G))
    unit = np.array([1.0, 0.0])  # the counter's typical increment is not known
    for _ in range(8):
        c.step(quiet, np.zeros((0, N)), unit, np.array([False, True]),
               np.zeros((2, N, G)), np.zeros((2, N)), NO_VOLUME)
    x = quiet.copy()
    x[1, 4, 6] = 1e4
    z1 = np.zeros((2, N, G))
    c.step(x, np.zeros((0, N)), unit, np.array([False, True]), z1, np.zeros((2, N)), NO_VOLUME)
    assert 2.5 < z1[1, 4, 6] < 5.0  # one active block: 2.5 + its one-event excess


def test_a_repair_counter_is_scored_beyond_its_usual_rate_and_a_transient_one_is_not() -> None:
    """Two counters with the same chronic trickle on one GPU (a sixth of the blocks) and then
    the same four blocks in a row: the transient one (replays) is chance at its usual rate,
    the repair counter (remapped rows) is scored in full."""
    c = _unit()
    both = np.array([True, True])
    rng = np.random.default_rng(5)
    z1 = np.zeros((2, N, G))
    for i in range(1200):
        x = np.zeros((2, N, G))
        if i >= 1196 or rng.random() < 1 / 6:
            x[:, 4, 6] = 1.0
        z1 = np.full((2, N, G), 0.25)
        c.step(x, np.zeros((0, N)), np.array([1.0, 1.0]), both, z1, np.full((2, N), 0.25),
               NO_VOLUME, np.array([False, True]))
    assert z1[1, 4, 6] >= 2.5 * 4
    assert z1[0, 4, 6] < 2.5 * 4
