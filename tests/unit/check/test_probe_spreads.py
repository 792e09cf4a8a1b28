"""Each compared figure carries its run-to-run spread on its host (the judge's margin)."""

from __future__ import annotations

import pytest

from trainguard.check.probe_base import ProbeParams
from trainguard.check.probes_cpu import cpu_gemm, mem_bandwidth
from trainguard.check.spread import relative_spread


def test_relative_spread() -> None:
    assert relative_spread([]) == relative_spread([5.0]) == 0.0
    assert relative_spread([100.0, 50.0]) == pytest.approx(0.5)
    # from five repeats on, one hiccup at each end is not the host's noise
    assert relative_spread([100.0, 99.0, 98.0, 97.0, 10.0]) == pytest.approx(1 - 97 / 99, abs=1e-4)
    assert relative_spread([float("nan"), -1.0, 0.0, 10.0]) == 0.0


@pytest.mark.parametrize("probe", [cpu_gemm, mem_bandwidth])
def test_cpu_figures_carry_the_spread_of_their_repeats(probe: object) -> None:
    params = ProbeParams("h", time_limit_s=5, gemm_size=128, copy_bytes=2**20,
                         repeat_budget_s=0.05)
    result = probe(params)  # type: ignore[operator]
    [fig] = result.figures
    assert fig.value > 0 and 0.0 <= fig.spread < 1.0
    assert int(dict(result.facts)["repeats"]) >= 3
