"""The planning answers from a fleet's fault events: model and replay agree on Poisson fleets,
the replay answers on bursty ones, and the inputs (spares, interval, sizes) are honoured."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from planning_traces import YEAR_S, bursty_outages, fault_events, plan_report, poisson_outages

from trainguard.errors import ConfigError, FleetError
from trainguard.fleet import FaultEvent, FleetWindow
from trainguard.planning import (
    CURVE_FACTORS,
    JOB_SIZES,
    JobPlan,
    estimate_reliability,
    expected_ettr,
    fleet_table,
    planning_report,
    replay,
    trust,
)
from trainguard.planning.compare import Burstiness


def _poisson(nodes: int, mtbf_days: float, repair_hours: float, seed: int) -> list[FaultEvent]:
    return fault_events(poisson_outages(nodes, mtbf_days * 86400.0, repair_hours * 3600.0,
                                        YEAR_S, seed))


@pytest.mark.parametrize(("mtbf_days", "repair_hours", "seed"),
                         [(60.0, 12.0, 11), (30.0, 24.0, 12), (20.0, 6.0, 13)])
def test_model_and_replay_agree_on_poisson_fleets(mtbf_days: float, repair_hours: float,
                                                  seed: int) -> None:
    """The issue's target, from fault events: 2 pp of ETTR and one spare, N = 8..256."""
    events = _poisson(400, mtbf_days, repair_hours, seed)
    window = FleetWindow(0.0, YEAR_S, 400)
    started = time.perf_counter()
    r = plan_report(events, window, JOB_SIZES)
    elapsed = time.perf_counter() - started
    assert not r.burstiness.bursty, r.burstiness.reasons
    assert [p.nodes for p in r.sizes] == list(JOB_SIZES) and not r.skipped
    for p in r.sizes:
        assert abs(p.ettr_gap_pp) <= 2.0, p
        assert p.model_spares is not None and p.replay_spares is not None
        assert abs(p.model_spares - p.replay_spares) <= 1, p
        assert (p.answer_from, p.reasons) == ("model", ())
        assert p.spares == p.model_spares == p.answer_spares
        assert p.interval_s == p.daly_s == p.answer_interval_s
        assert p.replay_failures > 0 and p.model_wait < 0.01
        # the curve peaks at (or next to) the optimum, on both sides
        best = max(range(len(p.curve)), key=lambda i: p.curve[i].model_ettr)
        assert p.curve[best].factor == 1.0
        assert abs(p.replay_best_interval_s / p.daly_s - 1.0) < 1.0
    assert elapsed < 3.0  # a year of 400 nodes, six job sizes


def test_bursty_fleet_is_flagged_and_answered_by_the_replay() -> None:
    events = fault_events(bursty_outages(400, 0.5, 24, 12 * 3600.0, YEAR_S, 5))
    r = plan_report(events, FleetWindow(0.0, YEAR_S, 400), (8, 64, 256))
    assert r.burstiness.bursty
    assert [p.nodes for p in r.sizes] == [8, 64, 256]
    for p in r.sizes:
        assert p.answer_from == "replay"
        assert set(r.burstiness.reasons) <= set(p.reasons)
        assert p.spares == p.replay_spares == p.answer_spares  # ETTR with the replay's pool
        assert p.answer_ettr == p.replay_ettr
        assert p.answer_interval_s == p.replay_best_interval_s
        best = max(p.curve, key=lambda c: c.replay_ettr)
        assert p.replay_best_ettr >= best.replay_ettr - 1e-12
    big = r.sizes[-1]
    # faults come many at a time: the binomial model asks for far too few spares
    assert big.replay_spares is not None and big.model_spares is not None
    assert big.replay_spares > big.model_spares + 1
    assert any("spare answers differ" in x for x in big.reasons)


def test_given_spares_and_interval_are_what_ettr_is_evaluated_with() -> None:
    events = _poisson(120, 30.0, 24.0, 3)
    window = FleetWindow(0.0, YEAR_S, 120)
    r = plan_report(events, window, (8, 32), spares=3, interval_s=3600.0,
                    replays=3, seed=4)
    table, _ = fleet_table(events, window)
    rel = estimate_reliability(table)
    for p in r.sizes:
        plan = JobPlan(p.nodes, 3, 3600.0, 120.0, 600.0)
        assert (p.spares, p.interval_s) == (3, 3600.0)
        assert p.model_ettr == pytest.approx(expected_ettr(plan, rel))
        again = replay(table, plan, count=3, seed=4)
        assert p.replay_ettr == pytest.approx(again.mean_ettr)
        assert p.replay_ettr_spread == pytest.approx(again.ettr_spread)
        assert p.replay_ettr_low <= p.replay_ettr <= p.replay_ettr_high
        assert [c.factor for c in p.curve] == list(CURVE_FACTORS)
        assert p.curve[3].interval_s == pytest.approx(p.daly_s)  # the curve is around Daly's


def test_sizes_that_cannot_fit_are_skipped_with_a_reason() -> None:
    events = _poisson(40, 30.0, 24.0, 2)
    window = FleetWindow(0.0, YEAR_S, 40)
    r = plan_report(events, window, (64, 8, 32, 8), spares=10, replays=2)
    assert [p.nodes for p in r.sizes] == [8]
    assert [s.nodes for s in r.skipped] == [32, 64]
    assert "42 nodes" in r.skipped[0].reason and "40" in r.skipped[0].reason
    whole = plan_report(events, window, (40,), replays=2)
    p = whole.sizes[0]
    # a node is down ~3% of the time: 40 nodes without a spare wait far more than 1%
    assert (p.room, p.spares, p.model_spares, p.replay_spares) == (0, 0, None, None)
    assert p.answer_from == "replay" and p.replay_wait > 0.01
    assert "no spare count the fleet allows meets the wait target" in p.reasons
    assert any("no spare count up to 0" in n for n in p.notes)


def test_nodes_that_never_failed_are_in_the_fleet() -> None:
    events = [FaultEvent("(no fault 0)", 100.0, 200.0, "GPU", "GPU"),
              FaultEvent("n1", 300.0, 500.0, "NIC", "Network")]
    window = FleetWindow(0.0, 10_000.0, 10)
    table, zero = fleet_table(events, window)
    assert table.fleet.size == 10 and zero == 0
    assert len(set(table.fleet.nodes)) == 10
    rel = estimate_reliability(table)
    assert rel.failure_rate_per_s == pytest.approx(2 / (10 * 10_000.0 - 300.0))
    with pytest.raises(FleetError):
        fleet_table(events, FleetWindow(0.0, 10_000.0, 1))


def test_zero_length_faults_are_counted_and_left_out() -> None:
    events = [FaultEvent("a", 100.0, 100.0, "GPU", "GPU"), FaultEvent("b", 50.0, 80.0, "X", "X"),
              FaultEvent("b", 80.0, 80.0, "X", "X")]  # touches b's outage: merged into it
    table, zero = fleet_table(events, FleetWindow(0.0, 1000.0, 3))
    assert zero == 1 and table.count == 1


def test_a_fleet_without_faults_gets_the_fallback_interval() -> None:
    r = plan_report([], FleetWindow(0.0, 30 * 86400.0, 16), (8,), replays=2)
    p = r.sizes[0]
    assert r.outages == 0 and r.reliability.failure_rate_per_s == 0
    assert math.isinf(p.young_s) and math.isinf(p.daly_s)
    assert p.spares == 0 and p.model_wait == 0.0 and p.replay_wait == 0.0
    assert p.model_ettr == pytest.approx(86400.0 / (86400.0 + 120.0))
    assert abs(p.ettr_gap_pp) < 0.5 and p.answer_from == "model"
    assert any("no finite optimum" in n for n in p.notes)


@pytest.mark.parametrize("bad", [
    {"job_sizes": ()}, {"job_sizes": (0, 8)}, {"max_wait_fraction": 0.0},
    {"max_wait_fraction": 1.5}, {"replays": 0}, {"save_cost_s": -1.0},
    {"restart_cost_s": math.nan}, {"interval_s": 0.0}, {"spares": -1},
])
def test_bad_input_is_a_config_error(bad: dict[str, object]) -> None:
    kwargs: dict[str, object] = {"job_sizes": (8,), "save_cost_s": 1.0, "restart_cost_s": 1.0,
                                 **bad}
    with pytest.raises(ConfigError):
        planning_report([], FleetWindow(0.0, 86400.0, 10), **kwargs)  # type: ignore[arg-type]


def test_trust_says_why_the_replay_answers() -> None:
    calm = Burstiness(10, 1.0, 1.0, 0.0, 0.01, 300.0, ())
    assert trust(calm, 1.9, 3, 4) == ("model", ())
    source, reasons = trust(calm, -2.5, 3, 5)
    assert source == "replay"
    assert reasons == ("model ETTR is -2.5 pp off the replay's",
                       "spare answers differ: model 3, replay 5")
    assert trust(calm, 0.0, None, 2)[1] == ("spare answers differ: model none the fleet "
                                            "allows, replay 2",)
    loud = Burstiness(10, 9.0, 9.0, 0.9, 0.01, 300.0, ("bursts",))
    assert trust(loud, 0.0, 2, 2) == ("replay", ("bursts",))


def test_replay_curve_is_the_replay_at_each_interval() -> None:
    events = _poisson(60, 10.0, 12.0, 8)
    table, _ = fleet_table(events, FleetWindow(0.0, YEAR_S, 60))
    rel = estimate_reliability(table)
    r = plan_report(events, FleetWindow(0.0, YEAR_S, 60), (16,), spares=2,
                    replays=3, seed=1)
    for c in r.sizes[0].curve:
        again = replay(table, JobPlan(16, 2, c.interval_s, 120.0, 600.0), count=3, seed=1)
        assert c.replay_ettr == pytest.approx(again.mean_ettr)
        assert c.model_ettr == pytest.approx(
            expected_ettr(JobPlan(16, 2, c.interval_s, 120.0, 600.0), rel))
    assert np.isfinite(r.sizes[0].replay_best_interval_s)
