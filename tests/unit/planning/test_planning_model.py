"""The analytic model against closed forms."""

from __future__ import annotations

import math

import pytest

from trainguard.analytics.model import expected_ettr as first_order_ettr
from trainguard.errors import ConfigError
from trainguard.planning import (
    CURVE_FACTORS,
    JobPlan,
    NodeReliability,
    daly_interval,
    expected_ettr,
    plan_answer,
    run_efficiency,
    spares_needed,
    wait_fraction,
    young_interval,
)


def test_young_is_sqrt_2cm() -> None:
    for c, m in ((60.0, 3600.0), (30.0, 86400.0), (1.0, 10.0)):
        assert young_interval(save_cost_s=c, mtbf_s=m) == pytest.approx(math.sqrt(2 * c * m))


def test_daly_higher_order_correction() -> None:
    c, m = 60.0, 3600.0
    x = c / (2 * m)
    expected = math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c
    assert daly_interval(save_cost_s=c, mtbf_s=m) == pytest.approx(expected)
    assert daly_interval(save_cost_s=500.0, mtbf_s=200.0) == 200.0  # C >= 2M: M
    assert daly_interval(save_cost_s=60.0, mtbf_s=math.inf) == math.inf


def test_daly_maximizes_the_exact_efficiency() -> None:
    m, c, r = 20000.0, 120.0, 600.0
    tau = daly_interval(save_cost_s=c, mtbf_s=m)
    best = run_efficiency(tau, mtbf_s=m, save_cost_s=c, restart_cost_s=r)
    for f in (0.9, 0.95, 1.05, 1.1):
        assert run_efficiency(tau * f, mtbf_s=m, save_cost_s=c, restart_cost_s=r) < best


def test_down_probability_and_figures() -> None:
    rel = NodeReliability.from_figures(mtbf_days=30.0, mean_repair_hours=24.0)
    assert rel.mtbf_s == pytest.approx(30 * 86400.0)
    assert rel.down_probability == pytest.approx(1 / 31)
    assert NodeReliability(0.0, 100.0).down_probability == 0.0


def test_wait_fraction_is_the_binomial_tail() -> None:
    p = 0.05
    assert wait_fraction(10, 0, p) == pytest.approx(1 - (1 - p) ** 10)
    n, s = 12, 2
    tail = sum(math.comb(n + s, k) * p**k * (1 - p) ** (n + s - k)
               for k in range(s + 1, n + s + 1))
    assert wait_fraction(n, s, p) == pytest.approx(tail)
    assert wait_fraction(8, 3, 0.0) == 0.0


def test_efficiency_without_failures_and_to_first_order() -> None:
    assert run_efficiency(900.0, mtbf_s=math.inf, save_cost_s=100.0,
                          restart_cost_s=60.0) == pytest.approx(0.9)
    # rare failures: Daly's exact form meets the first-order ETTR of analytics.model
    m = 1e8
    exact = run_efficiency(1800.0, mtbf_s=m, save_cost_s=30.0, restart_cost_s=300.0)
    first = first_order_ettr(1800.0, nodes=1, failures_per_node_day=86400.0 / m, write_s=30.0,
                             restart_s=300.0)
    assert exact == pytest.approx(first, rel=1e-5)


def test_expected_ettr_multiplies_in_the_wait() -> None:
    rel = NodeReliability.from_figures(mtbf_days=20.0, mean_repair_hours=48.0)
    plan = JobPlan(64, 2, 2000.0, 60.0, 300.0)
    eff = run_efficiency(2000.0, mtbf_s=rel.mtbf_s / 64, save_cost_s=60.0, restart_cost_s=300.0)
    w = wait_fraction(64, 2, rel.down_probability)
    assert 0.0 < w < 1.0
    assert expected_ettr(plan, rel) == pytest.approx((1 - w) * eff)


def test_spares_needed_is_the_smallest_that_meets_the_target() -> None:
    p = 0.02
    for n in (8, 64, 256):
        s = spares_needed(n, p, 0.01)
        assert s is not None and s > 0
        assert wait_fraction(n, s, p) < 0.01 <= wait_fraction(n, s - 1, p)
    assert spares_needed(256, 0.5, 0.001, max_spares=3) is None
    assert spares_needed(8, 0.0, 0.01) == 0


def test_plan_answer_curve_peaks_at_the_optimum() -> None:
    rel = NodeReliability.from_figures(mtbf_days=60.0, mean_repair_hours=12.0)
    a = plan_answer(nodes=128, spares=4, rel=rel, save_cost_s=60.0, restart_cost_s=300.0)
    assert [pt.factor for pt in a.curve] == list(CURVE_FACTORS)
    peak = max(a.curve, key=lambda pt: pt.ettr)
    assert peak.factor == 1.0 and peak.ettr == a.ettr_at_daly
    assert a.young_s < a.daly_s + 60.0


@pytest.mark.parametrize("bad", [
    lambda: JobPlan(0, 0, 100.0, 1.0, 1.0),
    lambda: JobPlan(8, -1, 100.0, 1.0, 1.0),
    lambda: JobPlan(8, 0, 0.0, 1.0, 1.0),
    lambda: JobPlan(8, 0, 100.0, math.nan, 1.0),
    lambda: NodeReliability(-1.0, 1.0),
    lambda: wait_fraction(8, 0, 1.5),
    lambda: spares_needed(8, 0.1, 0.0),
])
def test_bad_input_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError):
        bad()  # type: ignore[operator]
