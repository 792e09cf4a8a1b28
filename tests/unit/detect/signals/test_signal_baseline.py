"""The baseline-deviation unit (detect/signals/baseline.py): a series against its own normal."""

from __future__ import annotations

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.signals.baseline import BaselineConfig, BaselineDeviation
from trainguard.detect.signals.regime import BlockContext

N, G = 4, 2
DET = DetectorConfig(warmup_s=600.0)  # 5 blocks of 120 s
CFG = BaselineConfig.of(DET)


def _ctx(back_gpu: np.ndarray | None = None, relearn: np.ndarray | None = None) -> BlockContext:
    none = np.zeros(N, dtype=bool)
    return BlockContext(0.0, ~none, np.zeros((N, G), dtype=bool) if back_gpu is None
                        else back_gpu, none, ~none, np.ones(N, dtype=np.int64),
                        none if relearn is None else relearn, none)


def _unit() -> BaselineDeviation:
    b = BaselineDeviation.new(CFG)
    b.grow(1, 1, N, G)
    return b


def test_the_slice_follows_warmup_and_halflife() -> None:
    assert CFG.warm_n == 5.0
    assert BaselineConfig.of(DetectorConfig(halflife_s=120.0)).alpha == 0.5
    assert CFG.adapt_clip == DET.adapt_clip


def test_cold_series_score_nan_then_a_constant_offset_is_learned_away() -> None:
    rng = np.random.default_rng(0)
    b = _unit()
    zs = []
    for _ in range(40):
        zp1 = 3.0 + rng.normal(0, 0.3, (1, N, G))  # always 3 above its siblings
        zs.append(b.step(zp1, rng.normal(0, 0.3, (2, N)), _ctx())[0])
    assert np.isnan(zs[0]).all() and np.isnan(zs[4]).all() and np.isfinite(zs[5]).all()
    assert np.abs(zs[-1]).max() < 4  # the offset is its normal, not a deviation


def test_a_step_is_not_learned_away_at_once() -> None:
    rng = np.random.default_rng(1)
    b = _unit()
    for _ in range(30):
        b.step(rng.normal(0, 0.3, (1, N, G)), rng.normal(0, 0.3, (2, N)), _ctx())
    jumped = []
    for _ in range(6):
        zp1 = rng.normal(0, 0.3, (1, N, G))
        zp1[0, 1, 0] += 20.0
        jumped.append(b.step(zp1, rng.normal(0, 0.3, (2, N)), _ctx())[0][0, 1, 0])
    assert min(jumped) > 5  # clipped updates: still far out after several blocks


def test_a_gpu_back_after_an_absence_and_a_relearning_node_are_not_scored() -> None:
    rng = np.random.default_rng(2)
    b = _unit()
    for _ in range(10):
        b.step(rng.normal(0, 0.3, (1, N, G)), rng.normal(0, 0.3, (2, N)), _ctx())
    back = np.zeros((N, G), dtype=bool)
    back[2, 1] = True
    relearn = np.array([False, False, False, True])
    z1, z2 = b.step(rng.normal(0, 0.3, (1, N, G)), rng.normal(0, 0.3, (2, N)),
                    _ctx(back, relearn))
    assert np.isnan(z1[0, 2, 1]) and np.isfinite(np.delete(z1.ravel(), 2 * G + 1)).all()
    assert np.isnan(z2[:, 3]).all() and np.isfinite(z2[:, :3]).all()


def test_reset_and_grow_keep_each_metric_on_its_own_row() -> None:
    rng = np.random.default_rng(3)
    b = _unit()
    for _ in range(3):
        b.step(rng.normal(0, 1, (1, N, G)), rng.normal(0, 1, (2, N)), _ctx())
    node_row = b.base2.mu[:, 1].copy()
    b.grow(2, 1, N, G)  # a GPU metric appears: the node metric moves from row 1 to row 2
    np.testing.assert_array_equal(b.base2.mu[:, 2], node_row)
    assert not b.base2.n[:, 1].any() and b.base1.mu.shape == (2, 2, N, G)
    b.reset_metric(0)
    assert not b.base1.n[:, 0].any() and not b.base2.n[:, 0].any() and b.base2.n[1, 2].all()
