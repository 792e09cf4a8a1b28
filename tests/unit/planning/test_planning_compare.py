"""Trace handling, the burstiness flag, and the model-vs-replay table."""

from __future__ import annotations

import numpy as np
import pytest
from planning_traces import TraceMaker, fleet_of

from trainguard.errors import ConfigError
from trainguard.planning import (
    Fleet,
    Outage,
    burstiness,
    compare,
    estimate_reliability,
    outage_table,
)


def test_outage_table_merges_and_clips() -> None:
    fleet = Fleet(("a", "b"), 100.0, 1000.0)
    table = outage_table([Outage("a", 50.0, 150.0), Outage("a", 140.0, 200.0),
                          Outage("b", 300.0, 400.0), Outage("b", 400.0, 420.0),
                          Outage("b", 990.0, 2000.0), Outage("ghost", 0.0, 10.0),
                          Outage("a", 10.0, 20.0)], fleet)
    assert table.node.tolist() == [0, 1, 1]
    assert table.start.tolist() == [100.0, 300.0, 990.0]
    assert table.end.tolist() == [200.0, 420.0, 1000.0]
    rel = estimate_reliability(table)
    down = 100.0 + 120.0 + 10.0
    assert rel.failure_rate_per_s == pytest.approx(2 / (2 * 900.0 - down))  # a's began early
    assert rel.mean_repair_s == pytest.approx(down / 3)


@pytest.mark.parametrize("bad", [
    lambda: Outage("a", 10.0, 5.0),
    lambda: Fleet((), 0.0, 1.0),
    lambda: Fleet(("a", "a"), 0.0, 1.0),
    lambda: Fleet(("a",), 5.0, 5.0),
])
def test_bad_trace_input_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError):
        bad()  # type: ignore[operator]


def test_poisson_trace_is_not_flagged(poisson_trace: TraceMaker) -> None:
    for seed in (1, 2, 3):
        b = burstiness(poisson_trace(seed=seed))
        assert not b.bursty, b.reasons
        assert b.dispersion_day is not None and 0.7 < b.dispersion_day < 1.3


def test_bursty_trace_is_flagged_and_the_replay_answers(bursty_trace: TraceMaker) -> None:
    table = bursty_trace()
    b = burstiness(table)
    assert b.bursty
    assert b.dispersion_hour is not None and b.dispersion_hour > 5
    assert b.clustered_fraction > 0.9 > 3 * b.expected_clustered
    result = compare(table, save_cost_s=60.0, restart_cost_s=300.0, sizes=(8, 64, 256))
    assert [r.nodes for r in result.rows] == [8, 64, 256]
    assert all(r.answer_from == "replay" and r.reasons for r in result.rows)
    # correlated outages: the binomial model badly underestimates the wait for hardware
    big = result.rows[-1]
    assert big.replay_wait > 5 * big.model_wait
    assert big.replay_spares is not None and big.model_spares is not None
    assert big.replay_spares > big.model_spares + 1


def test_clustered_share_counts_other_nodes_only() -> None:
    fleet = fleet_of(4, 30 * 86400.0)
    # one node flapping: starts close together but on the same node
    same = [Outage("n0", 1000.0 + 100.0 * k, 1000.0 + 100.0 * k + 10.0) for k in range(10)]
    assert burstiness(outage_table(same, fleet)).clustered_fraction == 0.0
    pair = [Outage("n1", 5000.0, 5100.0), Outage("n2", 5060.0, 5200.0),
            Outage("n3", 50000.0, 50100.0)]
    assert burstiness(outage_table(pair, fleet)).clustered_fraction == pytest.approx(2 / 3)


def test_compare_skips_sizes_the_fleet_cannot_hold(poisson_trace: TraceMaker) -> None:
    table = poisson_trace(nodes=40, seed=5)
    result = compare(table, save_cost_s=60.0, restart_cost_s=300.0)
    assert [r.nodes for r in result.rows] == [8, 16, 32]
    row = result.rows[0]
    assert row.interval_s > 0 and row.spares == row.model_spares
    assert np.isfinite(row.ettr_gap_pp)
