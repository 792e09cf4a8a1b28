"""How each failure precursor, XID and benign anomaly changes the GPU and node signals.

Each function edits the per-window modifier arrays of `Effects` in place for the samples of one
event that fall in the window; `model.py` turns base load plus modifiers into metric values.
Event parameters that must stay the same across windows (an oscillation's period) come from a
per-event random stream; per-sample noise comes from the window's stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.simulate.faults import AppXid, Benign, Failure
from trainguard.simulate.scenario import rng_for
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["Effects", "apply_app_xid", "apply_benign", "apply_failure"]


@dataclass(eq=False)
class Effects:
    """Modifiers for one window; GPU arrays are (gpus, T), node arrays (nodes, T)."""

    times: IntArray
    step_s: int
    gpus_per_node: int
    u_mult: FloatArray
    power_add: FloatArray
    power_cap: FloatArray
    temp_add: FloatArray
    clock_add: FloatArray
    throttle: IntArray
    pcie: FloatArray
    sbe: FloatArray
    dbe: FloatArray
    crc: FloatArray
    nvlink_mult: FloatArray
    remap_c: FloatArray
    remap_u: FloatArray
    remap_fail: FloatArray
    xid: FloatArray
    gone: np.ndarray
    load_add: FloatArray
    nfs_read_mult: FloatArray

    @classmethod
    def empty(cls, times: IntArray, step_s: int, nodes: int, gpus_per_node: int) -> Effects:
        shape = (nodes * gpus_per_node, times.size)
        z = np.zeros
        return cls(times, step_s, gpus_per_node, np.ones(shape), z(shape), np.full(shape, 700.0),
                   z(shape), z(shape), z(shape, dtype=np.int64), z(shape), z(shape), z(shape),
                   z(shape), np.ones(shape), z(shape), z(shape), z(shape), z(shape),
                   z(shape, dtype=bool), z((nodes, times.size)), np.ones((nodes, times.size)))

    def span(self, start_s: float, end_s: float) -> slice:
        """The window's samples with start_s <= t < end_s."""
        return slice(int(np.searchsorted(self.times, start_s)),
                     int(np.searchsorted(self.times, end_s)))

    def at(self, t_s: float) -> slice:
        """The first sample at or after t_s (empty when it is not in this window)."""
        return self.span(t_s, t_s + self.step_s)

    def node_rows(self, node: int) -> np.ndarray:
        return np.arange(node * self.gpus_per_node, (node + 1) * self.gpus_per_node)


def _progress(fx: Effects, sl: slice, start_s: float, end_s: float) -> FloatArray:
    t = fx.times[sl].astype(np.float64)
    return np.clip((t - start_s) / max(end_s - start_s, 1.0), 0.0, 1.0)


def apply_failure(fx: Effects, f: Failure, index: int, seed: int,
                  rng: np.random.Generator) -> None:
    rows = f.node * fx.gpus_per_node + np.array(f.gpus)
    m = f.magnitude
    if f.precursor != "none" and f.precursor_start_s is not None:
        sl = fx.span(f.precursor_start_s, f.time_s)
        if sl.stop > sl.start:
            p = _progress(fx, sl, f.precursor_start_s, f.time_s)
            _precursor(fx, f, rows, sl, p, rng_for(seed, 200, index), rng)
    fx.xid[rows, fx.span(f.time_s, f.back_s)] = f.xid
    if f.vanishes:
        fx.gone[rows, fx.span(f.time_s + fx.step_s, f.back_s)] = True
    k = fx.at(f.time_s)
    if f.xid in (48, 94, 95):
        fx.dbe[rows, k] += 1
    if f.xid in (94, 95, 64):
        fx.remap_u[rows, k] += 1
    if f.xid == 64:
        fx.remap_fail[rows, fx.span(f.time_s, f.back_s)] = 1
    if f.xid == 63:
        fx.remap_c[rows, k] += 1
    if f.xid == 92:
        fx.sbe[rows, k] += round(40 * m) + 5
    if f.xid == 74:
        fx.crc[rows, k] += round(150 * m) + 10
        fx.nvlink_mult[rows, fx.span(f.time_s, f.back_s)] = 0.0


def _precursor(fx: Effects, f: Failure, rows: np.ndarray, sl: slice, p: FloatArray,
               params: np.random.Generator, rng: np.random.Generator) -> None:
    m = f.magnitude
    shape = (rows.size, p.size)
    if f.precursor == "pcie_replay":
        fx.pcie[rows, sl] += rng.poisson(m * 0.3 * np.exp(4.2 * p), shape)
    elif f.precursor == "ecc_sbe":
        fx.sbe[rows, sl] += rng.poisson(m * 0.15 * np.exp(4.0 * p), shape)
        fx.remap_c[rows, sl] += rng.random(shape) < m * 0.002 * np.exp(3.0 * p)
    elif f.precursor == "nvlink_crc":
        fx.crc[rows, sl] += rng.poisson(m * 0.8 * np.exp(4.5 * p), shape)
        fx.nvlink_mult[rows, sl] *= 1.0 - 0.15 * p
    elif f.precursor == "thermal_creep":
        rise = min(25.0, 8.0 * m) * p ** 1.5
        fx.temp_add[rows, sl] += rise
        hot = (p > 0.85) & (rise > 8)
        fx.throttle[rows, sl] |= np.where(hot, 0x20, 0)
        fx.clock_add[rows, sl] -= np.where(hot, 120.0 * m, 0.0)
    elif f.precursor == "power_oscillation":
        period = params.uniform(65.0, 260.0)
        phase = params.uniform(0, 2 * np.pi)
        t = fx.times[sl].astype(np.float64)
        wave = np.sin(2 * np.pi * t / period + phase)
        amp = m * 40.0 * (0.3 + 0.7 * p)
        fx.power_add[rows, sl] += amp * wave
        fx.clock_add[rows, sl] -= amp * 1.5 * np.abs(wave)
    elif f.precursor == "util_stall":
        stall = rng.random(shape) < np.clip(0.02 + 0.25 * p * m, 0, 0.8)
        fx.u_mult[rows, sl] = np.where(stall, 0.05, fx.u_mult[rows, sl])
        # Synchronous training: the node's other GPUs wait in NCCL while one GPU stalls.
        peers = fx.node_rows(f.node)
        fx.u_mult[peers, sl] *= np.where(stall.any(axis=0), 0.8, 1.0)


def apply_app_xid(fx: Effects, x: AppXid, clear_s: dict[int, float]) -> None:
    for node in x.nodes:
        rows = node * fx.gpus_per_node + np.array(x.gpus)
        fx.xid[rows, fx.span(x.time_s, clear_s[node])] = x.xid


def apply_benign(fx: Effects, b: Benign, rng: np.random.Generator) -> None:
    rows = (fx.node_rows(b.node) if b.gpu is None
            else np.array([b.node * fx.gpus_per_node + b.gpu]))
    m = b.magnitude
    sl = fx.span(b.start_s, b.end_s)
    k = fx.at(b.start_s)
    if b.what == "thermal_spike" and sl.stop > sl.start:
        p = _progress(fx, sl, b.start_s, b.end_s)
        fx.temp_add[rows, sl] += 8.0 * m * np.minimum(p * 5, 1.0) * (1 - p)
    elif b.what == "sbe_single":
        fx.sbe[rows, k] += 1 + int(m > 1.5)
    elif b.what == "pcie_replay_burst":
        fx.pcie[rows, k] += round(60 * m)
    elif b.what == "nvlink_crc_blip":
        fx.crc[rows, k] += round(25 * m)
    elif b.what == "node_thermal_drift" and sl.stop > sl.start:
        p = _progress(fx, sl, b.start_s, b.end_s)
        fx.temp_add[rows, sl] += 5.0 * m * np.sin(np.pi * p)
    elif b.what == "power_cap":
        fx.power_cap[rows, sl] = 700.0 - 120.0 * m
        fx.throttle[rows, sl] |= 0x4
    elif b.what == "power_jitter":
        fx.power_add[rows, sl] += rng.normal(0, 25.0 * m, (rows.size, sl.stop - sl.start))
    elif b.what == "high_load_node":
        fx.load_add[b.node, sl] += 25.0 * m
    elif b.what == "loader_stall":
        fx.u_mult[rows, sl] *= 1.0 - b.magnitude
        fx.nfs_read_mult[b.node, sl] = 4.0
