"""The regime unit (detect/signals/regime.py): presence, busy/idle, peer groups, settling."""

from __future__ import annotations

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.groups import IDLE_GROUP
from trainguard.detect.signals.regime import Regime, RegimeConfig

CFG = RegimeConfig.of(DetectorConfig())
N, G = 6, 4


def _block(util: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x[1 metric, node, gpu], xn[0, node], pres[node, gpu]) with GPU utilisation `util`."""
    x = np.broadcast_to(util[:, None], (N, G))[None].copy()
    return x, np.zeros((0, N)), ~np.isnan(x[0])


def test_the_slice_is_taken_from_the_detector_config() -> None:
    cfg = DetectorConfig(settle_s=60.0, idle_fraction=0.3)
    got = RegimeConfig.of(cfg)
    assert (got.settle_s, got.idle_fraction, got.gone_reset_s) == (60.0, 0.3, cfg.gone_reset_s)


def test_idle_nodes_form_the_idle_group_and_busy_ones_a_job() -> None:
    r = Regime.new(CFG)
    r.grow(N, G)
    util = np.array([95.0, 94.0, 96.0, 95.0, 2.0, 1.0])
    ctx = r.step(120.0, *_block(util), act=0, jobs=None)
    assert ctx.busy.tolist() == [True] * 4 + [False] * 2
    assert (ctx.labels[4:] == IDLE_GROUP).all()
    assert len(set(ctx.labels[:4].tolist())) == 1 and ctx.labels[0] != IDLE_GROUP
    assert ctx.node_pres.all()


def test_given_jobs_decide_the_groups() -> None:
    r = Regime.new(CFG)
    r.grow(N, G)
    ctx = r.step(120.0, *_block(np.full(N, 90.0)), act=0, jobs=["a", "a", "a", "b", "b", "b"])
    assert ctx.labels[0] == ctx.labels[2] != ctx.labels[3] == ctx.labels[5]


def test_a_node_that_starts_settles_for_settle_s_only() -> None:
    r = Regime.new(CFG)
    r.grow(N, G)
    util = np.full(N, 95.0)
    util[0] = 0.0
    t = 0.0
    for _ in range(20):
        t += 120.0
        ctx = r.step(t, *_block(util), act=0, jobs=None)
    assert not ctx.settle.any()
    util[0] = 95.0
    start = t + 120.0
    settled = []
    while t < start + CFG.settle_s + 240:
        t += 120.0
        ctx = r.step(t, *_block(util), act=0, jobs=None)
        settled.append((t - start, bool(ctx.settle[0]), bool(ctx.settle[1:].any())))
    assert all(s for dt, s, _ in settled if dt < CFG.settle_s)
    assert not any(s for dt, s, _ in settled if dt >= CFG.settle_s)
    assert not any(other for _, _, other in settled)


def test_a_gpu_back_after_a_long_absence_is_marked_once() -> None:
    r = Regime.new(CFG)
    r.grow(N, G)
    x, xn, pres = _block(np.full(N, 95.0))
    r.step(120.0, x, xn, pres, 0, None)
    gone = x.copy()
    gone[0, 2, 1] = np.nan
    back = []
    for b in range(2, 40):
        cur = gone if b < 30 else x
        back.append(bool(r.step(120.0 * b, cur, xn, ~np.isnan(cur[0]), 0, None).back_gpu[2, 1]))
    assert back.count(True) == 1 and back.index(True) == 28  # block 30: 28 blocks away
    short = Regime.new(CFG)
    short.grow(N, G)
    short.step(120.0, x, xn, pres, 0, None)
    short.step(240.0, gone, xn, ~np.isnan(gone[0]), 0, None)
    assert not short.step(360.0, x, xn, pres, 0, None).back_gpu.any()


def test_growing_keeps_what_was_learned_for_existing_nodes() -> None:
    r = Regime.new(CFG)
    r.grow(N, G)
    r.step(120.0, *_block(np.full(N, 95.0)), act=0, jobs=None)
    level, seen = r.level, r.last_seen_gpu.copy()
    r.grow(N + 2, G + 1)
    assert r.level == level
    assert r.last_seen_gpu.shape == (N + 2, G + 1)
    np.testing.assert_array_equal(r.last_seen_gpu[:N, :G], seen)
    assert not r.last_seen_gpu[N:].any() and np.isnan(r.history[N:]).all()
