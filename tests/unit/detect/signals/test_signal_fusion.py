"""The fusion unit (detect/signals/fusion.py): calibration, weights, crowd muting, node score."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import LEAD_ACTIVITY, LEAD_COUNTER, LEAD_GAUGE
from trainguard.detect.layout import Layout
from trainguard.detect.signals import common, fusion, peer
from trainguard.detect.signals.fusion import Fusion, FusionConfig, fuse, lead_of

CFG = FusionConfig.of(DetectorConfig())
N, G = 10, 4
ONE = np.ones(3)


def _unit(mg: int = 2, m: int = 3) -> Fusion:
    f = Fusion.new(CFG)
    f.grow(mg, m)
    return f


def _quiet() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((2, N, G)), np.zeros((3, N))


@pytest.mark.parametrize("module", [common, fusion, peer])
def test_the_examples_in_the_docstrings_hold(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]


def test_one_gpu_and_one_node_metric_agreeing_make_the_node_score() -> None:
    z1, z2 = _quiet()
    z1[1, 3, 2] = 6.0
    z2[0, 3] = -4.0
    f = _unit().step(z1, z2, ONE, ONE, np.ones(N, dtype=bool))
    assert f.score[3] == 6.0 + 0.5 * 4.0 and not np.delete(f.score, 3).any()
    assert f.gpu_best[1, 3] == 2 and f.s1[1, 3] == 6.0 and f.u2[0, 3] == 4.0


def test_weights_scale_and_a_hard_evidence_metric_never_contributes() -> None:
    z1, z2 = _quiet()
    z1[0, 1, 0] = 8.0
    z2[2, 1] = 8.0
    f = _unit().step(z1, z2, np.array([0.0, 1.0, 1.0]), np.array([1.0, 1.0, 0.5]),
                     np.ones(N, dtype=bool))
    assert f.per_metric[0, 1] == 0.0 and f.per_metric[2, 1] == 4.0


def test_a_metric_deviating_on_several_nodes_is_muted() -> None:
    z1, z2 = _quiet()
    z2[0, :CFG.crowd_min_nodes] = 7.0  # the workload: the same deviation on 3 nodes
    z2[1, 5] = 7.0
    f = _unit().step(z1, z2, ONE, ONE, np.ones(N, dtype=bool))
    assert not f.per_metric[0].any() and f.per_metric[1, 5] == 7.0


def test_a_metric_heavy_tailed_everywhere_is_discounted() -> None:
    rng = np.random.default_rng(0)
    f = _unit()
    for _ in range(200):
        z1 = rng.standard_cauchy((2, N, G))
        z1[1] = rng.normal(0, 1, (N, G))
        f.step(z1, np.full((3, N), np.nan), ONE, ONE, np.ones(N, dtype=bool))
    assert f.cal1[0] > 4 * fusion.CAL_REF and f.cal1[1] < 1.5 * fusion.CAL_REF


def test_a_supporting_only_metric_never_leads_alone_but_supports() -> None:
    cooling = np.array([True, False, False])  # GPU metric 0: a fan
    z1, z2 = _quiet()
    z1[0, 2, 1] = 20.0  # a fan far off on node 2, nothing else
    z1[0, 4, 0] = 20.0  # the same fan deviation on node 4, beside a 6-sigma temperature
    z1[1, 4, 0] = 6.0
    f = _unit().step(z1, z2, ONE, ONE, np.ones(N, dtype=bool), cooling)
    assert f.score[2] == 0.0
    top, fan = f.per_metric[1, 4], f.per_metric[0, 4]
    assert 0 < fan <= top and f.score[4] == top + 0.5 * fan  # it supports
    plain = _unit().step(z1, z2, ONE, ONE, np.ones(N, dtype=bool))
    assert plain.score[2] > 0.0  # without the mask it would page alone


def test_the_host_metric_only_supports() -> None:
    pm = np.array([[1.0], [0.0], [9.0]])  # two GPU metrics, one host metric
    assert fuse(pm, 2).tolist() == [1.0 + 4.5]
    assert fuse(pm, 0).tolist() == [9.0 + 0.5]  # no GPU metrics: host metrics are all there is


def test_signals_name_the_gpu_or_the_node() -> None:
    lay = Layout(gpu_metrics=["temp", "power"], node_metrics=["load"],
                 nodes=[f"n{i}" for i in range(N)], gpu_labels=[["0", "1", "2", "3"]] * N)
    z1, z2 = _quiet()
    z1[0, 3, 1] = 9.0
    z2[2, 3] = 5.0
    z2[1, 3] = 2.0
    f = _unit().step(z1, z2, ONE, ONE, np.ones(N, dtype=bool))
    sig = _unit().signals(3, f, z1, z2, ["temp", "power", "load"], lay)
    assert [(s.metric, s.gpu, s.deviation) for s in sig] == [
        ("temp", "1", 9.0), ("load", None, 5.0), ("power", None, 2.0)]
    few = Fusion.new(FusionConfig.of(DetectorConfig(top_signals=1)))
    assert len(few.signals(3, f, z1, z2, ["temp", "power", "load"], lay)) == 1


def test_lead_is_the_top_metric_kind() -> None:
    pm = np.array([[5.0, 1.0, 0.0], [1.0, 5.0, 0.0]])
    counter = np.array([[False, False, False], [False, True, True]])
    activity = np.array([True, False])
    assert lead_of(pm, counter, activity).tolist() == [LEAD_ACTIVITY, LEAD_COUNTER,
                                                      LEAD_ACTIVITY]
    assert lead_of(np.zeros((0, 2)), np.zeros((0, 2), dtype=bool),
                   np.zeros(0, dtype=bool)).tolist() == [LEAD_GAUGE] * 2


def test_calibration_is_reset_and_regrown_per_metric() -> None:
    f = _unit(1, 2)
    f.cal1[:] = [3.0]
    f.cal2[:] = [3.0, 5.0]
    f.grow(2, 4)
    assert f.cal1.tolist() == [3.0, 0.0] and f.cal2.tolist() == [3.0, 0.0, 5.0, 0.0]
    f.reset_metric(0)
    assert f.cal1[0] == 0.0 and f.cal2.tolist() == [0.0, 0.0, 5.0, 0.0]


def test_corroboration_comes_from_the_same_gpu_or_its_node() -> None:
    z1, z2 = _quiet()
    z1[0, 2, 1] = 6.0   # node 2: metric 0 on GPU 1 ...
    z1[1, 2, 3] = 6.0   # ... metric 1 on GPU 3: two unrelated small things
    z1[0, 5, 1] = 6.0   # node 5: both metrics on GPU 1: one GPU, two symptoms
    z1[1, 5, 1] = 6.0
    z1[0, 7, 0] = 6.0   # node 7: GPU 0, and the node as a whole on metric 1
    z2[1, 7] = 6.0
    f = _unit().step(z1, z2, ONE, ONE, np.ones(N, dtype=bool))
    one = f.per_metric[0, 2]
    assert f.score[2] == pytest.approx(one)              # no borrowed second signal
    assert f.score[5] == pytest.approx(1.5 * f.per_metric[0, 5])
    hi, lo = sorted(f.per_metric[:2, 7].tolist(), reverse=True)
    assert lo > 0 and f.score[7] == pytest.approx(hi + 0.5 * lo)


def test_a_supporting_metric_is_capped_per_gpu() -> None:
    from trainguard.detect.signals.fusion import fuse_gpus

    v = np.zeros((2, 1, 2))
    v[0, 0, 0] = 9.0     # GPU 0: only the supporting metric
    v[1, 0, 1] = 4.0     # GPU 1: only the other metric
    assert fuse_gpus(v, np.zeros(1), np.array([True, False])).tolist() == [4.0]
    v[1, 0, 0] = 2.0     # GPU 0 gets a weak lead of its own: the fan supports it up to 2
    assert fuse_gpus(v, np.zeros(1), np.array([True, False])).tolist() == [4.0]
    assert fuse_gpus(v, np.full(1, 3.0), np.array([True, False])).tolist() == [4.0 + 1.5]
