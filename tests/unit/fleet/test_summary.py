"""The assembled fleet figures on small fleets computed by hand."""

from __future__ import annotations

import itertools
import math

import pytest

from trainguard.errors import FleetError
from trainguard.fleet.events import FaultEvent, FleetWindow
from trainguard.fleet.summary import (
    MAX_BUCKETS,
    CountBin,
    FleetSummary,
    LongRepair,
    bucket_for,
    count_bins,
    fleet_summary,
    job_sizes_within,
    report_comparison,
    top_share,
)

DAY = 86400.0
H = 3600.0


def hand_fleet() -> tuple[list[FaultEvent], FleetWindow]:
    """Four nodes over ten days (see each figure's test for the arithmetic)."""
    events = [
        FaultEvent("a", 1 * DAY, 1 * DAY + 2 * H, "GPU / DBE", "gpu"),
        FaultEvent("a", 3 * DAY, 3 * DAY + 10 * H, "GPU / fell off the bus", "gpu"),
        FaultEvent("b", 3 * DAY + 5 * H, 3 * DAY + 6 * H, "NIC / link flap", "network"),
        FaultEvent("a", 9 * DAY, None, "GPU / DBE", "gpu"),  # open: down to the end
        FaultEvent("c", -1 * DAY, 0.5 * DAY, "PSU", "power"),  # before: down time only
        FaultEvent("b", 12 * DAY, 12 * DAY + H, "PSU", "power"),  # after: nothing
    ]
    return events, FleetWindow(0.0, 10 * DAY, fleet_size=4)


@pytest.fixture
def s() -> FleetSummary:
    events, window = hand_fleet()
    return fleet_summary(events, window)


def test_counts(s: FleetSummary) -> None:
    assert (s.events, s.faults, s.open_faults, s.before_window, s.nodes_with_faults) == \
        (6, 4, 1, 1, 2)


def test_rates_per_node_day_with_garwood_intervals(s: FleetSummary) -> None:
    # 4 faults over 4 nodes x 10 days = 40 node-days
    o = s.rates.overall
    assert (o.faults, o.node_days, o.rate) == (4, 40.0, 0.1)
    # exact 95 % Poisson limits for 4 (tables): 1.090 .. 10.242
    assert (o.low * 40, o.high * 40) == pytest.approx((1.0899, 10.2416), abs=1e-3)
    assert {k: (r.faults, r.rate) for k, r in s.rates.by_category.items()} == \
        {"gpu": (3, 0.075), "network": (1, 0.025)}
    assert list(s.rates.by_kind) == ["GPU / DBE", "GPU / fell off the bus", "NIC / link flap"]
    assert s.rates.by_kind["GPU / DBE"].faults == 2


def test_mtbf_per_node_and_per_job_size_capped_to_the_fleet(s: FleetSummary) -> None:
    assert s.mtbf_node.mtbf_s == pytest.approx(10 * DAY)  # 1 / 0.1 per node-day
    assert [m.job_nodes for m in s.mtbf_jobs] == [1, 4]
    assert s.mtbf_jobs[1].mtbf_s == pytest.approx(2.5 * DAY)
    assert s.mtbf_jobs[1].low_s == pytest.approx(DAY / (10.2416 / 40 * 4), rel=1e-4)
    assert s.job_sizes_dropped == (8, 16, 32, 64, 128, 256)


def test_repairs_by_category_and_the_longest(s: FleetSummary) -> None:
    r = s.repairs.overall  # closed: 2 h, 10 h, 1 h; one open
    assert (r.count, r.open) == (3, 1)
    assert (r.median_s, r.p90_s, r.max_s) == pytest.approx((2 * H, 8.4 * H, 10 * H))
    assert r.mean_s == pytest.approx(13 * H / 3)
    assert r.tail_share == pytest.approx(10 / 13)  # ceil(0.1 x 3) = 1 repair of 13 h
    gpu = s.repairs.by_category["gpu"]  # 2 h, 10 h
    assert (gpu.count, gpu.open, gpu.median_s, gpu.p90_s) == (2, 1, 6 * H, pytest.approx(9.2 * H))
    assert s.repair_times == {"gpu": (2 * H, 10 * H), "network": (H,)}
    assert s.longest == (
        LongRepair("a", "GPU / fell off the bus", "gpu", 3 * DAY, 10 * H),
        LongRepair("a", "GPU / DBE", "gpu", 1 * DAY, 2 * H),
        LongRepair("b", "NIC / link flap", "network", 3 * DAY + 5 * H, H))


def test_nodes_down_distribution_and_series(s: FleetSummary) -> None:
    # one down: c 12 h + a 2 h + (a 10 h - 1 h with b too) + a 24 h (open) = 47 h; two: 1 h
    d = s.down
    assert d.fraction_at() == pytest.approx({0: 192 / 240, 1: 47 / 240, 2: 1 / 240})
    assert d.mean == pytest.approx(49 / 240)
    assert (d.distribution.p99, d.distribution.max) == (1, 2)
    assert d.bucket_s == H
    assert len(d.series) == 240
    assert [b.max for b in d.series[:13]] == [1] * 12 + [0]
    both = d.series[3 * 24 + 5]
    assert (both.start, both.max, both.mean) == (3 * DAY + 5 * H, 2, 2.0)
    assert max(b.max for b in d.series) == 2


def test_lemons_dispersion_and_top_k(s: FleetSummary) -> None:
    # counts a 3, b 1, c 0, d 0: mean 1
    t = {n.node: n for n in s.lemons.nodes}
    assert t["a"].p_value == pytest.approx(1 - 2.5 / math.e)  # Pr(X >= 3 | 1)
    assert t["a"].q_value == pytest.approx(4 * (1 - 2.5 / math.e))  # BH over 4 nodes
    assert s.lemons.lemons == []
    sp = s.lemons.dispersion
    assert (sp.mean, sp.variance, sp.index, sp.statistic) == (1.0, 2.0, 2.0, 6.0)
    assert s.top_k.nodes == 3 and s.top_k.share == 1.0
    assert s.top_k.poisson_share == pytest.approx(enumerated_top_k(4, 1.0, 3) / 4, rel=1e-9)


def enumerated_top_k(n: int, mu: float, k: int, cut: int = 18) -> float:
    pmf = [math.exp(x * math.log(mu) - mu - math.lgamma(x + 1)) for x in range(cut)]
    return math.fsum(math.prod(pmf[x] for x in xs) * sum(sorted(xs)[-k:])
                     for xs in itertools.product(range(cut), repeat=n))


def test_count_bins_against_poisson(s: FleetSummary) -> None:
    e = 4 / math.e
    assert s.count_bins == (CountBin(0, 2, pytest.approx(e)), CountBin(1, 1, pytest.approx(e)),
                            CountBin(2, 0, pytest.approx(e / 2)),
                            CountBin(3, 1, pytest.approx(e / 6)))


def test_report_comparison(s: FleetSummary) -> None:
    c = s.report
    assert (c.top3.nodes, c.top3.share, c.threshold, c.looks_like_report) == (3, 1.0, 0.5, True)
    assert c.scaled.nodes == 1 and c.scaled.share == 0.75  # ceil(3/63 x 4) = 1 node: a's 3 of 4


def test_report_like_fleet_and_a_poisson_like_one() -> None:
    # the report's 63 nodes: 3 nodes with 31 of 51 faults
    counts = [12, 10, 9] + [1] * 20 + [0] * 40
    c = report_comparison(counts)
    assert c.top3.share == pytest.approx(31 / 51) and c.looks_like_report
    assert c.scaled.nodes == 3
    # a Poisson fleet at 51/63 per node would put about 9 of 51 faults on its top 3
    assert c.top3.poisson_share == pytest.approx(
        enumerated_top_k_large(63, 51 / 63, 3) / 51, rel=1e-9)
    assert 0.16 < c.top3.poisson_share < 0.19
    even = report_comparison([1] * 63)
    assert even.top3.share == pytest.approx(3 / 63) and not even.looks_like_report
    assert report_comparison([0] * 200).scaled.nodes == 10  # ceil(3/63 x 200)


def enumerated_top_k_large(n: int, mu: float, k: int) -> float:
    """E[top-k sum] by order statistics of the CDF, summed directly: E[X_(j)] =
    sum_x Pr(at least j of n >= x) (an independent route to the same number)."""
    total = 0.0
    for x in range(1, 60):
        q = 1.0 - math.fsum(math.exp(y * math.log(mu) - mu - math.lgamma(y + 1))
                            for y in range(x))
        for j in range(1, k + 1):
            total += math.fsum(math.comb(n, i) * q**i * (1 - q) ** (n - i)
                               for i in range(j, n + 1))
    return total


def test_top_share_and_bins_without_faults() -> None:
    t = top_share([0, 0, 0], 2)
    assert (t.share, t.poisson_share) == (0.0, 0.0)
    assert count_bins([0, 0, 0]) == (CountBin(0, 3, 3.0),)
    with pytest.raises(FleetError):
        top_share([1, 2], 0)


def test_empty_fleet_summary() -> None:
    s = fleet_summary([], FleetWindow(0.0, DAY, fleet_size=10), job_sizes=(1, 8))
    assert (s.faults, s.rates.overall.rate, s.mtbf_node.mtbf_s) == (0, 0.0, math.inf)
    assert s.rates.overall.high == pytest.approx(3.689 / 10, abs=1e-3)
    assert s.down.fraction_at() == {0: 1.0} and s.down.mean == 0.0
    assert s.longest == () and s.lemons.lemons == [] and not s.report.looks_like_report
    assert [m.job_nodes for m in s.mtbf_jobs] == [1, 8] and s.job_sizes_dropped == ()


def test_job_sizes_within() -> None:
    assert job_sizes_within((16, 1, 8, 8), 10) == ((1, 8, 10), (16,))
    assert job_sizes_within((1, 8), 8) == ((1, 8), ())
    assert job_sizes_within((8, 64, 128), 64) == ((8, 64), (128,))
    with pytest.raises(FleetError, match="at least one node"):
        job_sizes_within((0, 8), 10)


def test_bucket_for() -> None:
    assert bucket_for(10 * DAY) == H
    assert bucket_for(365 * DAY) == 6 * H  # 8760 hourly buckets would be too many
    assert bucket_for(3650 * DAY) == 7 * DAY
    assert bucket_for(100 * 365 * DAY) == 100 * 365 * DAY / MAX_BUCKETS


def test_options_pass_through() -> None:
    events, window = hand_fleet()
    s = fleet_summary(events, window, job_sizes=(2,), top_k=1, confidence=0.9, fdr=0.5,
                      tail_fraction=0.5, longest=1)
    assert [m.job_nodes for m in s.mtbf_jobs] == [2]
    assert s.top_k.nodes == 1 and s.top_k.share == 0.75
    assert s.rates.overall.confidence == 0.9 and s.confidence == 0.9
    assert s.lemons.q == 0.5 and s.lemons.lemons == ["a"]  # 0.080 <= 1 x 0.5 / 4
    assert s.repairs.overall.tail_share == pytest.approx(12 / 13)  # ceil(1.5) = 2 longest
    assert len(s.longest) == 1
    with pytest.raises(FleetError):
        fleet_summary(events, window, top_k=0)


def test_more_nodes_with_faults_than_the_fleet_is_an_error() -> None:
    events, _ = hand_fleet()
    with pytest.raises(FleetError, match="fleet size"):
        fleet_summary(events, FleetWindow(0.0, 10 * DAY, fleet_size=1))
