"""The pure parts of benchmarks/bench_tracing.py: the tracer's micro costs are measured, the
table and the verdicts follow the numbers."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from script_module import load_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("benchmarks/bench_tracing.py", "bench_tracing")


def _result(off: float, on: float, named_after: float) -> dict[str, Any]:
    return {"repeats": 3, "steps": 300, "step_s": {"off": [off] * 3, "on": [on] * 3},
            "median_off_s": off, "median_on_s": on, "overhead": on / off - 1.0,
            "pair_overheads": [on / off - 1.0] * 3,
            "calls_per_step": 4.0, "spans_per_step": 4.0,
            "micro": {"collective_us": 5.0, "span_us": 4.0, "step_us": 1.0},
            "modelled_overhead": (4 * 5.0 + 4 * 4.0 + 1.0) / 1e6 / off,
            "hang": {"exit": 1, "hang_timeout_s": 10.0, "declared_after_last_step_s": 9.8,
                     "named_after_declared_s": named_after,
                     "culprit": {"rank": 1, "node": "node2", "process": "stopped",
                                 "reason": "never entered all_gather #143"},
                     "summary": "..."}}


def test_micro_costs_are_positive_and_small(bench: ModuleType) -> None:
    costs = bench.micro_costs(n=2000)
    assert set(costs) == {"collective_us", "span_us", "step_us"}
    assert all(0 < v < 1000 for v in costs.values())


def test_render_states_the_verdicts(bench: ModuleType) -> None:
    text = bench.render(_result(0.050, 0.0502, 0.2))
    assert "[met] end-to-end tracing overhead <= 1%: 0.40%" in text
    assert "[met] culprit named within 10 s" in text and "rank 1 on node2" in text
    text = bench.render(_result(0.050, 0.060, 12.0))
    assert "[NOT MET] end-to-end tracing overhead" in text
    assert "[NOT MET] culprit named" in text
