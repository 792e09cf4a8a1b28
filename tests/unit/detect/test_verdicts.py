"""Which metrics are cumulative: decided from the raw behaviour seen so far, chunk by chunk."""

from __future__ import annotations

import numpy as np

from trainguard.detect.layout import DenseChunk, Layout
from trainguard.detect.verdicts import CumulativeVerdicts


def _chunk(gpu: list[list[float]], node: list[list[float]]) -> DenseChunk:
    """One node with one GPU: `gpu[m]` and `node[m]` are the samples of metric m."""
    t = len(gpu[0]) if gpu else len(node[0])
    return DenseChunk(np.arange(t, dtype=np.int64) * 30,
                      np.array(gpu, dtype=np.float64).reshape(len(gpu), 1, 1, t),
                      np.array(node, dtype=np.float64).reshape(len(node), 1, t))


def _layout() -> Layout:
    return Layout(gpu_metrics=["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"],
                  node_metrics=["node_disk_written_bytes"])


def test_a_plain_name_that_only_rises_becomes_cumulative_at_the_next_decision() -> None:
    lay = _layout()
    v = CumulativeVerdicts()
    names = [*lay.gpu_metrics, *lay.node_metrics]
    assert v.decide(names) == [] and not v.is_cumulative("node_disk_written_bytes")
    assert v.is_cumulative("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")  # by its name, before any sample
    rising = [float(i) for i in range(40)]
    v.observe(_chunk([[60.0, 61.0] * 20, [0.0] * 40], [rising]), lay)
    assert v.is_cumulative("node_disk_written_bytes") is False  # not before the decision
    assert v.decide(names) == [2]
    assert v.is_cumulative("node_disk_written_bytes") and v.version == 1
    assert not v.is_cumulative("DCGM_FI_DEV_GPU_TEMP")


def test_a_counter_name_that_goes_up_and_down_is_a_gauge_wherever_the_input_was_cut() -> None:
    lay = _layout()
    names = [*lay.gpu_metrics, *lay.node_metrics]
    wobbly = [5.0, 3.0] * 20
    whole, cut = CumulativeVerdicts(), CumulativeVerdicts()
    whole.observe(_chunk([[60.0] * 40, wobbly], [[1.0] * 40]), lay)
    cut.observe(_chunk([[60.0] * 17, wobbly[:17]], [[1.0] * 17]), lay)
    cut.observe(_chunk([[60.0] * 23, wobbly[17:]], [[1.0] * 23]), lay)
    assert whole._counts == cut._counts  # the decrease across the cut is counted too
    assert whole.decide(names) == cut.decide(names) == [1]
    assert not whole.is_cumulative("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")


def test_a_metric_named_always_cumulative_never_changes_side() -> None:
    lay = _layout()
    v = CumulativeVerdicts(frozenset({"DCGM_FI_DEV_GPU_TEMP"}))
    v.observe(_chunk([[60.0, 50.0] * 20, [0.0] * 40], [[1.0] * 40]), lay)
    assert v.decide([*lay.gpu_metrics, *lay.node_metrics]) == []
    assert v.is_cumulative("DCGM_FI_DEV_GPU_TEMP") and v.version == 0
