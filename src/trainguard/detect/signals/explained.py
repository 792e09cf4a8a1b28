"""Deviations explained away before fusion: the job, the cooling, an application crash.

A failing GPU departs from its own normal and from its siblings. Three ordinary things make a
deviation that is not that, and each is recognisable from the telemetry itself:

1. **The job or the room, node-wide.** When all of a node's GPUs change together in a field the
   job drives (utilisation, engine/SM activity and occupancy, power draw, memory allocated,
   bytes moved), the node's job started, stopped or changed phase; when they all run hotter
   together, the job or the node's air (inlet, chassis fans) did it: a GPU that is failing
   heats alone. The node-level deviation of those fields
   is dropped (`scoring.mute_node_activity`, rows from `MetricRoles.node_workload`); a GPU
   that departs from its siblings keeps its GPU-level deviation.
2. **The cooling.** A GPU whose fan turns clearly slower than its own normal while it runs
   hotter has a cooling fault (a worn fan, a blocked inlet): a chassis repair, not a GPU about
   to fail. Its temperature deviations are dropped while its fan is down; a GPU that heats up
   with its fan speeding up (the controller responding to a heat source on the GPU) keeps them.
3. **More work.** A GPU more loaded than its siblings or its own normal (utilisation, engine
   activity, memory allocated, clocks up) runs work they do not: a one-GPU job on a node whose
   other GPUs idle. Failing hardware does less work, not more (a stall, a throttled clock). The
   upward deviations of the load fields are dropped, and on a GPU whose load is up by
   `LOAD_UP_Z` or more, the upward deviations of its power and temperatures too (they follow
   the work); a GPU that heats or draws more without more work keeps them.
4. **An application crash.** After an application XID (13, 31, 43, 45...) begins on a node,
   its GPUs' activity and power fall and recover as the job's processes die and restart. For
   `precursor_app_xid_quiet_s` after such an onset (the window the stall and jitter rules
   already honour, `detect/explained.py`) the node's activity and power deviations are dropped.

Each function mutates the deviation arrays in place (NaN: no evidence) and is pure otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.detect.hard import BoolArray
from trainguard.detect.knowledge import (
    ACTIVITY_METRICS,
    error_family,
    is_cooling_control,
    is_load,
    is_power,
    is_repair_counter,
    is_supporting_only,
    is_temperature,
    is_volume_counter,
    is_workload_following,
)
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["FAN_DROP_Z", "LOAD_UP_Z", "MetricRoles", "family_rows", "mute_app_explained",
           "mute_cooling_explained", "mute_more_work"]

LOAD_UP_Z = 3.0
"""A GPU whose load is this many deviations above its siblings' or its own normal runs more
work: its power and temperatures rising with it are explained."""
FAN_DROP_Z = -3.0
"""A fan this many deviations below its own normal is down (a controller never slows a fan on
a GPU that is heating up)."""


@dataclass(frozen=True, eq=False)
class MetricRoles:
    """Per metric row (GPU metrics first, then node metrics): what it may explain or be
    explained by."""

    supporting: BoolArray
    """Metrics that may only support another signal (cooling controls, job-set fields)."""
    node_workload: BoolArray
    """GPU fields the job or the node's air drives: their node-level deviation is not a GPU's."""
    cooling: BoolArray
    """GPU cooling controls (fan speed)."""
    thermal: BoolArray
    """GPU temperatures."""
    activity: BoolArray
    """GPU activity and power: what an application crash moves."""
    load: BoolArray
    """GPU fields that rise with more work (`knowledge.is_load`)."""
    follows_load: BoolArray
    """GPU power and temperatures: they rise with the load, or alone on a failing GPU."""
    volume: BoolArray
    """Counters of work done (energy, bytes, seconds): never error-like, GPU and node rows."""
    repair: BoolArray
    """Counters of repairs made for good (remapped rows, retired pages), GPU and node rows:
    their recurrence is never the series' chance (`sparse.py`)."""
    families: tuple[IntArray, ...]
    """The GPU metric rows of each error family of two or more (`knowledge.error_family`:
    fields that report the same physical events), first row first: fusion counts each once."""

    @classmethod
    def of(cls, gpu_metrics: list[str], node_metrics: list[str]) -> MetricRoles:
        pad = [False] * len(node_metrics)

        def rows(pred: list[bool]) -> BoolArray:
            return np.array(pred + pad, dtype=bool)

        return cls(np.array([is_supporting_only(m) for m in (*gpu_metrics, *node_metrics)],
                            dtype=bool),
                   rows([is_workload_following(m) or is_temperature(m) for m in gpu_metrics]),
                   rows([is_cooling_control(m) for m in gpu_metrics]),
                   rows([is_temperature(m) for m in gpu_metrics]),
                   rows([m in ACTIVITY_METRICS for m in gpu_metrics]),
                   rows([is_load(m) for m in gpu_metrics]),
                   rows([is_temperature(m) or is_power(m) for m in gpu_metrics]),
                   np.array([is_volume_counter(m) for m in (*gpu_metrics, *node_metrics)],
                            dtype=bool),
                   np.array([is_repair_counter(m) for m in (*gpu_metrics, *node_metrics)],
                            dtype=bool),
                   family_rows(gpu_metrics))


def family_rows(names: list[str]) -> tuple[IntArray, ...]:
    """The indices of the names of each error family with two or more of them, in order.

        >>> family_rows(["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_GPU_TEMP",
        ...              "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        ...              "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"])
        (array([0, 2]),)
    """
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        family = error_family(name)
        if family is not None:
            groups.setdefault(family, []).append(i)
    return tuple(np.array(rows, dtype=np.intp) for rows in groups.values() if len(rows) > 1)


def mute_cooling_explained(z1: FloatArray, z2: FloatArray, roles: MetricRoles,
                           drop_z: float = FAN_DROP_Z) -> None:
    """Drop temperature deviations `z1[gpu metric, node, gpu]` of GPUs whose fan is down
    (any cooling row's deviation <= `drop_z`), and the node-level ones `z2[metric, node]`
    of nodes whose fans are down together.

        >>> roles = MetricRoles.of(["DCGM_FI_DEV_FAN_SPEED", "DCGM_FI_DEV_GPU_TEMP"], [])
        >>> z1 = np.array([[[-9.0, 0.5]], [[6.0, 6.0]]]); z2 = np.zeros((2, 1))
        >>> mute_cooling_explained(z1, z2, roles); z1[1].tolist()
        [[nan, 6.0]]
    """
    mg = z1.shape[0]
    fan, temp = roles.cooling[:mg], roles.thermal[:mg]
    if not fan.any() or not temp.any():
        return
    with np.errstate(invalid="ignore"):
        down = (np.nan_to_num(z1[fan], nan=0.0) <= drop_z).any(axis=0)       # node, gpu
        node_down = (np.nan_to_num(z2[:mg][fan], nan=0.0) <= drop_z).any(axis=0)
    if down.any():
        for r in np.flatnonzero(temp).tolist():
            z1[r][down] = np.nan
    if node_down.any():
        for r in np.flatnonzero(temp).tolist():
            z2[r, node_down] = np.nan


def mute_more_work(z1: FloatArray, roles: MetricRoles, up_z: float = LOAD_UP_Z) -> None:
    """Drop (in place) the upward deviations `z1[gpu metric, node, gpu]` of the load fields,
    and those of power and temperatures on GPUs whose load is up by `up_z` or more.

        >>> roles = MetricRoles.of(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"], [])
        >>> z1 = np.array([[[40.0, -9.0, 0.5]], [[20.0, 20.0, 20.0]]])
        >>> mute_more_work(z1, roles); z1[:, 0].tolist()
        [[nan, -9.0, nan], [nan, 20.0, 20.0]]
    """
    mg = z1.shape[0]
    load, follows = roles.load[:mg], roles.follows_load[:mg]
    if not load.any():
        return
    with np.errstate(invalid="ignore"):
        loaded = (np.nan_to_num(z1[load], nan=0.0) >= up_z).any(axis=0)     # node, gpu
        for r in np.flatnonzero(load).tolist():
            z1[r][z1[r] > 0] = np.nan
        if loaded.any():
            for r in np.flatnonzero(follows).tolist():
                z1[r][loaded & (z1[r] > 0)] = np.nan


def mute_app_explained(z1: FloatArray, z2: FloatArray, roles: MetricRoles,
                       nodes: BoolArray) -> None:
    """Drop the activity and power deviations of `nodes` (per node: an application XID began
    there recently), GPU level and node level.

        >>> roles = MetricRoles.of(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"], [])
        >>> z1 = np.ones((2, 2, 1)); z2 = np.ones((2, 2))
        >>> mute_app_explained(z1, z2, roles, np.array([True, False]))
        >>> z1[:, :, 0].tolist(), z2.tolist()
        ([[nan, 1.0], [1.0, 1.0]], [[nan, 1.0], [1.0, 1.0]])
    """
    if not nodes.any():
        return
    mg = z1.shape[0]
    for r in np.flatnonzero(roles.activity[:mg]).tolist():
        z1[r, nodes] = np.nan
        z2[r, nodes] = np.nan
