"""Issue #28: a calibration tuned on one cluster size, applied to another, is noted."""

from __future__ import annotations

import numpy as np
import pytest

from trainguard.detect.calibration import Calibration, KindRate
from trainguard.detect.clustersize import ClusterSize, cluster_size, size_note
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry

CAL = Calibration(64, 0.3, 16, (0.0, 86_400.0), (86_400.0, 172_800.0),
                  (KindRate("predictive", 0, 0.0, 11.87),), gpus_per_node=8)


def _tel(gpus: dict[str, int]) -> Telemetry:
    ents = tuple(Entity(n, str(g)) for n, k in gpus.items() for g in range(k))
    temp = MetricSeries("DCGM_FI_DEV_GPU_TEMP", MetricKind.GAUGE, ents,
                        np.full((len(ents), 4), 40.0))
    load = MetricSeries("node_load1", MetricKind.GAUGE, tuple(Entity(n) for n in gpus),
                        np.ones((len(gpus), 4)))
    return Telemetry(np.arange(0, 120, 30, dtype=np.int64), 30, (temp, load))


def test_cluster_size_counts_nodes_and_the_most_gpus_of_a_node() -> None:
    assert cluster_size(_tel({"a": 8, "b": 7, "c": 8})) == ClusterSize(3, 8)
    node_only = Telemetry(np.arange(0, 60, 30, dtype=np.int64), 30, (MetricSeries(
        "node_load1", MetricKind.GAUGE, (Entity("a"), Entity("b")), np.ones((2, 2))),))
    assert cluster_size(node_only) == ClusterSize(2, None)


def test_the_same_size_says_nothing() -> None:
    assert size_note(CAL, ClusterSize(16, 8)) is None
    assert size_note(CAL, ClusterSize(16, None)) is None  # GPUs unknown here: nodes decide


@pytest.mark.parametrize(("size", "tuned", "here"), [
    (ClusterSize(6, 2), "16 nodes x 8 GPUs", "6 nodes x 2 GPUs"),
    (ClusterSize(16, 4), "16 nodes x 8 GPUs", "16 nodes x 4 GPUs"),
    (ClusterSize(6, None), "16 nodes", "6 nodes"),
])
def test_another_size_is_one_line_that_says_fp_scales_with_nodes(
        size: ClusterSize, tuned: str, here: str) -> None:
    note = size_note(CAL, size)
    assert note is not None and "\n" not in note
    assert f"tuned on {tuned}, this cluster has {here}:" in note
    assert "per 64 nodes" in note and "scales with the node count" in note
    assert f"x{size.nodes / 64:.2g}" in note


def test_a_calibration_without_gpus_compares_nodes_only() -> None:
    from dataclasses import replace

    old = replace(CAL, gpus_per_node=None)
    assert size_note(old, ClusterSize(16, 2)) is None
    note = size_note(old, ClusterSize(8, 2))
    assert note is not None and "tuned on 16 nodes, this cluster has 8 nodes:" in note
