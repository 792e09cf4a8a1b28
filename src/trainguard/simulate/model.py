"""Render a `Scenario` into metric arrays, one epoch-aligned 2-hour window at a time.

Outline of one window:
1. node state: offline (maintenance/repair) and unscraped (scrape gap) masks, the job on each
   node and its activity (startup ramp, shared step noise, checkpoint dips), counter resets;
2. event modifiers (`effects.py`): precursors, XIDs, benign anomalies;
3. GPU signals from activity: utilisation -> power (per-GPU/per-node scale, cap) -> temperature
   (first-order lag towards ambient + power, carried across windows) -> clocks, throttling;
4. node signals (load, CPU modes, memory, IB/Ethernet, NFS, disk, hwmon);
5. counters: per-sample increments, cumulated with the carry from the previous window and reset
   where a node came back from an outage; then missing samples are masked with NaN.
Memory stays bounded: only one window's arrays exist at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from trainguard.simulate.config import WINDOW_S
from trainguard.simulate.effects import Effects, apply_app_xid, apply_benign, apply_failure
from trainguard.simulate.metrics import (
    GPU_METRICS,
    NODE_METRICS,
    MetricBlock,
    MetricDef,
    SimChunk,
)
from trainguard.simulate.scenario import Scenario, rng_for
from trainguard.telemetry.frame import Entity, FloatArray, IntArray, MetricKind

__all__ = ["WindowModel"]

FB_TOTAL_MIB = 81559.0
_BOOT_TO_SCRAPE_S = 90


class WindowModel:
    """Generates the `SimChunk` of each window in order; holds the state carried between them."""

    def __init__(self, scenario: Scenario) -> None:
        self.sc = scenario
        cfg, fleet = scenario.cfg, scenario.fleet
        self.n, self.gpn = cfg.nodes, cfg.gpus_per_node
        self.g = self.n * self.gpn
        names = fleet.node_names
        self.gpu_entities = tuple(Entity(names[i], str(k))
                                  for i in range(self.n) for k in range(self.gpn))
        self.gpu_labels = tuple(
            (("gpu", str(k)), ("UUID", fleet.uuids[i][k]), ("device", f"nvidia{k}"),
             ("modelName", cfg.model_name), ("Hostname", names[i]),
             ("DCGM_FI_DRIVER_VERSION", cfg.driver_version))
            for i in range(self.n) for k in range(self.gpn))
        self.node_rows: dict[str, tuple[tuple[Entity, ...], tuple[tuple[tuple[str, str], ...],
                                                                    ...]]] = {}
        for spec in NODE_METRICS:
            ents = tuple(Entity(names[i]) for i in range(self.n) for _ in spec.variants)
            labels = tuple((("instance", f"{names[i]}:9100"), ("job", "node"), *v)
                           for i in range(self.n) for v in spec.variants)
            self.node_rows[spec.name] = (ents, labels)
        self.boot = np.array(fleet.boot_s, dtype=np.float64)
        self.temp: FloatArray | None = None
        self.carry = self._initial_counters()
        # When a sticky application-XID gauge value is cleared: the node's next reboot or
        # hardware failure.
        clears: dict[int, list[int]] = {}
        for o in scenario.outages:
            clears.setdefault(o.node, []).append(o.start_s)
        for f in scenario.failures:
            clears.setdefault(f.node, []).append(f.time_s)
        self._clears = {k: sorted(v) for k, v in clears.items()}

    def _clear_after(self, node: int, t_s: int) -> float:
        return next((float(s) for s in self._clears.get(node, []) if s > t_s), float(np.inf))

    def _initial_counters(self) -> dict[str, FloatArray]:
        """Counters at the span's start: they have been counting since each node booted."""
        rng = rng_for(self.sc.cfg.seed, 90)
        fleet = self.sc.fleet
        up_n = self.sc.cfg.start_s - self.boot
        up_g = np.repeat(up_n, self.gpn)
        g = self.g
        c: dict[str, FloatArray] = {
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": np.floor(up_g * rng.uniform(250, 450, g) * 1e3),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": np.where(rng.random(g) < 0.1,
                                                        rng.integers(1, 30, g), 0.0),
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": np.zeros(g),
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": np.zeros(g),
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": fleet.sbe_agg_base.copy(),
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": np.zeros(g),
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": fleet.remap_base.copy(),
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": np.zeros(g),
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": np.floor(up_g * rng.uniform(4e7, 1.2e8, g)),
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": np.where(
                rng.random(g) < 0.08, rng.integers(1, 20, g), 0.0),
        }
        cores = fleet.cpu_cores
        for spec in NODE_METRICS:
            if spec.kind is not MetricKind.COUNTER:
                continue
            rows = np.repeat(up_n, len(spec.variants))
            if spec.name == "node_cpu_seconds":
                share = np.tile([0.35, 0.05, 0.01, 0.59], self.n)
                c[spec.name] = np.round(rows * cores * share, 2)
            else:
                c[spec.name] = np.floor(rows * rng.uniform(1e5, 5e7, rows.size))
        return c

    def chunks(self) -> Iterator[SimChunk]:
        cfg = self.sc.cfg
        for w in range(cfg.n_windows):
            chunk = self.window(w)
            if chunk.times.size:
                yield chunk

    def window(self, w: int) -> SimChunk:
        """Window `w` (0-based); windows must be generated in order (state is carried)."""
        cfg, sc = self.sc.cfg, self.sc
        w0 = cfg.first_window_s + w * WINDOW_S
        lo, hi = max(w0, cfg.start_s), min(w0 + WINDOW_S, cfg.end_s)
        iv = cfg.interval_s
        times = np.arange(-(-lo // iv) * iv, hi, iv, dtype=np.int64)
        rng = rng_for(cfg.seed, 100, w)
        n, t_n = self.n, times.size
        fx = Effects.empty(times, iv, n, self.gpn)

        offline = np.zeros((n, t_n), dtype=bool)
        unscraped = np.zeros((n, t_n), dtype=bool)
        resets: list[tuple[int, int]] = []
        boot = np.repeat(self.boot[:, None], t_n, axis=1)
        for o in sc.outages:
            if o.start_s < hi and o.end_s > lo:
                offline[o.node, fx.span(o.start_s, o.end_s)] = True
            k = fx.at(o.end_s)
            if k.stop > k.start:
                resets.append((o.node, k.start))
                self.boot[o.node] = o.end_s - _BOOT_TO_SCRAPE_S
                boot[o.node, k.start:] = self.boot[o.node]
        for gap in sc.gaps:
            if gap.start_s < hi and gap.end_s > lo:
                unscraped[gap.node, fx.span(gap.start_s, gap.end_s)] = True

        node_job, act, job = self._jobs(fx, rng)
        # XID gauge: later events overwrite earlier ones, so apply them in time order.
        timed: list[tuple[int, int, int]] = [(f.time_s, 0, i) for i, f in enumerate(sc.failures)]
        timed += [(x.time_s, 1, i) for i, x in enumerate(sc.app_xids)]
        for _, what, i in sorted(timed):
            if what == 0:
                f = sc.failures[i]
                first = f.precursor_start_s if f.precursor_start_s is not None else f.time_s
                if first < hi and f.back_s + 2 * iv > lo:
                    apply_failure(fx, f, i, cfg.seed, rng)
            elif (x := sc.app_xids[i]).time_s < hi:
                clear = {nd: self._clear_after(nd, x.time_s) for nd in x.nodes}
                if max(clear.values()) > lo:
                    apply_app_xid(fx, x, clear)
        for b in sc.benign:
            if b.start_s < hi and b.end_s + iv > lo:
                apply_benign(fx, b, rng)

        gpu_vals = self._gpu_signals(fx, act, job, rng)
        node_vals = self._node_signals(fx, act, job, boot, rng)
        present_n = ~(offline | unscraped)
        present_g = np.repeat(present_n, self.gpn, axis=0) & ~fx.gone
        alive_g = np.repeat(~offline, self.gpn, axis=0)
        blocks: list[MetricBlock] = []
        for spec in GPU_METRICS:
            v = gpu_vals[spec.name]
            if spec.kind is not MetricKind.GAUGE:
                v = self._cumulate(spec.name, v * alive_g, resets, self.gpn)
            blocks.append(self._block(spec, self.gpu_entities, self.gpu_labels, v, present_g,
                                      rng))
        for spec in NODE_METRICS:
            v = node_vals[spec.name]
            nv = len(spec.variants)
            if spec.kind is MetricKind.COUNTER:
                v = self._cumulate(spec.name, v * np.repeat(~offline, nv, axis=0), resets, nv)
            ents, labels = self.node_rows[spec.name]
            blocks.append(self._block(spec, ents, labels, v, np.repeat(present_n, nv, axis=0),
                                      rng))
        job_ids = tuple(j.job_id for j in sc.jobs)
        return SimChunk(w0, w0 + WINDOW_S, times, iv, tuple(blocks), sc.fleet.node_names,
                        node_job, job_ids)

    def _jobs(self, fx: Effects, rng: np.random.Generator,
              ) -> tuple[IntArray, FloatArray, dict[str, FloatArray]]:
        """Per node: job index, activity 0..1, and the job-driven node quantities."""
        times, n = fx.times, self.n
        lo, hi = int(times[0]), int(times[-1]) + 1
        node_job = np.full((n, times.size), -1, dtype=np.int64)
        act = np.zeros((n, times.size))
        z = {k: np.zeros((n, times.size)) for k in ("ckpt", "startup", "fb", "load", "multi",
                                                    "ckpt_rate", "intensity")}
        for ji, j in enumerate(self.sc.jobs):
            if j.start_s >= hi or j.end_s <= lo:
                continue
            sl = fx.span(j.start_s, j.end_s)
            if sl.stop <= sl.start:
                continue
            rel = times[sl].astype(np.float64) - j.start_s
            # 1. everything shared by the job's nodes: synchronous steps move together
            shared = j.intensity * (1 + 0.02 * rng.standard_normal(rel.size))
            shared *= np.clip(rel / 600.0, 0.08, 1.0)
            ckpt = ((rel - j.ckpt_offset_s) % j.ckpt_period_s < j.ckpt_len_s) & (rel > 900)
            shared = np.where(ckpt, shared * 0.12, shared)
            nodes = np.array(j.nodes)
            node_noise = 1 + 0.01 * rng.standard_normal((nodes.size, rel.size))
            act[nodes, sl] = np.clip(shared[None, :] * node_noise, 0.0, 1.0)
            node_job[nodes, sl] = ji
            z["ckpt"][nodes, sl] = ckpt
            z["startup"][nodes, sl] = rel < 600
            z["fb"][nodes, sl] = j.fb_used_mib * np.clip(rel / 240.0, 0.05, 1.0)
            z["load"][nodes, sl] = j.cpu_load
            z["multi"][nodes, sl] = float(j.multi_node)
            z["ckpt_rate"][nodes, sl] = 4e8 + 8e8 * (j.fb_used_mib - 52_000) / 26_000
            z["intensity"][nodes, sl] = j.intensity
        return node_job, act, z

    def _gpu_signals(self, fx: Effects, act: FloatArray, job: dict[str, FloatArray],
                     rng: np.random.Generator) -> dict[str, FloatArray]:
        fleet, gpn, iv = self.sc.fleet, self.gpn, fx.step_s
        shape = fx.u_mult.shape
        busy = np.repeat(act, gpn, axis=0)
        u = np.clip(busy * (1 + 0.015 * rng.standard_normal(shape)) * fx.u_mult, 0.0, 1.0)
        scale = fleet.gpu_power_scale * np.repeat(fleet.node_power_scale, gpn)
        power = (62.0 + 630.0 * u ** 0.9) * scale[:, None] + 2.5 * rng.standard_normal(shape)
        power = np.clip(np.minimum(power + fx.power_add, fx.power_cap), 45.0, 700.0)
        t = fx.times.astype(np.float64)
        ambient = 22.0 + 1.5 * np.sin(2 * np.pi * (t / 86400.0 - 0.375))
        node_amb = np.repeat((fleet.node_power_scale - 1.0) * 40.0, gpn)
        target = (ambient[None, :] + (node_amb + fleet.gpu_temp_offset)[:, None]
                  + 0.052 * power + fx.temp_add)
        temp = np.empty(shape)
        state = target[:, 0].copy() if self.temp is None else self.temp
        alpha = 1 - np.exp(-iv / 150.0)
        for k in range(shape[1]):
            state = state + alpha * (target[:, k] - state)
            temp[:, k] = state
        self.temp = state
        running = u > 0.02
        clock = np.where(running, 1980.0 - 180.0 * np.clip((power - 640.0) / 60.0, 0, 1), 345.0)
        clock = np.clip(np.round((clock + fx.clock_add) / 15.0) * 15.0, 210.0, 1980.0)
        throttle = np.where(running, np.where(power >= 685.0, 4, 0), 1) | fx.throttle
        fb = np.repeat(job["fb"], gpn, axis=0)
        fb_used = np.where(fb > 0, np.round(fb + (fleet.gpu_power_scale[:, None] - 1) * 8000),
                           0.0)
        ckpt = np.repeat(job["ckpt"], gpn, axis=0)
        startup = np.repeat(job["startup"], gpn, axis=0)
        lognoise = np.exp(0.1 * rng.standard_normal(shape))
        return {
            "DCGM_FI_DEV_GPU_UTIL": np.round(100.0 * u),
            "DCGM_FI_DEV_MEM_COPY_UTIL": np.round(np.clip(32.0 * u * lognoise, 0, 100)),
            "DCGM_FI_DEV_SM_CLOCK": clock,
            "DCGM_FI_DEV_MEM_CLOCK": np.full(shape, 2619.0),
            "DCGM_FI_DEV_GPU_TEMP": np.round(temp),
            "DCGM_FI_DEV_MEMORY_TEMP": np.round(temp + 4.0 + 6.0 * u + 0.5 * fx.temp_add),
            "DCGM_FI_DEV_POWER_USAGE": np.round(power, 3),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": np.round(power * iv * 1e3),
            "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_FB_FREE": FB_TOTAL_MIB - fb_used,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": fx.pcie,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": fx.sbe,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": fx.dbe,
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": fx.sbe,
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": fx.dbe,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": fx.remap_c,
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": fx.remap_u,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": fx.remap_fail,
            "DCGM_FI_DEV_XID_ERRORS": fx.xid,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": np.round(
                (2e5 + 2.4e8 * u) * fx.nvlink_mult * lognoise * iv / 1024.0),
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": fx.crc,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": np.round(np.clip(0.97 * u, 0, 1), 4),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": np.round(np.clip(0.48 * u * lognoise, 0, 1), 4),
            "DCGM_FI_PROF_DRAM_ACTIVE": np.round(np.clip(0.36 * u * lognoise, 0, 1), 4),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": throttle.astype(np.float64),
            "DCGM_FI_PROF_PCIE_TX_BYTES": np.round(
                np.where(running | (ckpt > 0), 4e7 + 5e9 * ckpt, 2e4) * lognoise),
            "DCGM_FI_PROF_PCIE_RX_BYTES": np.round(
                np.where(running, 1.5e8 + 2e9 * startup, 1e4) * lognoise),
        }

    def _node_signals(self, fx: Effects, act: FloatArray, job: dict[str, FloatArray],
                      boot: FloatArray, rng: np.random.Generator) -> dict[str, FloatArray]:
        n, iv, cores = self.n, fx.step_s, self.sc.fleet.cpu_cores
        shape = act.shape
        in_job = job["load"] > 0
        noise = np.exp(0.08 * rng.standard_normal(shape))
        load = (0.2 + job["load"] * (0.4 + 0.6 * act)) * noise + fx.load_add
        user = np.minimum(0.75 * load, cores * 0.9)
        system = 0.1 * load + 0.3
        iowait = 0.05 + 3.0 * job["ckpt"] + 2.0 * job["startup"]
        idle = np.maximum(cores - user - system - iowait, 0.0)
        cpu = np.stack([user, system, iowait, idle], axis=1).reshape(n * 4, -1) * iv
        ib = np.where(job["multi"] > 0, 1.8e10 * act, 2e4) * noise
        nfs_w = np.where(job["ckpt"] > 0, job["ckpt_rate"], 1e5) * noise
        nfs_r = (np.where(in_job, 3e7 + 8e8 * job["startup"], 1e4) * fx.nfs_read_mult) * noise
        eth_rx, eth_tx = 5e4 + 1.02 * nfs_r, 5e4 + 1.02 * nfs_w
        t = fx.times.astype(np.float64)
        ambient = 22.0 + 1.5 * np.sin(2 * np.pi * (t / 86400.0 - 0.375))
        mem = 1.95e12 - np.where(in_job, 3e11 + 3e11 * job["intensity"], 2e10)
        return {
            "node_load1": np.round(load, 2),
            "node_cpu_seconds": np.round(cpu, 2),
            "node_memory_MemAvailable_bytes": np.round(mem + 1e9 * rng.standard_normal(shape)),
            "node_network_receive_bytes": _interleave(ib * 0.98, eth_rx, iv),
            "node_network_transmit_bytes": _interleave(ib, eth_tx, iv),
            "node_mountstats_nfs_total_read_bytes": np.round(nfs_r * iv),
            "node_mountstats_nfs_total_write_bytes": np.round(nfs_w * iv),
            "node_disk_read_bytes": np.round((1e5 + 1.5e9 * job["startup"]) * noise * iv),
            "node_disk_written_bytes": np.round((2e4 + 2e6 * in_job) * noise * iv),
            "node_hwmon_temp_celsius": np.round(
                30.0 + ambient * 0.4 + 30.0 * np.minimum(user / cores * 3, 1.0), 1),
            "node_boot_time_seconds": boot,
        }

    def _cumulate(self, name: str, inc: FloatArray, resets: list[tuple[int, int]],
                  rows_per_node: int) -> FloatArray:
        total = self.carry[name][:, None] + np.cumsum(inc, axis=1)
        for node, k in resets:
            rows = slice(node * rows_per_node, (node + 1) * rows_per_node)
            if name.startswith("DCGM") and not _RESETS_ON_REBOOT.get(name, True):
                continue
            before = total[rows, k] - inc[rows, k]
            total[rows, k:] -= before[:, None]
        self.carry[name] = total[:, -1].copy()
        return total

    def _block(self, spec: MetricDef, ents: tuple[Entity, ...],
               labels: tuple[tuple[tuple[str, str], ...], ...], values: FloatArray,
               present: np.ndarray, rng: np.random.Generator) -> MetricBlock:
        out = np.where(present, values, np.nan)
        p = self.sc.cfg.missing_sample_prob
        if p > 0:
            count = int(rng.binomial(out.size, p))
            out.flat[rng.integers(0, out.size, count)] = np.nan
        return MetricBlock(spec, ents, labels, out)


# Lifetime (InfoROM) counts survive a reboot; everything else counts since the driver loaded.
_RESETS_ON_REBOOT = {
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": False,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": False,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": False,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": False,
}


def _interleave(ib: FloatArray, eth: FloatArray, iv: int) -> FloatArray:
    """Rows node-major, device-minor (ib0, eth0) as in the metric's variants."""
    return np.round(np.stack([ib, eth], axis=1).reshape(ib.shape[0] * 2, -1) * iv)
