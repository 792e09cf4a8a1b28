"""Issue 26, section 4: the judge never names a healthy host. No peer comparison on fewer
than MIN_PEERS other hosts (only floors), and a gap must exceed the figure's own run-to-run
spread on that host; real faults (a host at 0.3x, a tenth of the bandwidth) are still named."""

from __future__ import annotations

import random

import pytest

from trainguard.check.floors import Floors
from trainguard.check.judge import MIN_PEERS, JudgeConfig, compare, judge, merge_attempts, summarize
from trainguard.check.model import Figure, Finding, Level, ProbeResult, Status
from trainguard.check.probe_base import figure


def _gemm(values: list[float], spreads: list[float] | None = None) -> list[ProbeResult]:
    spreads = spreads or [0.0] * len(values)
    return [ProbeResult("cpu_gemm", f"h{i}", Status.OK,
                        figures=(Figure("gemm_gflops", v, "GFLOP/s", True, s),))
            for i, (v, s) in enumerate(zip(values, spreads, strict=True))]


def _bad(findings: list[Finding]) -> list[tuple[str, Level]]:
    return [(f.subject, f.level) for f in findings if f.level is not Level.PASS]


def test_three_identical_hosts_never_name_one_at_0_58x() -> None:
    # the reported case: 2 other hosts, "0.58x median, robust z -7.8" after re-measuring
    first = _gemm([50.0, 50.4, 29.0])
    again = _gemm([50.0, 50.4, 29.2])[2:]
    findings = judge(first + again)
    assert _bad(findings) == []
    assert all("3 hosts: compared with floors only (a comparison needs 4 other hosts)"
               in f.reason for f in findings)


def test_four_hosts_are_floors_only_and_floors_still_fail() -> None:
    results = _gemm([50.0, 50.0, 50.0, 5.0])
    assert _bad(judge(results)) == []
    floors = Floors.from_mapping({"gemm_gflops": 20})
    assert _bad(judge(results, floors)) == [("h3", Level.FAIL)]


def test_with_min_peers_others_a_real_fault_is_named() -> None:
    assert MIN_PEERS == 4
    assert _bad(judge(_gemm([50.0, 50.0, 49.0, 51.0, 15.0]))) == [("h4", Level.SLOW)]


def test_a_gap_within_the_hosts_own_spread_is_no_verdict() -> None:
    # read_mbps on a page-cache-affected host: its own passes moved by 40%
    values = [900.0, 880.0, 910.0, 905.0, 890.0, 895.0, 900.0, 450.0]
    spreads = [0.05] * 7 + [0.4]
    assert _bad(judge(_gemm(values, spreads))) == []
    # the same gap with tight repeats is a verdict, and its reason names the spread
    findings = judge(_gemm(values, [0.05] * 7 + [0.05]))
    assert _bad(findings) == [("h7", Level.SLOW)]
    assert "repeat spread 5%" in next(f.reason for f in findings if f.subject == "h7")


def test_noisy_peers_widen_the_margin_for_everyone() -> None:
    values = [900.0, 880.0, 910.0, 905.0, 890.0, 895.0, 900.0, 450.0]
    assert _bad(judge(_gemm(values, [0.3] * 8))) == []


def test_a_host_capped_at_30_percent_is_still_named() -> None:
    for seed in range(50):
        rng = random.Random(seed)
        values = [50.0 * rng.uniform(0.9, 1.1) for _ in range(7)] + [15.0]
        spreads = [rng.uniform(0.0, 0.2) for _ in range(8)]
        assert summarize(judge(_gemm(values, spreads)))["h7"] is Level.SLOW


def test_compare_needs_the_gap_beyond_the_spread() -> None:
    cfg = JudgeConfig()
    others = [100.0, 101.0, 99.0, 100.0]
    # 0.6 x (1 - spread): 0.48 at a 20% spread, 0.36 at 40%
    assert compare(40.0, others, True, cfg, own_spread=0.2).slow  # type: ignore[union-attr]
    assert not compare(40.0, others, True, cfg, own_spread=0.4).slow  # type: ignore[union-attr]
    assert not compare(40.0, others, True, cfg, 0.0, [0.4, 0.4, 0.4, 0.0]).slow  # type: ignore[union-attr]
    assert compare(250.0, others, False, cfg, own_spread=0.2).slow  # type: ignore[union-attr]
    assert not compare(250.0, others, False, cfg, own_spread=0.4).slow  # type: ignore[union-attr]
    assert compare(50.0, others[:3], True, cfg) is None


def test_two_attempts_that_disagree_widen_the_spread() -> None:
    a = ProbeResult("storage", "h1", Status.OK, figures=(figure("read_mbps", 300.0),))
    b = ProbeResult("storage", "h1", Status.OK, figures=(figure("read_mbps", 500.0),))
    [merged] = merge_attempts([a, b])
    read = merged.figure("read_mbps")
    assert read is not None and read.value == 500.0 and read.spread == pytest.approx(0.4)


def test_judge_config_refuses_fewer_peers() -> None:
    with pytest.raises(ValueError, match=r"check\.min_peers"):
        JudgeConfig(min_peers=2)


def test_spread_crosses_the_wire_and_a_bad_one_is_no_spread() -> None:
    f = Figure("read_mbps", 10.0, "MB/s", True, 0.25)
    assert Figure.from_dict(f.to_dict()) == f
    for bad in (float("nan"), -1.0):
        assert Figure.from_dict({**f.to_dict(), "spread": bad}).spread == 0.0
    assert Figure.from_dict({**f.to_dict(), "spread": 7.0}).spread == 1.0
