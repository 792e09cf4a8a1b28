"""The detector on small hand-built clusters: each test plants one behaviour and checks it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from trainguard.detect import AlertKind, Detector, DetectorConfig, detect
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry

STEP = 30
T0 = 1_700_000_000 // 3600 * 3600


@dataclass
class Cluster:
    """A synthetic cluster: util, temperature, power, XID gauge, PCIe replay counter per GPU."""

    n: int = 12
    g: int = 8
    days: float = 1.0
    seed: int = 0
    with_fan: bool = False
    with_energy: bool = False
    host: dict[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.t = int(self.days * 86400 / STEP)
        self.times = (T0 + np.arange(self.t) * STEP).astype(np.int64)
        n, g, t = self.n, self.g, self.t
        busy = np.ones((n, t))
        busy[n // 2:, : t // 3] = 0.0  # half the nodes idle for the first third
        dips = (np.arange(t) % 120) < 4  # synchronous checkpoint dips every hour
        self.util = (busy * 95)[:, None, :] * np.where(dips, 0.3, 1.0)[None, None, :] \
            + rng.normal(0, 2, (n, g, t))
        self.util = np.clip(self.util, 0, 100)
        offset = rng.normal(0, 2, (n, g, 1))
        self.temp = 35 + 0.35 * self.util + offset + rng.normal(0, 0.7, (n, g, t))
        self.power = 80 + 5 * self.util + rng.normal(0, 10, (n, g, t))
        self.xid = np.zeros((n, g, t))
        self.replay = np.cumsum(rng.random((n, g, t)) < 0.0005, axis=2).astype(np.float64)
        self.fan = 30 + 0.3 * self.util + rng.normal(0, 1.0, (n, g, t))

    def at(self, hours: float) -> int:
        return int(hours * 3600 / STEP)

    def telemetry(self) -> Telemetry:
        ents = tuple(Entity(f"node{i:02d}", str(j)) for i in range(self.n) for j in range(self.g))

        def series(name: str, a: np.ndarray, kind: MetricKind = MetricKind.GAUGE) -> MetricSeries:
            return MetricSeries(name, kind, ents, a.reshape(self.n * self.g, self.t).copy())

        fan = (series("DCGM_FI_DEV_FAN_SPEED", self.fan),) if self.with_fan else ()
        if self.with_energy:  # mJ since boot: its rate is the power drawn
            energy = 1000.0 * STEP * np.cumsum(np.nan_to_num(self.power), axis=2)
            fan += (series("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy, MetricKind.COUNTER),)
        if self.host is not None:  # the node's host memory and load
            nodes = tuple(Entity(f"node{i:02d}") for i in range(self.n))
            fan += tuple(MetricSeries(name, MetricKind.GAUGE, nodes, a.copy())
                         for name, a in self.host.items())
        return Telemetry(self.times, STEP, (
            series("DCGM_FI_DEV_GPU_UTIL", self.util),
            series("DCGM_FI_DEV_GPU_TEMP", self.temp),
            series("DCGM_FI_DEV_POWER_USAGE", self.power),
            series("DCGM_FI_DEV_XID_ERRORS", self.xid),
            series("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", self.replay),
            *fan,
        ))


def _fail(c: Cluster, node: int, gpu: int, t: int, xid: int = 79, vanish: bool = True) -> None:
    c.xid[node, gpu, t:] = xid
    if vanish:
        for a in (c.util, c.temp, c.power, c.xid, c.replay):
            a[node, gpu, t + 1:] = np.nan


def test_quiet_cluster_raises_nothing() -> None:
    assert detect(Cluster(seed=1).telemetry()) == []


def test_temperature_ramp_is_caught_before_the_xid() -> None:
    c = Cluster(seed=2)
    tx = c.at(18)
    c.temp[3, 5, tx - c.at(1.5):tx] += np.linspace(0, 12, c.at(1.5))
    _fail(c, 3, 5, tx)
    alerts = detect(c.telemetry())
    assert {a.node for a in alerts} == {"node03"}
    pred = [a for a in alerts if a.kind is AlertKind.PREDICTIVE]
    hard = [a for a in alerts if a.kind is AlertKind.HARD]
    # A lone temperature ramp (no second symptom on that GPU) pages on its own strength:
    # corroboration is never borrowed from the node's other GPUs.
    assert pred and pred[0].start < c.times[tx] - 5 * 60
    assert pred[0].signals[0].metric == "DCGM_FI_DEV_GPU_TEMP"
    assert pred[0].signals[0].gpu == "5"
    assert pred[0].signals[0].deviation > 0
    assert hard and abs(hard[0].start - c.times[tx]) <= 5 * 60
    assert any("XID 79" in s.detail for s in hard[0].signals)


def test_escalating_pcie_replays_are_caught() -> None:
    c = Cluster(seed=3)
    tx = c.at(20)
    k = c.at(2)
    inc = np.zeros(c.t)
    inc[tx - k:tx] = np.linspace(0.0, 2.0, k)  # replays per sample, growing
    inc[tx:] = 2.0
    c.replay[7, 1] += np.cumsum(inc)
    _fail(c, 7, 1, tx, xid=74, vanish=False)
    alerts = detect(c.telemetry())
    pred = [a for a in alerts if a.kind is AlertKind.PREDICTIVE and a.node == "node07"]
    assert pred and pred[0].start < c.times[tx]
    assert pred[0].signals[0].metric == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
    assert not [a for a in alerts if a.node != "node07"]


def test_gpu_that_vanishes_without_xid_is_hard_evidence() -> None:
    c = Cluster(seed=4)
    tx = c.at(12)
    for a in (c.util, c.temp, c.power, c.xid, c.replay):
        a[2, 6, tx:] = np.nan
    alerts = detect(c.telemetry())
    hard = [a for a in alerts if a.kind is AlertKind.HARD]
    assert [a.node for a in hard] == ["node02"]
    assert 0 <= hard[0].start - c.times[tx] <= 5 * 60


def test_whole_node_gap_is_not_a_vanished_gpu() -> None:
    c = Cluster(seed=5)
    tx = c.at(12)
    for a in (c.util, c.temp, c.power, c.xid, c.replay):
        a[4, :, tx:tx + 20] = np.nan
    assert detect(c.telemetry()) == []


def test_application_xid_on_every_node_of_a_job_is_not_an_alert() -> None:
    c = Cluster(seed=6)
    tx = c.at(14)
    c.xid[:, :, tx:] = 13
    c.util[:, :, tx + 1:] = 0.0  # the job died everywhere at once
    alerts = detect(c.telemetry())
    assert alerts == []


def _heat(c: Cluster, node: int, gpu: int, start: int, fan_delta: float) -> None:
    """GPU `gpu` of `node` runs 12 degrees hotter over an hour from `start`, on, while its fan
    moves by `fan_delta` (percent points) over the same hour."""
    ramp = np.minimum(1.0, np.arange(c.t - start) / c.at(1.0))
    c.temp[node, gpu, start:] += 12.0 * ramp
    c.fan[node, gpu, start:] += fan_delta * ramp


@pytest.mark.parametrize(("fan_delta", "alerts_expected"), [(-35.0, False), (25.0, True)])
def test_a_gpu_that_heats_because_its_fan_fails_is_a_cooling_fault(fan_delta: float,
                                                                  alerts_expected: bool) -> None:
    c = Cluster(seed=11, with_fan=True)
    _heat(c, 3, 5, c.at(14), fan_delta)
    alerts = detect(c.telemetry())
    # fan down: the heat is the cooling's (a chassis repair), never a warning about the GPU;
    # fan up: the controller answers a heat source on the GPU, which is a warning
    assert bool([a for a in alerts if a.node == "node03"]) is alerts_expected
    assert {a.node for a in alerts} <= {"node03"}


def _idle_gpu(c: Cluster, node: int, gpu: int, start: int, minutes: int) -> None:
    end = start + c.at(minutes / 60)
    c.util[node, gpu, start:end] = 3.0
    c.power[node, gpu, start:end] = 90.0


@pytest.mark.parametrize("app_xid", [True, False])
def test_a_gpu_idling_after_an_application_xid_is_the_application(app_xid: bool) -> None:
    c = Cluster(seed=12)
    t0 = c.at(15)
    if app_xid:
        c.xid[4, 2, t0:t0 + c.at(0.5)] = 13  # the job's process on GPU 2 faulted
    _idle_gpu(c, 4, 2, t0 + 2, 25)
    alerts = [a for a in detect(c.telemetry()) if a.node == "node04"]
    assert (alerts == []) is app_xid


@pytest.mark.parametrize("energy", [False, True], ids=["", "with its energy counter"])
@pytest.mark.parametrize("minutes", [20, 90])
def test_a_gpu_given_work_its_idle_siblings_do_not_have_is_not_failing(minutes: int,
                                                                       energy: bool) -> None:
    """A one-GPU job on an idle node: that GPU's utilisation, power and temperature rise far
    above its siblings' and its own normal. More work is not a fault (a stalling GPU, the
    other way round, still warns: test_a_gpu_idling_after_an_application_xid_...). Its energy
    counter's rate is its power, and is explained with it."""
    c = Cluster(seed=14, with_energy=energy)
    start, end = c.at(3), c.at(3) + c.at(minutes / 60)  # node08 idles for the first 8 h
    rng = np.random.default_rng(5)
    c.util[8, 5, start:end] = np.clip(95 + rng.normal(0, 2, end - start), 0, 100)
    c.power[8, 5, start:end] = 80 + 5 * c.util[8, 5, start:end]
    c.temp[8, 5, start:end] += 0.35 * c.util[8, 5, start:end]
    if energy:  # ... and its data loader takes host memory and CPU
        mem = 1.9e12 + rng.normal(0, 2e9, (c.n, c.t))
        load = 4.0 + rng.normal(0, 0.4, (c.n, c.t))
        mem[8, start:end] -= 1.5e11
        load[8, start:end] += 3.0
        c.host = {"node_memory_MemAvailable_bytes": mem, "node_load1": load}
    assert [a for a in detect(c.telemetry()) if a.node == "node08"] == []


def test_a_node_whose_gpus_all_draw_more_power_together_is_running_its_job() -> None:
    c = Cluster(seed=13)
    c.power[7, :, c.at(15):] *= 1.4  # the node's job entered a heavier phase
    assert detect(c.telemetry()) == []
    c.power[7, 3, c.at(15):] *= 1.4  # one GPU drawing more than its siblings is not the job
    assert {a.node for a in detect(c.telemetry())} == {"node07"}


def test_node_that_is_always_hotter_is_learned_not_flagged() -> None:
    c = Cluster(seed=7)
    c.temp[9] += 6.0
    assert detect(c.telemetry()) == []


def test_short_benign_spike_does_not_page() -> None:
    c = Cluster(seed=8)
    t = c.at(15)
    c.temp[1, 2, t:t + 4] += 15.0
    assert detect(c.telemetry()) == []


@pytest.mark.parametrize("chunk_s", [3600, 7200 + 90, 86400])
def test_alerts_do_not_depend_on_chunking(chunk_s: int) -> None:
    c = Cluster(seed=9)
    tx = c.at(18)
    c.temp[3, 5, tx - c.at(1):tx] += np.linspace(0, 12, c.at(1))
    _fail(c, 3, 5, tx)
    tel = c.telemetry()
    whole = Detector()
    whole.feed(tel)
    expected = whole.finish()
    det = Detector()
    start = int(tel.times[0])
    while start < int(tel.times[-1]) + STEP:
        det.feed(tel.slice_time(start, start + chunk_s))
        start += chunk_s
    assert det.finish() == expected
    assert expected


def test_config_validation_names_the_key() -> None:
    from trainguard.errors import ConfigError

    with pytest.raises(ConfigError, match=r"detect\.score_off"):
        DetectorConfig(score_on=3.0, score_off=5.0)
    with pytest.raises(ConfigError, match=r"detect\.block_s"):
        DetectorConfig(block_s=0)
