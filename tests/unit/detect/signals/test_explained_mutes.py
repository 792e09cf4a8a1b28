"""Deviations explained away before fusion (detect/signals/explained.py): the job node-wide,
the cooling, an application crash."""

from __future__ import annotations

import doctest

import numpy as np

from trainguard.detect.knowledge import (
    is_supporting_only,
    is_temperature,
    is_workload_following,
)
from trainguard.detect.signals import explained
from trainguard.detect.signals.explained import (
    MetricRoles,
    mute_app_explained,
    mute_cooling_explained,
)

GPU = ["DCGM_FI_DEV_FAN_SPEED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP",
       "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
NODE = ["node_load1"]


def test_the_examples_in_the_docstrings_hold() -> None:
    assert doctest.testmod(explained).failed == 0


def test_roles_follow_the_metric_names() -> None:
    r = MetricRoles.of(GPU, NODE)
    assert r.cooling.tolist() == [True, False, False, False, False, False, False]
    assert r.thermal.tolist() == [False, True, True, False, False, False, False]
    assert r.activity.tolist() == [False, False, False, True, True, False, False]
    # node-wide: activity, power and temperatures are the job's or the room's; error
    # counters and the fan are not muted at node level, and host metrics never are
    assert r.node_workload.tolist() == [False, True, True, True, True, False, False]


def test_knowledge_of_job_driven_fields() -> None:
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_SM_ACTIVE",
                 "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_NVLINK_RX_BYTES",
                 "DCGM_FI_DEV_MEM_COPY_UTIL"):
        assert is_workload_following(name), name
    for name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                 "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_GPU_TEMP",
                 "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_SM_CLOCK"):
        assert not is_workload_following(name), name
    assert is_temperature("DCGM_FI_DEV_MEMORY_TEMP") and not is_temperature("DCGM_FI_DEV_FAN_SPEED")
    # memory allocated and bytes moved may support another signal, never lead one
    assert is_supporting_only("DCGM_FI_DEV_FB_USED")
    assert is_supporting_only("DCGM_FI_PROF_PCIE_TX_BYTES")
    assert not is_supporting_only("DCGM_FI_DEV_GPU_UTIL")


def _z(n: int = 2, g: int = 4) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((len(GPU), n, g)), np.zeros((len(GPU) + len(NODE), n))


def test_a_hot_gpu_whose_fan_is_down_is_a_cooling_fault_not_evidence() -> None:
    roles = MetricRoles.of(GPU, NODE)
    z1, z2 = _z()
    z1[0, 0, 1] = -12.0           # node 0 GPU 1: fan far below its normal ...
    z1[1:3, 0, 1] = 8.0           # ... and hot
    z1[0, 1, 2] = 6.0             # node 1 GPU 2: fan up (the controller answering heat) ...
    z1[1:3, 1, 2] = 8.0           # ... and hot: a heat source on the GPU, kept
    z1[5, 0, 1] = 5.0             # an error counter on the cooled GPU is never muted
    mute_cooling_explained(z1, z2, roles)
    assert np.isnan(z1[1:3, 0, 1]).all()
    assert (z1[1:3, 1, 2] == 8.0).all()
    assert z1[5, 0, 1] == 5.0 and z1[0, 0, 1] == -12.0


def test_a_fan_barely_below_normal_explains_nothing() -> None:
    roles = MetricRoles.of(GPU, NODE)
    z1, z2 = _z()
    z1[0, 0, 0] = -2.0
    z1[1, 0, 0] = 8.0
    mute_cooling_explained(z1, z2, roles)
    assert z1[1, 0, 0] == 8.0


def test_node_wide_fans_down_mute_the_node_level_temperatures() -> None:
    roles = MetricRoles.of(GPU, NODE)
    z1, z2 = _z()
    z2[0, 1] = -7.0
    z2[1, 1] = 9.0
    z2[1, 0] = 9.0
    mute_cooling_explained(z1, z2, roles)
    assert np.isnan(z2[1, 1]) and z2[1, 0] == 9.0


def test_no_fan_or_no_temperature_metric_changes_nothing() -> None:
    roles = MetricRoles.of(["DCGM_FI_DEV_GPU_TEMP"], [])
    z1 = np.full((1, 1, 2), 5.0)
    z2 = np.full((1, 1), 5.0)
    mute_cooling_explained(z1, z2, roles)
    assert (z1 == 5.0).all() and (z2 == 5.0).all()


def test_an_application_crash_mutes_activity_and_power_of_that_node_only() -> None:
    roles = MetricRoles.of(GPU, NODE)
    z1, z2 = _z()
    z1[:] = 4.0
    z2[:] = 4.0
    mute_app_explained(z1, z2, roles, np.array([False, True]))
    assert np.isnan(z1[3:5, 1]).all() and np.isnan(z2[3:5, 1]).all()
    assert (z1[3:5, 0] == 4.0).all() and (z2[3:5, 0] == 4.0).all()
    assert (z1[[0, 1, 2, 5], 1] == 4.0).all()  # temperatures, fan, counters kept
    z1b, z2b = _z()
    mute_app_explained(z1b, z2b, roles, np.array([False, False]))
    assert not np.isnan(z1b).any()
