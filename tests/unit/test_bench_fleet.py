"""The pure parts of benchmarks/bench_fleet.py: the verdicts follow the figures and the targets
(ETTR within 2 pp and spares within one node; otherwise only a replay answer is acceptable), and
the tables carry every row."""

from __future__ import annotations

from types import ModuleType

import pytest
from script_module import load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("benchmarks/bench_fleet.py", "bench_fleet")


def test_agreement_verdicts(bench: ModuleType) -> None:
    close = bench.Agreement("c", 8, 2, 3, 0.970, 0.955, "model", "")
    assert close.gap_pp == pytest.approx(1.5) and close.verdict == "agrees"
    far = bench.Agreement("c", 8, 2, 2, 0.970, 0.940, "model", "")
    assert far.verdict == "MISSES"
    spares_off = bench.Agreement("c", 64, 4, 7, 0.97, 0.97, "replay", "bursty trace")
    assert spares_off.spares_gap == 3 and spares_off.verdict == "replay answers"
    unknown = bench.Agreement("c", 8, None, 2, 0.97, 0.97, "model", "")
    assert unknown.spares_gap is None and unknown.verdict == "MISSES"


def test_timing_against_the_target(bench: ModuleType) -> None:
    fast = bench.Timing("real", 584, 0.6, 0.8)
    slow = bench.Timing("big", 9000, 3.0, 2.5)
    assert fast.total_s == pytest.approx(1.4) and fast.ratio == pytest.approx(0.28)
    table = bench.timing_table([fast, slow]).splitlines()
    assert len(table) == 3
    assert "meets target" in table[1] and "over target" in table[2]


def test_agreement_table_has_a_row_per_size(bench: ModuleType) -> None:
    rows = [bench.Agreement("p", n, 1, 1, 0.99, 0.99, "model", "ok") for n in (8, 16, 32)]
    lines = bench.agreement_table(rows).splitlines()
    assert len(lines) == 4 and all("agrees" in line for line in lines[1:])
