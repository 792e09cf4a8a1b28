"""The peer-deviation unit (detect/signals/peer.py)."""

from __future__ import annotations

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.signals.peer import PeerConfig, PeerDeviation, or_quantum

CFG = PeerConfig.of(DetectorConfig())
N, G = 8, 8


def _unit(mg: int, m: int) -> PeerDeviation:
    p = PeerDeviation.new(CFG)
    p.grow(mg, m)
    return p


def test_a_gpu_apart_from_its_siblings_stands_out() -> None:
    rng = np.random.default_rng(0)
    x = 60 + rng.normal(0, 1, (1, N, G))
    x[0, 3, 5] += 8.0
    zp1, zp2 = _unit(1, 1).step(x, np.zeros((0, N)), np.ones(N, dtype=np.int64), np.zeros(1))
    assert zp1[0, 3, 5] > 4 and np.nanargmax(np.abs(zp1)) == np.ravel_multi_index((0, 3, 5),
                                                                                   x.shape)
    assert np.abs(np.delete(zp1.ravel(), 3 * G + 5)).max() < 4
    assert zp2.shape == (1, N)


def test_too_few_gpus_or_peers_give_no_deviation() -> None:
    x = np.arange(float(N * G)).reshape(1, N, G)
    x[0, 0, 2:] = np.nan  # node 0: 2 GPUs report, fewer than min_gpus
    labels = np.array([1, 1, 1, 1, 1, 1, 2, 2])  # group 2 has fewer than min_peers nodes
    zp1, zp2 = _unit(1, 1).step(x, np.zeros((0, N)), labels, np.zeros(1))
    assert np.isnan(zp1[0, 0]).all() and np.isfinite(zp1[0, 1:]).all()
    assert np.isnan(zp2[0, 6:]).all() and np.isfinite(zp2[0, :6]).all()


def test_a_node_apart_from_its_peer_group_stands_out_at_node_level() -> None:
    rng = np.random.default_rng(1)
    xn = 40 + rng.normal(0, 1, (1, N))
    xn[0, 6] += 10
    zp1, zp2 = _unit(0, 1).step(np.zeros((0, N, G)), xn, np.ones(N, dtype=np.int64),
                                np.zeros(1))
    assert zp1.shape == (0, N, G)
    assert np.nanargmax(zp2[0]) == 6 and zp2[0, 6] > 4


def test_one_quantisation_step_is_never_a_deviation_by_itself() -> None:
    x = np.zeros((1, N, G))
    x[0, 2, 0] = 1.0  # one remapped row on one GPU, every other GPU at 0: MAD 0
    zp1, _ = _unit(1, 1).step(x, np.zeros((0, N)), np.ones(N, dtype=np.int64), np.zeros(1))
    assert zp1[0, 2, 0] == 1.0
    assert or_quantum(np.array([0.0]), np.array([[np.nan, 0.0]])).tolist() == [0.0]


def test_typical_dispersion_is_learned_and_reset_per_metric() -> None:
    rng = np.random.default_rng(2)
    p = _unit(2, 3)
    for _ in range(5):
        p.step(rng.normal(0, 1, (2, N, G)), rng.normal(0, 1, (1, N)),
               np.ones(N, dtype=np.int64), np.zeros(3))
    assert (p.tdisp1 > 0).all() and (p.tdisp2 > 0).all()
    p.reset_metric(1)
    p.reset_metric(2)
    assert p.tdisp1[1] == 0 and p.tdisp2[1] == 0 and p.tdisp2[2] == 0 and p.tdisp1[0] > 0


def test_growing_moves_node_metric_rows_behind_new_gpu_metrics() -> None:
    p = _unit(1, 2)
    p.tdisp1[:] = [1.0]
    p.tdisp2[:] = [1.0, 7.0]  # GPU metric, then node metric
    p.grow(2, 4)
    assert p.tdisp1.tolist() == [1.0, 0.0]
    assert p.tdisp2.tolist() == [1.0, 0.0, 7.0, 0.0]
