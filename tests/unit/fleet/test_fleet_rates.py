"""Faults per node-day, their exact intervals and the MTBF of an N-node job."""

from __future__ import annotations

import math

import pytest

from trainguard.errors import FleetError
from trainguard.fleet.events import DAY_S, FaultEvent, FleetWindow
from trainguard.fleet.rates import fault_rates, mtbf_by_job_size, mtbf_for_job, rate

W = FleetWindow(0.0, 10 * DAY_S, fleet_size=4)  # 40 node-days


def ev(node: str, start: float, kind: str, category: str) -> FaultEvent:
    return FaultEvent(node, start, start + 3600.0, kind, category)


def test_rate_and_interval_over_node_days() -> None:
    r = rate(10, 40.0)
    assert r.rate == 0.25
    # Table: 10 events -> [4.795, 18.39] events.
    assert r.low == pytest.approx(4.795 / 40, abs=1e-4)
    assert r.high == pytest.approx(18.39 / 40, abs=1e-4)


def test_zero_faults_has_zero_rate_and_upper_bound() -> None:
    r = rate(0, 63 * 30.0)
    assert (r.rate, r.low) == (0.0, 0.0)
    assert r.high == pytest.approx(3.689 / 1890, rel=1e-3)


def test_fault_rates_overall_by_category_and_kind() -> None:
    events = [ev("a", 100.0, "GPU / DBE", "Hardware") for _ in range(3)]
    events += [ev("b", 5 * DAY_S, "GPU / XID 79", "Hardware"), ev("c", DAY_S, "IB link", "Network")]
    events += [ev("d", -10.0, "IB link", "Network"), ev("d", 10 * DAY_S, "IB link", "Network")]
    rates = fault_rates(events, W)
    assert rates.overall.faults == 5  # the two outside [start, end) do not count
    assert rates.overall.node_days == 40.0
    assert rates.overall.rate == 5 / 40
    assert list(rates.by_category) == ["Hardware", "Network"]
    assert rates.by_category["Hardware"].rate == 4 / 40
    assert rates.by_kind["GPU / DBE"].faults == 3
    assert rates.by_kind["IB link"].faults == 1
    assert rates.by_category["Network"].high == pytest.approx(rate(1, 40.0).high)


def test_mtbf_divides_by_job_size() -> None:
    r = rate(20, 40.0)  # 0.5 per node-day: MTBF_node = 2 days
    one, eight = mtbf_by_job_size(r, (1, 8))
    assert one.mtbf_s == pytest.approx(2 * DAY_S)
    assert eight.mtbf_s == pytest.approx(2 * DAY_S / 8)
    assert eight.low_s == pytest.approx(DAY_S / (r.high * 8))
    assert eight.high_s == pytest.approx(DAY_S / (r.low * 8))
    assert eight.low_s < eight.mtbf_s < eight.high_s


def test_mtbf_without_faults_is_unbounded() -> None:
    m = mtbf_for_job(rate(0, 40.0), 16)
    assert math.isinf(m.mtbf_s) and math.isinf(m.high_s)
    assert m.low_s == pytest.approx(40 * DAY_S / 3.689 / 16, rel=1e-3)
    assert m.to_dict()["mtbf_s"] is None


def test_bad_arguments() -> None:
    with pytest.raises(FleetError):
        rate(-1, 4.0)
    with pytest.raises(FleetError):
        rate(1, 0.0)
    with pytest.raises(FleetError):
        mtbf_for_job(rate(1, 4.0), 0)
