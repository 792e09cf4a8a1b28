from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest

from trainguard.detect.alerts import AlertKind
from trainguard.detect.baselines import (
    AnomalyConfig,
    StaticRule,
    anomaly_baseline,
    static_rules,
)
from trainguard.errors import ConfigError
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry

STEP = 30
T0 = 1_700_000_040  # multiple of 30 s


def tel_of(n_t: int, metrics: dict[str, tuple[MetricKind, dict[Entity, list[float]]]]
           ) -> Telemetry:
    series = []
    for name, (kind, rows) in metrics.items():
        ents = tuple(rows)
        series.append(MetricSeries(name, kind, ents,
                                   np.array([rows[e] for e in ents], dtype=np.float64)))
    return Telemetry(T0 + np.arange(n_t, dtype=np.int64) * STEP, STEP, tuple(series))


G = [Entity("n1", "0"), Entity("n1", "1"), Entity("n2", "0")]


def test_temperature_rule_episode_and_gap_split() -> None:
    hot = [60.0] * 40
    for i in (5, 6, 7, 17, 28):  # 17 is 5 min after 7 (same episode); 28 is 5.5 min after 17
        hot[i] = 90.0
    tel = tel_of(40, {"DCGM_FI_DEV_GPU_TEMP": (MetricKind.GAUGE, {
        G[0]: [60.0] * 40, G[1]: hot, G[2]: [86.0 if i == 30 else 50.0 for i in range(40)]})})
    eps = static_rules(tel)
    got = [(a.node, a.start - T0, a.end - T0) for a in eps]
    assert got == [("n1", 150, 510), ("n1", 840, 840), ("n2", 900, 900)]
    first = eps[0]
    assert first.kind is AlertKind.HARD and first.source == "static_rules"
    assert [(s.metric, s.gpu, s.deviation, s.detail) for s in first.signals] == [
        ("DCGM_FI_DEV_GPU_TEMP", "1", 90.0, "gpu_temp")]


def test_xid_gauge_fires_on_app_xids_too_and_stays_on() -> None:
    xid = [0.0] * 10 + [13.0] * 30
    tel = tel_of(40, {"DCGM_FI_DEV_XID_ERRORS": (MetricKind.GAUGE, {G[0]: xid})})
    (ep,) = static_rules(tel)
    assert (ep.start - T0, ep.end - T0) == (300, 39 * STEP)
    assert ep.signals[0].deviation == 13.0 and ep.signals[0].detail == "xid"


def test_counter_rules_fire_on_increase_not_on_level_or_reset() -> None:
    nan = float("nan")
    dbe = [2.0] * 10 + [nan] * 3 + [3.0] * 7 + [0.0] * 20  # +1 after a gap, then a reset
    pcie_slow = [float(i) for i in range(40)]  # 2 per minute: under DCGM's 8 per minute
    pcie_fast = [10.0 * i for i in range(40)]  # 20 per minute
    tel = tel_of(40, {
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (MetricKind.MONOTONIC, {G[0]: dbe}),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": (MetricKind.MONOTONIC,
                                            {G[1]: pcie_slow, G[2]: pcie_fast}),
    })
    eps = static_rules(tel)
    n1 = [a for a in eps if a.node == "n1"]
    assert [(a.start - T0, a.end - T0) for a in n1] == [(13 * STEP, 13 * STEP)]
    sig = n1[0].signals[0]
    assert sig.detail == "ecc_dbe" and sig.deviation == pytest.approx(1 / (4 * STEP))
    n2 = [a for a in eps if a.node == "n2"]
    assert [(a.start - T0, a.end - T0) for a in n2] == [(STEP, 39 * STEP)]


def test_rate_kind_is_used_as_is_and_custom_rules() -> None:
    tel = tel_of(4, {"x_rate": (MetricKind.RATE, {G[0]: [0.0, 0.5, 0.0, 0.0]})})
    eps = static_rules(tel, [StaticRule("r", "X_RATE", "rate_gt", 0.1)])
    assert [(a.start - T0, a.signals[0].deviation) for a in eps] == [(STEP, 0.5)]
    with pytest.raises(ConfigError, match="op must be"):
        StaticRule("bad", "x", "lt")  # type: ignore[arg-type]


def synthetic_fleet(n_nodes: int = 8, n_gpus: int = 4, hours: int = 12,
                    bad_node: str = "n3", bad_from_h: float = 8.0) -> Telemetry:
    rng = np.random.default_rng(1)
    n_t = hours * 3600 // STEP
    ents = tuple(Entity(f"n{n}", str(g)) for n in range(n_nodes) for g in range(n_gpus))
    temp = 60 + rng.normal(0, 1.0, (len(ents), n_t))
    power = 400 + rng.normal(0, 10.0, (len(ents), n_t))
    onset = int(bad_from_h * 3600 // STEP)
    for i, e in enumerate(ents):
        if e.node == bad_node and e.gpu == "2":
            temp[i, onset:] += 15.0
    host = tuple(Entity(f"n{n}") for n in range(n_nodes))
    load = 1 + rng.normal(0, 0.1, (n_nodes, n_t))
    return Telemetry(T0 + np.arange(n_t, dtype=np.int64) * STEP, STEP, (
        MetricSeries("DCGM_FI_DEV_GPU_TEMP", MetricKind.GAUGE, ents, temp),
        MetricSeries("DCGM_FI_DEV_POWER_USAGE", MetricKind.GAUGE, ents, power),
        MetricSeries("node_load1", MetricKind.GAUGE, host, load),
        MetricSeries("constant", MetricKind.GAUGE, host, np.zeros((n_nodes, n_t))),
    ))


@pytest.mark.parametrize("method", ["ecod", "iforest"])
def test_anomaly_baseline_flags_the_hot_node(method: str) -> None:
    tel = synthetic_fleet()
    eps = anomaly_baseline(tel, method)  # type: ignore[arg-type]
    onset = T0 + 8 * 3600
    bad = [a for a in eps if a.node == "n3" and a.start >= onset]
    assert bad, "the node with a +15 C GPU must alert"
    assert bad[0].start - onset <= 5 * STEP
    assert bad[0].source == f"pyod_{method}" and bad[0].kind is AlertKind.PREDICTIVE
    top = bad[0].signals[0]
    assert (top.metric, top.detail) == ("DCGM_FI_DEV_GPU_TEMP", "max over GPUs")
    assert top.deviation > 5
    # fit period (first 25 % of 12 h) is never alerted on
    assert all(a.start >= T0 + 3 * 3600 for a in eps)
    # onsets respect persistence and cooldown: per node, > 10 min between episodes
    for node in {a.node for a in eps}:
        mine = sorted((a for a in eps if a.node == node), key=lambda a: a.start)
        assert all(b.start - a.end > 600 for a, b in itertools.pairwise(mine))
        assert all(a.end - a.start >= 2 * STEP for a in mine)


def test_anomaly_config_validation_and_short_data() -> None:
    with pytest.raises(ConfigError, match=r"anomaly\.method"):
        AnomalyConfig(method="lof")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"anomaly\.min_run_steps"):
        AnomalyConfig(min_run_steps=0)
    assert anomaly_baseline(synthetic_fleet(hours=1).slice_time(T0, T0 + 90)) == []


def test_missing_pyod_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyod.models.ecod", None)
    with pytest.raises(ConfigError, match=r"pip install 'trainguard\[baselines\]'"):
        anomaly_baseline(synthetic_fleet(hours=1))
