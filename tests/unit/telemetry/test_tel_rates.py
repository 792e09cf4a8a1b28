"""Counter and cumulative-gauge rates: resets, gaps, monotonic detection."""

from __future__ import annotations

import numpy as np
import pytest

from trainguard.telemetry import (
    Entity,
    MetricKind,
    MetricSeries,
    Telemetry,
    detect_monotonic,
    to_rates,
)

nan = np.nan


def _series(rows: list[list[float]], kind: MetricKind = MetricKind.GAUGE,
            name: str = "m") -> MetricSeries:
    return MetricSeries(name, kind, tuple(Entity(f"n{i}") for i in range(len(rows))),
                        np.array(rows, dtype=np.float64))


def _tel(*series: MetricSeries, step: int = 10) -> Telemetry:
    n_t = series[0].values.shape[1]
    return Telemetry(np.arange(n_t, dtype=np.int64) * step, step, series)


def test_counter_rate_with_reset_and_gap() -> None:
    c = _series([[100, 110, 130, 5, nan, nan, 35, 35]], MetricKind.COUNTER, "x_total")
    (r,) = to_rates(_tel(c)).metrics
    assert r.kind is MetricKind.RATE and r.name == "x_total"
    expect = [nan, 1.0, 2.0, 0.5, nan, nan, 1.0, 0.0]  # reset: increase = 5; gap: 30 over 30 s
    np.testing.assert_allclose(r.values[0], expect, equal_nan=True)


def test_leading_nan_and_per_entity_independence() -> None:
    c = _series([[nan, nan, 10, 20], [0, 10, 20, 30]], MetricKind.COUNTER)
    (r,) = to_rates(_tel(c)).metrics
    np.testing.assert_allclose(r.values, [[nan, nan, nan, 1], [nan, 1, 1, 1]], equal_nan=True)


@pytest.mark.parametrize(("rows", "expect"), [
    ([[0, 0, 1, 1, 2, 5]], True),  # cumulative gauge (PCIe replays)
    ([[0, 1, 2, 3] * 1 + list(range(4, 200))], True),
    ([[40, 41, 40, 42, 39]], False),  # an ordinary gauge
    ([[3, 3, 3, 3]], False),  # constant: no increase at all
    ([[-1, 0, 1, 2]], False),  # negative values
    ([list(range(100)) + list(range(100))], True),  # one reset in 198 increases
    ([[0, 5, 0, 5, 0, 5]], False),  # resets as frequent as increases
    ([[nan, nan]], False),
])
def test_detect_monotonic(rows: list[list[float]], expect: bool) -> None:
    assert detect_monotonic(_series(rows)) is expect


def test_monotonic_across_entities_and_gaps() -> None:
    s = _series([[0, nan, 2, 3], [10, 10, nan, 11]])
    assert detect_monotonic(s)


def test_to_rates_leaves_gauges_and_converts_detected_cumulative_gauges() -> None:
    gauge = _series([[40, 41, 40, 42]], name="temp")
    cumulative = _series([[0, 10, 20, 40]], name="replays")
    out = {m.name: m for m in to_rates(_tel(gauge, cumulative)).metrics}
    assert out["temp"] is gauge
    assert out["replays"].kind is MetricKind.RATE
    np.testing.assert_allclose(out["replays"].values, [[nan, 1, 1, 2]], equal_nan=True)


def test_step_like_gauges_are_not_counters_but_rare_counters_with_resets_are() -> None:
    import numpy as np

    from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries
    from trainguard.telemetry.rates import detect_monotonic

    ents = (Entity("n1", "0"), Entity("n1", "1"))
    xid = np.zeros((2, 100))
    xid[0, 40:70] = 79.0  # XID gauge: set at the failure, cleared after the repair
    assert not detect_monotonic(MetricSeries("DCGM_FI_DEV_XID_ERRORS", MetricKind.GAUGE, ents, xid))
    replay = np.zeros((2, 100))
    replay[0] = np.cumsum(np.arange(100) % 10 == 0)  # ten increments...
    replay[0, 61:] -= replay[0, 60]  # ...and one reset to zero at a reboot
    assert detect_monotonic(MetricSeries("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", MetricKind.GAUGE,
                                         ents, replay))


@pytest.mark.parametrize("missing", [0.0, 0.02, 0.5, 1.0])
def test_previous_valid_is_each_cells_last_reported_value_before_it(missing: float) -> None:
    """Rows without a gap take the shifted values, the others a search: one definition."""
    from trainguard.telemetry.rates import _previous_valid

    rng = np.random.default_rng(int(missing * 100))
    v = np.round(rng.normal(size=(40, 9)), 1)
    v[rng.random(v.shape) < missing] = nan
    prev, prev_idx = _previous_valid(v)
    for r in range(v.shape[0]):
        last, last_i = nan, -1
        for t in range(v.shape[1]):
            assert prev_idx[r, t] == last_i
            np.testing.assert_array_equal(prev[r, t], last)
            if not np.isnan(v[r, t]):
                last, last_i = v[r, t], t
