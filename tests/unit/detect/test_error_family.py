"""Fields that report the same physical events (a link's CRC errors and the replays they cause,
a volatile and an aggregate copy of one ECC count, a gauge and its renamed successor) count once
as evidence: one event is not corroborated by its own echo."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_detector import Cluster

from trainguard.detect import AlertKind, detect
from trainguard.detect.knowledge import error_family
from trainguard.detect.signals.explained import MetricRoles, family_rows
from trainguard.telemetry.frame import MetricKind, MetricSeries, Telemetry

ONE_LINK = ["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
            "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"]


@pytest.mark.parametrize(("names", "family"), [
    (ONE_LINK, "nvlink_errors"),
    (["DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER"],
     "pcie_errors"),
    (["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"], "correctable_ecc"),
    (["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"],
     "clock_reasons"),
])
def test_fields_of_one_phenomenon_share_a_family(names: list[str], family: str) -> None:
    assert {error_family(n) for n in names} == {family}
    assert {error_family(n + '{gpu="0"}') for n in names} == {family}


@pytest.mark.parametrize("name", [
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",  # bytes moved, not errors
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",  # hard evidence: never fused anyway
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",  # a repair, evidence of its own
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE",
])
def test_other_fields_stand_alone(name: str) -> None:
    assert error_family(name) is None


def test_roles_list_the_rows_of_each_family() -> None:
    names = ["DCGM_FI_DEV_GPU_TEMP", *ONE_LINK[:2], "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
             ONE_LINK[2], "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"]
    for got in (family_rows(names), MetricRoles.of(names, ["node_load1"]).families):
        assert [rows.tolist() for rows in got] == [[1, 2, 4], [3, 5]]


def _with_counters(c: Cluster, counters: dict[str, np.ndarray]) -> Telemetry:
    base = c.telemetry()
    ents = base.metrics[0].entities
    extra = tuple(MetricSeries(name, MetricKind.COUNTER, ents, a.reshape(c.n * c.g, c.t).copy())
                  for name, a in counters.items())
    return dataclasses.replace(base, metrics=(*base.metrics, *extra))


def _key(alerts: list) -> list[tuple[str, float, float, AlertKind, float]]:  # type: ignore[type-arg]
    return [(a.node, a.start, a.end, a.kind, round(a.peak_score, 6)) for a in alerts]


def test_a_counter_that_echoes_another_adds_no_evidence() -> None:
    """A link whose CRC errors come in bursts block after block alerts; the replay counter that
    reports the same events beside it changes neither the alert nor its score."""
    c = Cluster(seed=5)
    crc = np.zeros((c.n, c.g, c.t))
    burst = c.at(14) + np.arange(0, 40, 4)  # an event every 2 minutes, for 20 minutes
    crc[4, 2, burst] = 50.0
    crc = np.cumsum(crc, axis=2)
    alone = detect(_with_counters(c, {ONE_LINK[0]: crc}))
    echoed = detect(_with_counters(c, {ONE_LINK[0]: crc, ONE_LINK[2]: crc.copy()}))
    assert [a.node for a in alone if a.kind is AlertKind.PREDICTIVE] == ["node04"]
    assert _key(echoed) == _key(alone)
