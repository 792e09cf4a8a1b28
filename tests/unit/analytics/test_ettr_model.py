"""The ETTR model: formula, numeric optimum vs Young/Daly, measured inputs."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from trainguard.analytics import (
    ModelInputs,
    advise,
    expected_ettr,
    failure_stats,
    load_runs,
    measured_inputs,
    optimal_checkpoint_interval,
    young_daly_interval,
)
from trainguard.errors import ConfigError
from trainguard.store import Store


def plain_ettr(tau: float, nodes: float, f: float, w: float, r: float) -> float:
    lam = nodes * f / 86400
    return tau / (tau + w) / (1 + lam * (r + (tau + w) / 2))


@pytest.mark.parametrize(("tau", "nodes", "f", "w", "r"), [
    (1800.0, 64, 0.01, 30.0, 600.0),
    (60.0, 2000, 0.05, 5.0, 300.0),
    (1.0, 1, 0.0, 0.0, 0.0),
])
def test_expected_ettr_formula(tau: float, nodes: float, f: float, w: float, r: float) -> None:
    got = expected_ettr(tau, nodes=nodes, failures_per_node_day=f, write_s=w, restart_s=r)
    assert got == pytest.approx(plain_ettr(tau, nodes, f, w, r))


# w << tau << 1/λ: Young/Daly's first-order optimum holds
@pytest.mark.parametrize(("nodes", "f", "w", "r"), [
    (100, 0.001, 10.0, 300.0),     # 1/λ = 10 days, τ* ≈ 70 min
    (16, 0.01, 5.0, 120.0),        # 1/λ = 6.25 days
    (1000, 0.0005, 2.0, 600.0),    # 1/λ = 2 days
])
def test_optimum_close_to_young_daly(nodes: float, f: float, w: float, r: float) -> None:
    tau, ettr = optimal_checkpoint_interval(nodes, f, w, r)
    lam = nodes * f / 86400
    young = math.sqrt(2 * w / lam)
    assert w < young / 50 and young < 1 / lam / 20  # the regime holds
    assert tau == pytest.approx(young, rel=0.10)
    assert young_daly_interval(nodes=nodes, failures_per_node_day=f, write_s=w) == \
        pytest.approx(young)
    assert ettr == pytest.approx(plain_ettr(tau, nodes, f, w, r))


@pytest.mark.parametrize(("nodes", "f", "w", "r"), [
    (64, 0.01, 30.0, 600.0),
    (4000, 0.05, 120.0, 1800.0),    # a failure every ~7 min: far outside Young's regime
    (8, 0.001, 0.5, 10.0),
])
def test_optimum_beats_brute_force(nodes: float, f: float, w: float, r: float) -> None:
    tau, ettr = optimal_checkpoint_interval(nodes, f, w, r)
    grid = np.geomspace(tau / 100, tau * 100, 20001)
    values = [plain_ettr(float(t), nodes, f, w, r) for t in grid]
    best = int(np.argmax(values))
    assert ettr >= values[best] - 1e-12
    assert tau == pytest.approx(float(grid[best]), rel=1e-3)


def test_degenerate_optima() -> None:
    assert optimal_checkpoint_interval(8, 0.0, 30.0, 600.0) == (math.inf, 1.0)
    tau, ettr = optimal_checkpoint_interval(8, 0.1, 0.0, 600.0)
    assert tau == 0.0 and ettr == pytest.approx(1 / (1 + 8 * 0.1 / 86400 * 600))
    assert young_daly_interval(nodes=8, failures_per_node_day=0.0, write_s=1.0) == math.inf


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"nodes": 0}, "nodes"),
    ({"failures_per_node_day": -1.0}, "failures_per_node_day"),
    ({"write_s": math.nan}, "write_s"),
    ({"restart_s": -5.0}, "restart_s"),
])
def test_inputs_validated(kwargs: dict[str, float], key: str) -> None:
    values = {"nodes": 8.0, "failures_per_node_day": 0.01, "write_s": 10.0, "restart_s": 60.0}
    values.update(kwargs)
    with pytest.raises(ConfigError, match=key):
        ModelInputs(**values)
    with pytest.raises(ConfigError, match="interval"):
        expected_ettr(0.0, nodes=8, failures_per_node_day=0.01, write_s=1.0, restart_s=1.0)


def test_measured_inputs(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    runs = load_runs(store)
    stats = failure_stats(runs)
    m = measured_inputs(runs, stats)
    assert m.nodes is not None and m.nodes.value == 3.0  # [4, 4, 4, 2, 2, 3, 3]
    assert m.failures_per_node_day is not None
    assert m.failures_per_node_day.value == pytest.approx(stats.failures / stats.node_days)
    assert m.failures_per_node_day.samples == 5
    good = [c for c in store.checkpoints() if c.ok]
    stalls = [c.blocking_s if c.blocking_s is not None else c.save_s for c in good]
    assert m.write_s is not None and m.write_s.value == pytest.approx(statistics.median(stalls))
    assert m.write_s.samples == 5
    assert m.restart_s is not None and m.restart_s.value == pytest.approx(127.5)
    assert m.interval_s is not None and m.interval_s.value == pytest.approx(995.0)


def test_measured_inputs_without_failures() -> None:
    with Store.open(":memory:") as store:
        sid = store.create_session("ok", backend="local", started=0.0)
        aid = store.create_attempt(sid, index=0, nodes=["a"], started=0.0)
        store.finish_attempt(aid, ended=100.0, status="succeeded")
        runs = load_runs(store)
        m = measured_inputs(runs, failure_stats(runs))
    assert m.nodes is not None and m.nodes.value == 1.0
    assert (m.failures_per_node_day, m.write_s, m.restart_s, m.interval_s) == \
        (None, None, None, None)


def test_advise_table() -> None:
    a = advise(ModelInputs(64, 0.01, 30.0, 600.0), current_interval_s=600.0)
    labels = [r.label for r in a.rows]
    assert labels == ["current", "optimum / 4", "optimum / 2", "Young/Daly", "optimum",
                      "optimum x 2", "optimum x 4"]
    assert max(r.ettr for r in a.rows) == a.optimal_ettr
    none = advise(ModelInputs(64, 0.0, 30.0, 600.0))
    assert none.young_daly_ettr is None and len(none.rows) == 5
    assert none.to_dict()["optimal_interval_s"] is None
