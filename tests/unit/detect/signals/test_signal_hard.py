"""The hard-evidence unit (detect/signals/hard_evidence.py)."""

from __future__ import annotations

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import EpisodeTracker
from trainguard.detect.layout import DenseChunk, Layout
from trainguard.detect.signals.hard_evidence import HARD_SCORE, HardConfig, HardEvidence, emit

N, G, T, STEP = 3, 4, 40, 30
LAY = Layout(gpu_metrics=["DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"],
             node_metrics=["host_ECC_DBE_AGG_TOTAL"], nodes=["a", "b", "c"],
             gpu_labels=[["0", "1", "2", "3"]] * N, _slots=[{"0": 0, "1": 1, "2": 2, "3": 3}] * N)


def _chunk() -> DenseChunk:
    gpu = np.zeros((2, N, G, T))
    gpu[0, 1, 2, 10:] = 79.0  # a hardware XID (fell off the bus)
    gpu[0, 2, 0, 20:] = 13.0  # an application XID: the job's fault
    gpu[1, 0, 3, 30:] = 2.0  # an uncorrectable ECC count increased
    gpu[:, 2, 3, 25:] = np.nan  # a GPU stops reporting; its siblings go on
    node = np.zeros((1, N, T))
    node[0, 0, 5:] = 1.0
    return DenseChunk(1_000_000 + STEP * np.arange(T, dtype=np.int64), gpu, node)


def _present(d: DenseChunk) -> np.ndarray:
    return np.asarray((~np.isnan(d.gpu)).any(axis=0))


def _hits(d: DenseChunk, unit: HardEvidence) -> list[tuple[int, int, int | None, str]]:
    return [(h.t_index, h.node, h.gpu, h.metric) for h in unit.scan(d, LAY, _present(d), STEP)]


def test_hardware_xids_uncorrectable_counts_and_a_vanished_gpu_are_hits() -> None:
    assert _hits(_chunk(), HardEvidence()) == [
        (5, 0, None, "host_ECC_DBE_AGG_TOTAL"),
        (10, 1, 2, "DCGM_FI_DEV_XID_ERRORS"),
        (27, 2, 3, "(all GPU series)"),  # 90 s: the 3rd missing sample
        (30, 0, 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")]


def test_how_long_a_gpu_must_be_gone_is_its_config() -> None:
    hits = _hits(_chunk(), HardEvidence(HardConfig(vanish_after_s=300.0)))
    assert (34, 2, 3, "(all GPU series)") in hits


def test_chunks_give_the_hits_of_the_whole() -> None:
    d, unit = _chunk(), HardEvidence()
    got = []
    for a, b in ((0, 7), (7, 26), (26, T)):
        part = DenseChunk(d.times[a:b], d.gpu[..., a:b], d.node[..., a:b])
        got += [(t + a, *rest) for t, *rest in _hits(part, unit)]
    assert got == _hits(d, HardEvidence())


def test_emit_hands_each_hit_to_the_tracker_with_its_gpu() -> None:
    d = _chunk()
    hits = HardEvidence().scan(d, LAY, _present(d), STEP)
    tracker = EpisodeTracker(DetectorConfig(), LAY.nodes)
    emit(tracker, hits, d.times, LAY)
    assert tracker.last_hard == {0: float(d.times[30]), 1: float(d.times[10]),
                                 2: float(d.times[27])}
    assert tracker.hard[1].signals[0].gpu == "2" and tracker.hard[1].peak == HARD_SCORE
