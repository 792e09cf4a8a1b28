"""What the block composition (detect/scoring.py) leaves out before fusion."""

from __future__ import annotations

import doctest

import numpy as np

from trainguard.detect import scoring
from trainguard.detect.scoring import mute_node_activity


def test_the_examples_in_the_docstrings_hold() -> None:
    assert doctest.testmod(scoring).failed == 0


def test_node_level_activity_deviation_is_dropped_and_the_rest_kept() -> None:
    z2 = np.full((4, 3), 7.0)  # GPU metrics 0-1, node metrics 2-3
    mute_node_activity(z2, np.array([True, False, False, False]))
    assert np.isnan(z2[0]).all()
    assert (z2[1:] == 7.0).all()


def test_a_node_metric_row_is_never_muted_even_if_flagged_past_the_gpu_rows() -> None:
    z2 = np.full((2, 3), 5.0)
    mute_node_activity(z2, np.array([False, False, True]))  # longer mask: extra rows ignored
    assert (z2 == 5.0).all()


def test_cooling_controls_are_supporting_only_rows_of_the_layout() -> None:
    from trainguard.detect.config import DetectorConfig
    from trainguard.detect.layout import Layout

    lay = Layout(gpu_metrics=["DCGM_FI_DEV_FAN_SPEED", "DCGM_FI_DEV_GPU_TEMP"],
                 node_metrics=['acme_gpu_fan_rpm{slot="0"}', "node_load1"],
                 nodes=["n0"], gpu_labels=[["0"]])
    rows = scoring.BlockScorer(DetectorConfig(), lay)._roles_of().supporting
    assert rows.tolist() == [True, False, True, False]
