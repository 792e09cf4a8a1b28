"""Independent held-out GPU-cluster telemetry generator (numpy only).

Writes an OpenMetrics backfill of DCGM / node-exporter style telemetry for a synthetic training
cluster, per-node kernel logs and ground-truth labels. It was written without looking at
trainguard's own simulator or detector so that a detector can be evaluated on shapes it has never
seen. See README.md next to this file for what is modelled.

    python benchmarks/heldout/gen.py --nodes 64 --gpus 8 --days 7 --seed 1 --out /tmp/ho --style a
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


def _load_gen_d() -> Any:
    """gen_d.py next to this file, however this file was loaded (package, script, by path)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("heldout_gen_d", Path(__file__).with_name(
        "gen_d.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen_d = _load_gen_d()

BASE_T0 = 1731888000  # 2024-11-18 00:00:00 UTC (2h aligned)
WINDOW_S = 7200
STYLES = ("a", "b", "c", "d")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
PCI_BUS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db", "1b", "2c", "3c", "5f", "9c", "ad",
           "bc", "dd")

XID_TEXT: dict[int, str] = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address",
    31: "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000. Fault is of type "
        "FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000008, intr 00000000. MMU Fault: ENGINE CE3 HUBCLIENT_CE1 faulted",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
        "partition 0, subpartition 0.",
    62: "Internal micro-controller halt (PMU halt).",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row, there are no spare rows in the bank.",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
         "(GSP_RM_CONTROL) (0x20800a4c 0x4).",
}
HW_XIDS = (79, 48, 94, 95, 74, 119, 64, 92, 62)
HW_XID_P = (0.22, 0.10, 0.12, 0.08, 0.14, 0.12, 0.07, 0.07, 0.08)
# precursor shapes each XID may show (one or two are drawn)
PRECURSORS: dict[int, tuple[str, ...]] = {
    48: ("sbe_exp", "memtemp_step", "xid63_log"),
    94: ("sbe_exp", "xid63_log"),
    95: ("sbe_exp", "memtemp_step"),
    64: ("xid63_log", "sbe_exp"),
    92: ("sbe_exp",),
    79: ("pcie_burst", "util_stalls", "throttle", "power_var"),
    74: ("nvlink_crc", "util_stalls"),
    119: ("util_stalls", "power_var"),
    62: ("power_var", "throttle", "util_stalls"),
}


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def syslog_time(ts: float) -> str:
    tm = time.gmtime(int(ts))
    hms = f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}"
    return f"{MONTHS[tm.tm_mon - 1]} {tm.tm_mday:>2} {hms}"


def cumsum_resets(inc: np.ndarray, reset: np.ndarray, init: np.ndarray) -> np.ndarray:
    """Cumulative sum along axis 1 that restarts (at 0) where reset is True; init before."""
    inc = np.asarray(inc, dtype=np.float64)
    cs = np.cumsum(inc, axis=1)
    before = cs - inc
    idx = np.where(reset, np.arange(inc.shape[1])[None, :], -1)
    np.maximum.accumulate(idx, axis=1, out=idx)
    base = np.take_along_axis(before, np.maximum(idx, 0), axis=1)
    base = np.where(idx >= 0, base, -np.asarray(init, dtype=np.float64)[:, None])
    out: np.ndarray = cs - base
    return out


def smooth_ar1(x: np.ndarray, alpha: float) -> np.ndarray:
    """First-order lag filter along axis 1 (x: rows x time)."""
    out = np.empty_like(x)
    acc = x[:, 0].copy()
    for k in range(x.shape[1]):
        acc += alpha * (x[:, k] - acc)
        out[:, k] = acc
    return out


def _episodes(rng: np.random.Generator, a: int, b: int, n: int, lo: int, hi: int,
              toward_end: bool = True) -> list[tuple[int, int]]:
    """n episodes [s, e) within [a, b), denser toward b when toward_end."""
    out: list[tuple[int, int]] = []
    if b - a < 2:
        return out
    u = rng.random(n)
    if toward_end:
        u = np.sqrt(u)
    for s in (a + u * (b - a - 1)).astype(int):
        ln = int(rng.integers(lo, hi + 1))
        out.append((int(s), int(min(b, s + ln))))
    return out


# --------------------------------------------------------------------------------------------
# simulation
# --------------------------------------------------------------------------------------------


@dataclass
class Job:
    jid: int
    nodes: np.ndarray
    start: int
    end: int  # planned, exclusive
    kind: str
    size: int
    hang_start: int = -1  # step from which the job hangs (NCCL wait) until end
    culprit_gpu: int = -1  # global gpu row that died (idle during hang)
    app_xid: tuple[int, int] | None = None  # (step, xid)
    ended_by: str = "done"
    running: bool = True


@dataclass
class Sim:
    nodes: int
    gpus: int
    steps: int
    interval: int
    style: str
    rng: np.random.Generator
    hostnames: list[str] = field(default_factory=list)
    ips: list[str] = field(default_factory=list)
    job_of: np.ndarray = field(default_factory=lambda: np.zeros(0))
    down: np.ndarray = field(default_factory=lambda: np.zeros(0))
    jobs: list[Job] = field(default_factory=list)
    labels: list[dict[str, Any]] = field(default_factory=list)
    klog: list[list[tuple[float, str]]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)
    reboots: list[tuple[int, int, int]] = field(default_factory=list)  # node, down_s, up_s
    replaced: list[tuple[int, int]] = field(default_factory=list)  # gpu row, from step
    uuids: list[str] = field(default_factory=list)
    new_uuids: dict[int, str] = field(default_factory=dict)

    def uuid_of(self, row: int) -> str:
        return self.uuids[row]

    def ts(self, k: int, jitter: bool = True) -> float:
        j = float(self.rng.random()) * self.interval if jitter else 0.0
        return BASE_T0 + k * self.interval + j

    def log(self, node: int, ts: float, text: str) -> None:
        self.klog[node].append((ts, text))


STYLE_PARAMS: dict[str, dict[str, Any]] = {
    "a": {"sizes": (4, 8, 16, 32), "size_p": (0.2, 0.3, 0.3, 0.2), "dur_h": 10.0,
          "kinds": ("train", "infer", "debug"), "kind_p": (0.8, 0.1, 0.1), "ckpt_min": (30, 60),
          "load": 0.72},
    "b": {"sizes": (1, 2, 4, 8), "size_p": (0.3, 0.3, 0.25, 0.15), "dur_h": 4.0,
          "kinds": ("train", "infer", "debug"), "kind_p": (0.55, 0.25, 0.2), "ckpt_min": (10, 30),
          "load": 0.7},
    "c": {"sizes": (1, 2, 8, 16, 24), "size_p": (0.2, 0.2, 0.3, 0.2, 0.1), "dur_h": 7.0,
          "kinds": ("train", "infer", "debug"), "kind_p": (0.65, 0.2, 0.15), "ckpt_min": (15, 90),
          "load": 0.68},
    # d: intermittent and slow precursors and their look-alikes (gen_d.py); more failures and
    # single-node reboots so that a 16-node, 2-day cluster holds a few of each
    "d": {"sizes": (2, 4, 8, 16), "size_p": (0.25, 0.3, 0.3, 0.15), "dur_h": 6.0,
          "kinds": ("train", "infer", "debug"), "kind_p": (0.7, 0.15, 0.15), "ckpt_min": (20, 60),
          "load": 0.75, "failure_rate": 8.0, "maint_mult": 4.0},
}


def _names(style: str, n: int, rng: np.random.Generator) -> tuple[list[str], list[str]]:
    hosts, ips = [], []
    per_rack = 16 if style != "b" else 8
    for i in range(n):
        rack, idx = divmod(i, per_rack)
        if style == "c":
            hosts.append(f"dgx-h100-{rack:02d}{idx + 1:02d}")
        else:
            hosts.append(f"gpu-{chr(97 + rack % 26)}{idx + 1:02d}")
        ips.append(f"10.{rack // 200}.{3 + rack % 200}.{7 + idx * 3}")
    return hosts, ips


def _uuid(rng: np.random.Generator) -> str:
    h = rng.bytes(16).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def simulate(nodes: int, gpus: int, days: float, seed: int, interval: int, style: str,
             failure_rate: float | None = None) -> Sim:
    style_i = STYLES.index(style)
    rng = np.random.default_rng([seed, style_i, 7741])
    steps = round(days * 86400 / interval)
    sim = Sim(nodes, gpus, steps, interval, style, rng)
    sim.hostnames, sim.ips = _names(style, nodes, rng)
    sim.klog = [[] for _ in range(nodes)]
    sim.uuids = [_uuid(rng) for _ in range(nodes * gpus)]
    per_min = 60.0 / interval
    sp = STYLE_PARAMS[style]
    down = np.zeros((nodes, steps), dtype=bool)
    reserved = np.zeros((nodes, steps), dtype=bool)  # no new jobs (maintenance drain)

    # ---- planned maintenance: rolling batches + single-node reboots -----------------------
    maint: list[tuple[int, int, int]] = []
    n_roll = rng.poisson(max(days / 5.0, 0.3))
    for _ in range(n_roll):
        k0 = int(rng.integers(int(steps * 0.1), max(int(steps * 0.9), int(steps * 0.1) + 1)))
        batch = rng.choice(nodes, size=min(nodes, int(rng.integers(3, 9))), replace=False)
        for i, n in enumerate(batch):
            s = k0 + int(i * rng.integers(20, 50) * per_min)
            maint.append((int(n), s, s + int(rng.integers(20, 120) * per_min)))
    for _ in range(rng.poisson(0.5 * days * nodes / 64 * sp.get("maint_mult", 1.0))):
        s = int(rng.integers(0, steps))
        maint.append((int(rng.integers(nodes)), s, s + int(rng.integers(15, 180) * per_min)))
    maint_start: dict[int, list[int]] = {}
    for n, s, e in maint:
        if s >= steps:
            continue
        e = min(e, steps)
        if down[n, s:e].any():
            continue
        down[n, s:e] = True
        reserved[n, max(0, s - int(rng.integers(0, 240) * per_min)):s] = True
        maint_start.setdefault(s, []).append(n)
        sim.reboots.append((n, s, e))
        sim.labels.append({"type": "maintenance", "node": sim.hostnames[n],
                           "instance": sim.ips[n], "start": BASE_T0 + s * interval,
                           "end": BASE_T0 + e * interval, "reason": "planned"})

    # ---- hardware failure times -----------------------------------------------------------
    if failure_rate is None:
        failure_rate = float(sp.get("failure_rate", 1.5))
    n_fail = rng.poisson(failure_rate * days * nodes / 64)
    fail_at: dict[int, int] = {}
    for k in np.sort(rng.integers(int(1.5 * 3600 / interval), steps - 1, size=n_fail)):
        k = int(k)
        while k in fail_at:
            k += 1
        fail_at[k] = 1

    # ---- scheduler loop -------------------------------------------------------------------
    job_of = np.full((nodes, steps), -1, dtype=np.int32)
    node_job = np.full(nodes, -1, dtype=np.int64)
    drained = np.zeros(nodes, dtype=bool)
    undrain_at: dict[int, list[int]] = {}
    pending: list[tuple[int, int, str]] = []  # (submit step, size, kind)
    ends: dict[int, list[int]] = {}
    sizes = np.array([min(s, max(1, nodes // 2)) for s in sp["sizes"]])
    mean_size = float((sizes * np.array(sp["size_p"])).sum())
    dur_steps = sp["dur_h"] * 3600 / interval
    lam = sp["load"] * nodes / (mean_size * dur_steps)
    last_fail_node = -1
    steps_day = 86400 / interval

    def end_job(j: Job, k: int, why: str) -> None:
        j.end = k
        j.ended_by = why
        j.running = False
        for n in j.nodes:
            if node_job[n] == j.jid:
                node_job[n] = -1

    def start_job(k: int, size: int, kind: str) -> bool:
        free = np.flatnonzero((node_job < 0) & ~drained & ~down[:, k] & ~reserved[:, k])
        if free.size < size:
            return False
        chosen = np.sort(rng.choice(free, size=size, replace=False))
        if kind == "debug":
            dur = int(rng.integers(10, 90) * per_min)
        else:
            dur = int(rng.lognormal(np.log(dur_steps), 0.7))
        dur = max(dur, int(20 * per_min))
        j = Job(len(sim.jobs), chosen, k, k + dur, kind, size)
        # application crashes: ~0.6 per day cluster-wide
        if kind != "debug" and rng.random() < min(0.6, 0.6 * dur / steps_day * mean_size / (
                sp["load"] * nodes)):
            j.app_xid = (k + int(rng.integers(int(10 * per_min), max(dur, int(11 * per_min)))),
                         int(rng.choice([13, 31, 43])))
        sim.jobs.append(j)
        node_job[chosen] = j.jid
        end_k = j.end if j.app_xid is None else min(j.end, j.app_xid[0])
        ends.setdefault(end_k, []).append(j.jid)
        return True

    # initial jobs: cluster already busy at t0
    for _ in range(int(nodes * sp["load"] / mean_size) + 1):
        pending.append((0, int(rng.choice(sizes, p=sp["size_p"])),
                        str(rng.choice(sp["kinds"], p=sp["kind_p"]))))
    for k in range(steps):
        for n in undrain_at.pop(k, []):
            drained[n] = False
        # planned maintenance kills running jobs on that node
        for n in maint_start.get(k, []):
            if node_job[n] >= 0:
                end_job(sim.jobs[node_job[n]], k, "maintenance")
        # repair/maintenance downtime removes node from running jobs as well
        for jid in ends.pop(k, []):
            j = sim.jobs[jid]
            if not j.running:
                continue  # already ended earlier
            if j.app_xid is not None and j.app_xid[0] == k and j.ended_by == "done":
                xid = j.app_xid[1]
                t_app = sim.ts(k)
                for n in j.nodes:
                    t = t_app + float(rng.uniform(0, 2.5))
                    sim.labels.append({"type": "app_xid", "node": sim.hostnames[n],
                                       "instance": sim.ips[n], "time": int(t), "xid": xid,
                                       "job": jid})
                    for g in range(gpus):
                        pid = 3000 + jid * 17 + g
                        sim.log(n, t + g * 0.01, f"NVRM: Xid (PCI:0000:{PCI_BUS[g % 16]}:00): "
                                f"{xid}, pid={pid}, name=python3, {XID_TEXT[xid]}")
                end_job(j, k, "app_xid")
                pending.insert(0, (k + int(rng.integers(5, 30) * per_min), j.size, j.kind))
            elif j.end == k:
                end_job(j, k, j.ended_by)
            elif j.app_xid is not None and j.app_xid[0] == k:
                continue
        # hardware failure
        if k in fail_at:
            up_ok = ~down[:, max(0, k - int(200 * per_min)):k + 1].any(axis=1) & ~drained
            if last_fail_node >= 0:
                up_ok[last_fail_node] = False
            busy = up_ok & (node_job >= 0)
            pool = np.flatnonzero(busy if (busy.any() and rng.random() < 0.85) else up_ok)
            if pool.size:
                n = int(rng.choice(pool))
                last_fail_node = n
                _hw_failure(sim, k, n, node_job, down, drained, undrain_at, ends, pending,
                            end_job, per_min)
        # new arrivals
        for _ in range(rng.poisson(lam)):
            pending.append((k + int(rng.integers(0, int(30 * per_min) + 1)),
                            int(rng.choice(sizes, p=sp["size_p"])),
                            str(rng.choice(sp["kinds"], p=sp["kind_p"]))))
        if pending and k % 2 == 0:
            keep: list[tuple[int, int, str]] = []
            for item in pending:
                if item[0] > k or not start_job(k, item[1], item[2]):
                    keep.append(item)
            pending = keep[:200]
        job_of[:, k] = node_job
    for j in sim.jobs:
        j.end = min(j.end, steps)
    sim.job_of = job_of
    sim.down = down
    return sim


def _hw_failure(sim: Sim, k: int, n: int, node_job: np.ndarray, down: np.ndarray,
                drained: np.ndarray, undrain_at: dict[int, list[int]],
                ends: dict[int, list[int]], pending: list[tuple[int, int, str]],
                end_job: Callable[[Job, int, str], None], per_min: float) -> None:
    rng = sim.rng
    steps = sim.steps
    g = int(rng.integers(sim.gpus))
    row = n * sim.gpus + g
    xid = int(rng.choice(HW_XIDS, p=HW_XID_P))
    t = sim.ts(k)
    lead = int(np.exp(rng.uniform(np.log(10), np.log(180))) * per_min)
    shapes: list[str] = []
    extra: dict[str, Any] = {}
    if sim.style == "d":
        shapes, lead, extra = gen_d.draw_failure(rng, xid, per_min)
    elif rng.random() >= 0.3:
        cand = PRECURSORS[xid]
        m = 1 if (len(cand) == 1 or rng.random() < 0.6) else 2
        shapes = [str(s) for s in rng.choice(cand, size=m, replace=False)]
    jid = int(node_job[n])
    hang = int(rng.integers(0, int(10 * per_min) + 1)) if rng.random() < 0.7 else 0
    death = min(k + max(hang, 1), steps)
    if jid >= 0:
        j = sim.jobs[jid]
        if j.running and j.end > death:
            j.hang_start = k
            j.culprit_gpu = row
            ends.setdefault(death, []).append(jid)
            j.end = death
            j.ended_by = "hw_failure"
            pending.insert(0, (death + int(rng.integers(5, 40) * per_min), j.size, j.kind))
    drained[n] = True
    rep_s = min(steps, death + int(rng.integers(10, 180) * per_min))
    rep_e = min(steps, rep_s + int(rng.integers(60, 480) * per_min))
    if rep_s < steps:
        down[n, rep_s:rep_e] = True
        sim.reboots.append((n, rep_s, rep_e))
        sim.labels.append({"type": "maintenance", "node": sim.hostnames[n],
                           "instance": sim.ips[n], "start": BASE_T0 + rep_s * sim.interval,
                           "end": BASE_T0 + rep_e * sim.interval, "reason": "repair"})
        if xid in (79, 48, 95, 64) and rng.random() < 0.5 and rep_e < steps:
            sim.replaced.append((row, rep_e))
            sim.new_uuids[row] = _uuid(rng)
    undrain_at.setdefault(rep_e, []).append(n)
    pid = "'<unknown>'" if xid == 79 else str(2000 + int(rng.integers(0, 60000)))
    name = "<unknown>" if xid == 79 else "python3"
    bus = PCI_BUS[g % 16]
    sim.log(n, t, f"NVRM: Xid (PCI:0000:{bus}:00): {xid}, pid={pid}, name={name}, {XID_TEXT[xid]}")
    if xid == 79:
        sim.log(n, t + 0.2, f"NVRM: GPU at PCI:0000:{bus}:00: {sim.uuid_of(row)}")
        sim.log(n, t + 0.2, "NVRM: GPU Board Serial Number: 1654922001234")
    if xid in (48, 95, 94):
        sim.log(n, t + 1.0, f"NVRM: Xid (PCI:0000:{bus}:00): 63, pid={pid}, name=python3, "
                f"{XID_TEXT[63]}")
    rec = {"type": "failure", "node": sim.hostnames[n], "gpu": g, "time": int(t),
           "xid": xid, "failure_type": f"xid{xid}", "instance": sim.ips[n],
           "uuid": sim.uuid_of(row), "precursors": shapes,
           "lead_s": lead * sim.interval if shapes else 0, "job": jid}
    sim.labels.append(rec)
    sim.failures.append({"k": k, "node": n, "gpu": g, "row": row, "xid": xid, "shapes": shapes,
                         "lead": lead, "death": death, "rep_s": rep_s, "rep_e": rep_e,
                         "jid": jid, "t": t, **extra})


# --------------------------------------------------------------------------------------------
# turning the schedule into telemetry
# --------------------------------------------------------------------------------------------

NODE_SIGNALS = ("util", "pload", "sm", "tensor", "dram", "nvl", "pcie_tx", "pcie_rx", "fb",
                "cpu", "hostmem", "ib", "eth")


def _job_pattern(sim: Sim, j: Job, rng: np.random.Generator) -> dict[str, np.ndarray]:
    length = j.end - j.start
    pm = 60.0 / sim.interval
    x = np.arange(length)
    z = np.zeros(length, dtype=np.float32)
    p: dict[str, np.ndarray] = {s: z.copy() for s in NODE_SIGNALS}
    su = min(length, int(rng.integers(4, 16) * pm))
    multi = j.size > 1
    if j.kind == "train":
        lvl = rng.uniform(0.82, 0.97)
        busy = np.ones(length, dtype=np.float32)
        pl = np.full(length, lvl, dtype=np.float32) + rng.normal(0, 0.018, length)
        ck_p = int(rng.uniform(*STYLE_PARAMS[sim.style]["ckpt_min"]) * pm)
        ck_l = max(1, int(rng.uniform(1, 5) * pm))
        ph = int(rng.integers(0, ck_p))
        ck = ((x + ph) % ck_p) < ck_l
        ev = np.zeros(length, dtype=bool)
        if rng.random() < 0.5:
            ev_p = int(rng.uniform(2, 6) * 60 * pm)
            ev = ((x + int(rng.integers(0, ev_p))) % ev_p) < int(rng.uniform(5, 15) * pm)
        stall = np.zeros(length, dtype=bool)
        for s, e in _episodes(rng, su, length, int(length / (240 * pm)) + 1, 1, 3, False):
            stall[s:e] = True
        if rng.random() < 0.08 or (j.jid % 23 == 5):  # benign power oscillation
            per = rng.uniform(3, 10) * pm
            pl = pl + rng.uniform(0.08, 0.16) * np.sin(2 * np.pi * x / per)
        util = np.where(ck, rng.uniform(0, 8, length), 99.0 - np.abs(rng.normal(0, 0.8, length)))
        util = np.where(ev & ~ck, 62 + rng.normal(0, 5, length), util)
        util = np.where(stall, 30 + rng.normal(0, 8, length), util)
        pl = np.where(ck, 0.05, np.where(ev, 0.5 * lvl, np.where(stall, 0.3, pl)))
        busy = np.where(ck, 0.05, np.where(ev, 0.55, np.where(stall, 0.3, busy)))
        p["util"] = util.astype(np.float32)
        p["pload"] = pl.astype(np.float32)
        sm_l, te_l, dr_l = rng.uniform(0.55, 0.8), rng.uniform(0.3, 0.6), rng.uniform(0.25, 0.5)
        p["sm"] = (busy * sm_l).astype(np.float32)
        p["tensor"] = (np.where(ev, 0.1, busy) * te_l).astype(np.float32)
        p["dram"] = (busy * dr_l).astype(np.float32)
        nv = rng.uniform(4e10, 1.2e11) if multi else rng.uniform(1e10, 4e10)
        p["nvl"] = (np.where(ck | stall, 0.02, np.where(ev, 0.2, 1.0)) * nv).astype(np.float32)
        p["pcie_tx"] = np.where(ck, rng.uniform(6e9, 1.8e10), 1.5e8).astype(np.float32)
        p["pcie_rx"] = np.where(ck, 2e8, rng.uniform(2e8, 6e8)).astype(np.float32)
        p["fb"] = np.full(length, rng.uniform(60000, 79000), dtype=np.float32)
        p["cpu"] = np.where(ck, 8.0, rng.uniform(20, 60)).astype(np.float32)
        p["hostmem"] = np.full(length, rng.uniform(3e11, 1.2e12), dtype=np.float32)
        ib = rng.uniform(1e10, 4e10) if multi else 2e6
        p["ib"] = (np.where(ck | stall, 0.03, np.where(ev, 0.2, 1.0)) * ib).astype(np.float32)
        p["eth"] = np.where(ck, rng.uniform(2e9, 5e9), 5e7).astype(np.float32)
    elif j.kind == "infer":
        walk = np.cumsum(rng.normal(0, 0.02, length))
        walk = 0.55 + 0.25 * np.tanh(walk - walk.mean()) + 0.1 * np.sin(2 * np.pi * x / (1440 * pm))
        util = np.clip(walk * 100 + rng.normal(0, 6, length), 5, 100)
        p["util"] = util.astype(np.float32)
        p["pload"] = (util / 100 * 0.6).astype(np.float32)
        p["sm"] = (util / 100 * 0.4).astype(np.float32)
        p["tensor"] = (util / 100 * 0.25).astype(np.float32)
        p["dram"] = (util / 100 * 0.35).astype(np.float32)
        p["nvl"] = (util / 100 * 2e9).astype(np.float32)
        p["pcie_tx"] = (util / 100 * 3e8).astype(np.float32)
        p["pcie_rx"] = (util / 100 * 4e8).astype(np.float32)
        p["fb"] = np.full(length, rng.uniform(20000, 70000), dtype=np.float32)
        p["cpu"] = (util / 100 * 25).astype(np.float32)
        p["hostmem"] = np.full(length, rng.uniform(1e11, 4e11), dtype=np.float32)
        p["ib"] = np.full(length, 1e6, dtype=np.float32)
        p["eth"] = (util / 100 * 3e8).astype(np.float32)
    else:  # debug: on/off bursts
        per = max(2, int(rng.uniform(2, 10) * pm))
        on = ((x // per) % 2 == 0) & (rng.random(length) < 0.9)
        p["util"] = np.where(on, rng.uniform(50, 100), 0).astype(np.float32)
        p["pload"] = np.where(on, rng.uniform(0.3, 0.8), 0.02).astype(np.float32)
        p["sm"] = (p["pload"] * 0.6).astype(np.float32)
        p["tensor"] = (p["pload"] * 0.3).astype(np.float32)
        p["dram"] = (p["pload"] * 0.3).astype(np.float32)
        p["nvl"] = np.where(on, 5e9 if multi else 1e9, 0).astype(np.float32)
        p["pcie_tx"] = np.full(length, 5e7, dtype=np.float32)
        p["pcie_rx"] = np.full(length, 1e8, dtype=np.float32)
        p["fb"] = np.full(length, rng.uniform(5000, 40000), dtype=np.float32)
        p["cpu"] = np.where(on, 6.0, 2.0).astype(np.float32)
        p["hostmem"] = np.full(length, rng.uniform(5e10, 2e11), dtype=np.float32)
        p["ib"] = np.where(on, 1e9 if multi else 1e6, 1e5).astype(np.float32)
        p["eth"] = np.full(length, 1e7, dtype=np.float32)
    # startup: loading data / compiling, memory ramps up
    if su > 0:
        p["util"][:su] = rng.uniform(0, 30, su)
        p["pload"][:su] = 0.08
        p["sm"][:su] = 0.02
        p["tensor"][:su] = 0
        p["nvl"][:su] = 0
        p["ib"][:su] = 1e6
        p["fb"][:su] *= np.linspace(0.05, 1.0, su)
        p["eth"][:su] = 8e8
    if j.hang_start >= 0:  # NCCL wait: kernels spinning, little power
        h = j.hang_start - j.start
        if 0 <= h < length:
            p["util"][h:] = 100
            p["pload"][h:] = 0.13
            p["sm"][h:] = 0.015
            p["tensor"][h:] = 0
            p["dram"][h:] = 0.001
            p["nvl"][h:] = 0
            p["ib"][h:] = 1e4
            p["pcie_tx"][h:] = 1e5
            p["pcie_rx"][h:] = 1e5
            p["cpu"][h:] = 16
    return p


@dataclass
class Telemetry:
    gpu: dict[str, np.ndarray]
    node: dict[str, np.ndarray]
    gpu_valid: np.ndarray  # (NG, T) series present
    xid_valid: np.ndarray  # (NG, T) the XID gauge outlives a GPU that fell off the bus a while
    dcgm_up: np.ndarray  # (N, T) scrape succeeded
    node_up: np.ndarray
    glob_ok: np.ndarray  # (T,) prometheus was running
    phase_dcgm: np.ndarray
    phase_node: np.ndarray


def build_telemetry(sim: Sim) -> Telemetry:
    rng = np.random.default_rng([int(sim.rng.integers(1 << 31)), 99])
    N, G, T = sim.nodes, sim.gpus, sim.steps
    NG = N * G
    pm = 60.0 / sim.interval
    f32 = np.float32

    nd = {s: np.zeros((N, T), dtype=f32) for s in NODE_SIGNALS}
    nd["cpu"][:] = 0.6
    nd["hostmem"][:] = 3e10
    nd["ib"][:] = 2e4
    nd["eth"][:] = 2e5
    for j in sim.jobs:
        if j.end <= j.start:
            continue
        pat = _job_pattern(sim, j, rng)
        for sig in NODE_SIGNALS:
            nd[sig][j.nodes, j.start:j.end] = pat[sig][None, :]
    # job-common signals are identical across nodes; add small per-node deviations
    busy_n = sim.job_of >= 0

    def rep(a: np.ndarray) -> np.ndarray:
        return np.repeat(a, G, axis=0)

    busy = rep(busy_n)
    gpu_ix = np.tile(np.arange(G), N)
    noise = rng.standard_normal((NG, T), dtype=f32)

    util = rep(nd["util"]) + noise * np.where(busy, 0.7, 0.0).astype(f32)
    util = np.clip(np.rint(util), 0, 100)
    pl = rep(nd["pload"]) * (1 + 0.03 * rng.standard_normal((NG, 1))).astype(f32)
    peak = rng.uniform(655, 700, (NG, 1)).astype(f32)
    idle_w = rng.uniform(64, 82, (NG, 1)).astype(f32)
    psig = rng.uniform(3, 9, (NG, 1)).astype(f32)
    psig[rng.random(NG) < 0.03] *= 3  # benign: some GPUs are just noisier
    power = idle_w + (peak - idle_w) * pl + noise[::-1] * psig
    sm = np.clip(rep(nd["sm"]) * (1 + 0.02 * noise), 0, 1)
    tensor = np.clip(rep(nd["tensor"]) * (1 + 0.03 * noise[:, ::-1]), 0, 1)
    dram = np.clip(rep(nd["dram"]) * (1 + 0.03 * noise), 0, 1)
    nvl = np.clip(rep(nd["nvl"]) * (1 + 0.05 * noise), 0, None)
    pcie_tx = np.clip(rep(nd["pcie_tx"]) * (1 + 0.1 * noise[::-1]), 1e4, None)
    pcie_rx = np.clip(rep(nd["pcie_rx"]) * (1 + 0.1 * noise), 1e4, None)
    fb = rep(nd["fb"]) + np.where(busy, rng.uniform(-400, 400, (NG, 1)), 0).astype(f32)
    fb = np.clip(fb, 0, 81000)
    throttle = np.where(util < 1, 1, 0).astype(np.int32)
    sm_clock = np.where(util > 2, 1980.0, 345.0).astype(f32)
    hw_slow = np.zeros((NG, T), dtype=bool)
    mem_off = np.zeros((NG, T), dtype=f32)
    temp_add = np.zeros((NG, T), dtype=f32)
    xid = np.zeros((NG, T), dtype=f32)
    sbe_inc = np.zeros((NG, T), dtype=f32)
    dbe_inc = np.zeros((NG, T), dtype=f32)
    replay_inc = np.zeros((NG, T), dtype=f32)
    crc_inc = np.zeros((NG, T), dtype=f32)
    remap_c_inc = np.zeros((NG, T), dtype=f32)
    remap_u_inc = np.zeros((NG, T), dtype=f32)
    link_w = np.full((NG, T), 16, dtype=f32)
    gone = np.zeros((NG, T), dtype=bool)

    # ---- ambient: rack cooling, daily cycle, a hot node, CRAC events -----------------------
    tday = np.arange(T) * sim.interval / 86400.0
    amb = 23 + rng.uniform(-1.5, 1.5, (N, 1)) + 0.8 * np.sin(2 * np.pi * (tday[None, :] - 0.3))
    hot = int(rng.integers(N))
    amb[hot] += 5.0
    racks = np.arange(N) // 16
    for _ in range(rng.poisson(sim.steps / (86400 / sim.interval) * 0.4) + 1):
        r = int(rng.integers(racks.max() + 1))
        s = int(rng.integers(T))
        ln = int(rng.uniform(5, 30) * pm)
        amb[racks == r, s:s + ln] += rng.uniform(3, 6)
    # ---- benign per-GPU events ----------------------------------------------------------
    days = T / (86400 / sim.interval)
    for _ in range(rng.poisson(NG * days * 0.01) + 2):  # single SBE blips
        sbe_inc[rng.integers(NG), rng.integers(T)] += rng.choice([1, 1, 1, 2])
    for _ in range(rng.poisson(N * days * 0.15) + 2):  # short temperature spikes
        r, s = int(rng.integers(NG)), int(rng.integers(T))
        temp_add[r, s:s + int(rng.integers(2, 7))] += rng.uniform(7, 15)
    ticker = int(rng.integers(NG))  # PCIe replay ticks once per day on one GPU
    for d in range(int(np.ceil(days))):
        k = int((d + rng.uniform(0.2, 0.8)) * 86400 / sim.interval)
        if k < T:
            replay_inc[ticker, k] += 1
    bg_replay = rng.random(NG) < 0.05
    replay_inc[bg_replay] += rng.random((int(bg_replay.sum()), T)) < sim.interval / (3 * 86400)
    crc_slow = int(rng.integers(NG))  # benign: slowly growing CRC count
    crc_inc[crc_slow] += rng.random(T) < 0.004
    for _ in range(max(1, rng.poisson(days * 0.2))):  # benign XID 63 row remap event
        r, k = int(rng.integers(NG)), int(rng.integers(T))
        remap_c_inc[r, k] += 1
        n, g = divmod(r, G)
        sim.log(n, sim.ts(k), f"NVRM: Xid (PCI:0000:{PCI_BUS[g % 16]}:00): 63, pid="
                f"{int(rng.integers(2000, 60000))}, name=python3, {XID_TEXT[63]}")
    # benign power-cap throttle episodes on high-power GPUs during heavy phases
    for _ in range(rng.poisson(days * 6)):
        r = int(rng.integers(NG))
        s = int(rng.integers(T))
        e = s + int(rng.uniform(2, 20) * pm)
        sl = slice(s, e)
        m = util[r, sl] > 90
        power[r, sl] = np.where(m, 699.0 + rng.normal(0, 0.6, m.size), power[r, sl])
        throttle[r, sl] |= np.where(m, 4, 0).astype(np.int32)
        sm_clock[r, sl] = np.where(m, 1755.0 + 15 * rng.integers(0, 12, m.size), sm_clock[r, sl])

    fan_off = np.zeros((1, 1), dtype=f32)
    d_arr = {"util": util, "power": power, "sm": sm, "sm_clock": sm_clock, "replay_inc": replay_inc,
             "remap_c_inc": remap_c_inc, "sbe_inc": sbe_inc, "temp_add": temp_add}
    if sim.style == "d":
        fan_off = gen_d.apply_benign(sim, d_arr, rng, xid)
    # ---- failures: precursors and aftermath ------------------------------------------------
    for f in sim.failures:
        r, k, n = f["row"], f["k"], f["node"]
        a = max(0, k - f["lead"])
        L = k - a
        jid_at = sim.job_of[n, a:k]
        for shape in f["shapes"]:
            if sim.style == "d":
                gen_d.apply_failure(shape, f, d_arr, sim, rng)
            elif shape == "sbe_exp":
                tot = rng.uniform(15, 400)
                tau = rng.uniform(0.12, 0.35) * L
                lamb = np.exp((np.arange(L) - L) / tau)
                lamb *= tot / lamb.sum()
                sbe_inc[r, a:k] += rng.poisson(lamb)
            elif shape == "memtemp_step":
                s = a + int(rng.uniform(0, 0.4) * L)
                mem_off[r, s:f["rep_s"]] += rng.uniform(4, 10)
            elif shape == "xid63_log":
                for s, _e in _episodes(rng, a, k, int(rng.integers(1, 5)), 1, 1):
                    remap_c_inc[r, s] += 1
                    sim.log(n, sim.ts(s), f"NVRM: Xid (PCI:0000:{PCI_BUS[f['gpu'] % 16]}:00): 63,"
                            f" pid={int(rng.integers(2000, 60000))}, name=python3, {XID_TEXT[63]}")
            elif shape == "util_stalls":
                for s, e in _episodes(rng, a, k, int(rng.integers(4, 14)), 1, 5):
                    util[r, s:e] = rng.uniform(0, 10)
                    power[r, s:e] = idle_w[r, 0] + rng.uniform(5, 30)
                    sm[r, s:e] = 0.01
                    jid = int(jid_at[s - a])
                    if jid >= 0:  # the rest of the job waits in NCCL: util stays, power drops
                        others = np.flatnonzero(sim.job_of[:, s] == jid)
                        rows = (others[:, None] * G + np.arange(G)[None, :]).ravel()
                        rows = rows[rows != r]
                        power[rows, s:e] = power[rows, s:e] * 0.5 + 30
                        sm[rows, s:e] = 0.03
                        nvl[rows, s:e] *= 0.05
            elif shape == "power_var":
                ramp = np.linspace(0, 1, L) * rng.uniform(30, 70)
                power[r, a:k] += ramp * rng.standard_normal(L)
            elif shape == "throttle":
                thermal = rng.random() < 0.5
                for s, e in _episodes(rng, a, k, int(rng.integers(2, 8)), 2, int(6 * pm)):
                    sm_clock[r, s:e] = 1005 + 15 * rng.integers(0, 30)
                    power[r, s:e] *= 0.75
                    hw_slow[r, s:e] = True
                    throttle[r, s:e] |= 0x40 if thermal else 0x8
                    if thermal:
                        temp_add[r, s:e] += rng.uniform(6, 12)
            elif shape == "pcie_burst":
                ev = _episodes(rng, a, k, int(rng.integers(3, 15)), 1, 1)
                for i, (s, _e) in enumerate(sorted(ev)):
                    replay_inc[r, s] += int(5 + rng.integers(0, 20) * (i + 1) ** 1.5)
                    if rng.random() < 0.5:
                        ts = sim.ts(s)
                        bus = PCI_BUS[f["gpu"] % 16]
                        sim.log(n, ts, f"pcieport 0000:{int(bus, 16) - 1:02x}:01.0: AER: Corrected"
                                f" error received: 0000:{bus}:00.0")
                        sim.log(n, ts, f"nvidia 0000:{bus}:00.0: PCIe Bus Error: severity="
                                "Corrected, type=Data Link Layer, (Transmitter ID)")
                if rng.random() < 0.5:
                    link_w[r, a + int(rng.uniform(0.3, 0.9) * L):f["rep_s"]] = 8
            elif shape == "nvlink_crc":
                tot = rng.uniform(50, 5000)
                lamb = np.exp((np.arange(L) - L) / (rng.uniform(0.15, 0.4) * L))
                crc_inc[r, a:k] += rng.poisson(lamb * tot / lamb.sum())
                nvl[r, a:k] *= 1 - rng.uniform(0.05, 0.2) * np.linspace(0, 1, L)
        # aftermath
        x = f["xid"]
        hold = min(T, k + 1 + int(rng.uniform(10, 60) * pm))
        xid[r, k + 1:min(hold, f["rep_s"])] = x
        if x == 79:
            gone[r, k + 1:f["rep_e"]] = True
        if x in (48, 95, 94):
            dbe_inc[r, min(k + 1, T - 1)] += 1
        if x in (48, 64, 95):
            remap_u_inc[r, min(k + 1, T - 1)] += 1
        d = f["death"]
        util[r, k + 1:d] = 0
        power[r, k + 1:d] = idle_w[r, 0] + 15
        sm[r, k + 1:d] = 0
    for j in sim.jobs:  # application XIDs: every GPU of every node of the job
        if j.ended_by == "app_xid" and j.app_xid is not None:
            k = j.app_xid[0]
            rows = (j.nodes[:, None] * G + np.arange(G)[None, :]).ravel()
            xid[rows, k + 1:min(T, k + 1 + int(rng.uniform(5, 20) * pm))] = j.app_xid[1]

    # ---- derived physical signals ----------------------------------------------------------
    power = np.clip(power, 50, 700)
    amb_g = rep(amb.astype(f32)) + rng.uniform(-3, 3, (NG, 1)).astype(f32)
    amb_g += (gpu_ix[:, None] % 4 == 3) * 2.0  # downstream GPUs in the airflow run warmer
    eq = amb_g + 0.062 * power + temp_add
    temp = smooth_ar1(eq, 1 - np.exp(-sim.interval / 120.0)) + 0.35 * noise[:, ::-1]
    memtemp = temp + 4 + 9 * dram + rng.uniform(-2, 3, (NG, 1)) + mem_off
    sm_clock = np.where(util > 2, sm_clock, 345.0)
    sm_clock = np.where(hw_slow, sm_clock, np.where(util > 2, sm_clock, 345.0))
    pcap = (throttle & 4) > 0
    copy_util = np.clip(np.rint(dram * 100 + 0.5 * noise), 0, 100)

    # ---- validity: reboots, scrape gaps, prometheus gaps ----------------------------------
    down = sim.down
    glob_ok = np.ones(T, dtype=bool)
    for _ in range(max(1, rng.poisson(days * 0.25))):
        s = int(rng.integers(T))
        glob_ok[s:s + int(rng.uniform(2, 15) * pm)] = False
    dcgm_up = ~down.copy()
    node_up = ~down.copy()
    for arr in (dcgm_up, node_up):
        for _ in range(rng.poisson(N * days * 1.5)):
            n, s = int(rng.integers(N)), int(rng.integers(T))
            arr[n, s:s + int(rng.integers(1, 5))] = False
    gpu_valid = rep(dcgm_up) & ~gone & glob_ok[None, :]
    xid_valid = rep(dcgm_up) & ~(gone & (xid == 0)) & glob_ok[None, :]

    # counter resets at every reboot
    reset_n = np.zeros((N, T), dtype=bool)
    for n, _s, e in sim.reboots:
        if e < T:
            reset_n[n, e] = True
            sim.log(n, sim.ts(e) - 25, "Linux version 5.15.0-125-generic (buildd@lcy02-amd64-045) "
                    "(gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0) #135-Ubuntu SMP")
            sim.log(n, sim.ts(e) - 12, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
                    "535.161.08  Tue Feb 27 20:35:25 UTC 2024")
    reset = rep(reset_n)
    dt = float(sim.interval)
    live = rep(~down)
    energy = cumsum_resets(np.where(live, power * dt * 1000, 0), reset,
                           rng.uniform(1e9, 3e11, NG))
    gvals: dict[str, np.ndarray] = {
        "temp": np.rint(temp), "memtemp": np.rint(memtemp), "power": power, "energy": energy,
        "util": util, "copy_util": copy_util, "sm_clock": sm_clock,
        "mem_clock": np.full((1, 1), 2619.0), "fb_used": np.rint(fb),
        "fb_free": np.rint(81559 - 528 - fb), "xid": xid,
        "replay": cumsum_resets(replay_inc, reset, rng.integers(0, 3, NG) * (rng.random(NG) < .2)),
        "sbe": cumsum_resets(sbe_inc, reset, np.zeros(NG)),
        "dbe": cumsum_resets(dbe_inc, reset, np.zeros(NG)),
        "remap_c": np.cumsum(remap_c_inc, axis=1) + (rng.random((NG, 1)) < 0.1),
        "remap_u": np.cumsum(remap_u_inc, axis=1),
        "throttle": throttle.astype(f32),
        "pviol": cumsum_resets(np.where(pcap, dt * 1e6, 0), reset, rng.uniform(0, 5e9, NG)),
        "tviol": cumsum_resets(np.where(hw_slow, dt * 1e6, 0), reset, np.zeros(NG)),
        "gr_active": np.clip(util / 100 * 0.985, 0, 1), "sm_active": sm,
        "sm_occ": np.clip(sm * 0.42, 0, 1), "tensor": tensor, "dram": dram,
        "pcie_tx": np.rint(pcie_tx), "pcie_rx": np.rint(pcie_rx),
        "nvl_tx": np.rint(nvl), "nvl_rx": np.rint(nvl * (1 + 0.01 * noise[::-1])),
        "crc": cumsum_resets(crc_inc, reset, np.zeros(NG)),
        # vendor (style c)
        "fan_pct": np.clip(np.rint(30 + 1.2 * np.clip(temp - 30, 0, None) + fan_off), 10, 100),
        "fan": np.rint(2900 + 95 * np.clip(temp - 30, 0, None) + 40 * noise),
        "ecc_corr": cumsum_resets(sbe_inc, reset, rng.integers(0, 50, NG).astype(float)),
        "link_w": link_w,
        "vrm": np.rint(temp + 8 + 0.01 * power),
        "acme_crc": cumsum_resets(crc_inc, reset, np.zeros(NG)),
    }
    # ---- node level ------------------------------------------------------------------------
    reset_node = reset_n
    boot = np.zeros((N, T))
    last_boot = BASE_T0 - rng.uniform(2, 60, N) * 86400
    boot_ev = sorted((e, n) for n, _s, e in sim.reboots if e < T)
    boot[:] = np.floor(last_boot)[:, None]
    for e, n in boot_ev:
        boot[n, e:] = BASE_T0 + e * sim.interval - 40
    nodeg: dict[str, np.ndarray] = {
        "load1": np.round(np.clip(nd["cpu"] * (1 + 0.1 * rng.standard_normal((N, T))), 0, None),
                          2),
        "memavail": np.rint(2.06e12 - nd["hostmem"] * (1 + 0.02 * rng.standard_normal((N, 1)))),
        "ib_rx": cumsum_resets(np.where(~down, nd["ib"] * dt, 0), reset_node,
                               rng.uniform(1e14, 1e16, N)),
        "ib_tx": cumsum_resets(np.where(~down, nd["ib"] * dt * 1.01, 0), reset_node,
                               rng.uniform(1e14, 1e16, N)),
        "eth_rx": cumsum_resets(np.where(~down, nd["eth"] * dt, 0), reset_node,
                                rng.uniform(1e12, 1e14, N)),
        "cpu_temp": np.rint(smooth_ar1(amb + 14 + 0.5 * nd["cpu"], 0.2)
                            + 0.5 * rng.standard_normal((N, T))),
        "boot": boot,
    }
    return Telemetry(gvals, nodeg, gpu_valid, xid_valid, dcgm_up, node_up, glob_ok,
                     rng.integers(0, sim.interval, N), rng.integers(0, sim.interval, N))


# --------------------------------------------------------------------------------------------
# metric catalogue per style
# --------------------------------------------------------------------------------------------


@dataclass
class Family:
    name: str
    mtype: str  # gauge | counter
    help: str
    src: str  # key into telemetry dict, or noise spec
    scope: str  # gpu | vendor | node | up | noise
    dec: int = 0
    variants: list[tuple[str, str]] | None = None  # (src, extra labels) rendered in order


DCGM_ALL: list[tuple[str, str, str, str, int]] = [
    # name, type, key, help, decimals
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "temp", "GPU temperature (in C).", 0),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "memtemp", "Memory temperature (in C).", 0),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "power", "Power draw (in W).", 3),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "energy",
     "Total energy consumption since boot (in mJ).", 0),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "util", "GPU utilization (in %).", 0),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "copy_util", "Memory utilization (in %).", 0),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "sm_clock", "SM clock frequency (in MHz).", 0),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "mem_clock", "Memory clock frequency (in MHz).", 0),
    ("DCGM_FI_DEV_FB_USED", "gauge", "fb_used", "Framebuffer memory used (in MiB).", 0),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "fb_free", "Framebuffer memory free (in MiB).", 0),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "xid", "Value of the last XID error encountered.", 0),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "gauge", "replay", "Total number of PCIe retries.", 0),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gauge", "sbe", "Total number of single-bit volatile ECC "
     "errors.", 0),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gauge", "dbe", "Total number of double-bit volatile ECC "
     "errors.", 0),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "gauge", "remap_c", "Number of remapped rows for "
     "correctable errors", 0),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "gauge", "remap_u", "Number of remapped rows for "
     "uncorrectable errors", 0),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "throttle", "Current clock throttle reasons "
     "(bitmask).", 0),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "pviol", "Throttling duration due to power "
     "constraints (in us).", 0),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "tviol", "Throttling duration due to thermal "
     "constraints (in us).", 0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "gr_active", "Ratio of time the graphics engine is "
     "active.", 4),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "sm_active", "The ratio of cycles an SM has at least 1 "
     "warp assigned.", 4),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "sm_occ", "The ratio of number of warps resident on an "
     "SM.", 4),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "tensor", "Ratio of cycles the tensor (HMMA) pipe "
     "is active.", 4),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "dram", "Ratio of cycles the device memory interface is "
     "active sending or receiving data.", 4),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "pcie_tx", "The rate of data transmitted over the PCIe "
     "bus - including both protocol headers and data payloads - in bytes per second.", 0),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "pcie_rx", "The rate of data received over the PCIe "
     "bus - including both protocol headers and data payloads - in bytes per second.", 0),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "nvl_tx", "The rate of data transmitted over NVLink, "
     "not including protocol headers, in bytes per second.", 0),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", "nvl_rx", "The rate of data received over NVLink, "
     "not including protocol headers, in bytes per second.", 0),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "gauge", "crc", "Total number of NVLink "
     "flow-control CRC errors.", 0),
]
DCGM_SUBSET_C = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                 "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL",
                 "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS",
                 "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                 "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_PROF_SM_ACTIVE",
                 "DCGM_FI_PROF_NVLINK_TX_BYTES")
VENDOR_C: list[tuple[str, str, str, str, int]] = [
    ("acme_gpu_fan_rpm", "gauge", "fan", "Fan speed of the GPU baseboard slot.", 0),
    ("acme_hbm_ecc_corrected", "counter", "ecc_corr", "HBM corrected ECC events.", 0),
    ("acme_gpu_pcie_link_width", "gauge", "link_w", "Negotiated PCIe link width.", 0),
    ("acme_gpu_vrm_temp_celsius", "gauge", "vrm", "GPU voltage regulator temperature.", 0),
    ("acme_nvlink_crc_errors", "counter", "acme_crc", "NVLink CRC errors seen by the switch.", 0),
]
NODE_FAMS: list[tuple[str, str, str, str, int]] = [
    ("node_load1", "gauge", "load1", "1m load average.", 2),
    ("node_memory_MemAvailable_bytes", "gauge", "memavail", "Memory information field "
     "MemAvailable_bytes.", 0),
    ("node_network_receive_bytes", "counter", "ib_rx", "Network device statistic receive_bytes.",
     0),
    ("node_network_transmit_bytes", "counter", "ib_tx", "Network device statistic "
     "transmit_bytes.", 0),
    ("node_hwmon_temp_celsius", "gauge", "cpu_temp", "Hardware monitor for temperature (input)",
     0),
    ("node_boot_time_seconds", "gauge", "boot", "Node boot time, in unixtime.", 0),
]
NOISE_NAMES = (
    "node_filefd_allocated", "node_procs_running", "node_procs_blocked", "node_entropy_avail_bits",
    "node_context_switches", "node_intr", "node_forks", "node_sockstat_TCP_inuse",
    "node_sockstat_TCP_tw", "node_netstat_Tcp_CurrEstab", "node_nf_conntrack_entries",
    "node_filesystem_avail_bytes", "node_filesystem_files_free", "node_disk_io_now",
    "node_disk_read_bytes", "node_disk_written_bytes", "node_vmstat_pgfault",
    "node_vmstat_pgmajfault", "node_memory_Cached_bytes", "node_memory_Buffers_bytes",
    "node_memory_Dirty_bytes", "node_memory_Slab_bytes", "node_memory_SwapFree_bytes",
    "node_timex_offset_seconds", "node_timex_maxerror_seconds", "node_textfile_scrape_error",
    "node_scrape_collector_duration_seconds", "process_resident_memory_bytes",
    "process_open_fds", "process_cpu_seconds", "go_goroutines", "go_memstats_heap_inuse_bytes",
    "go_gc_duration_seconds_sum", "promhttp_metric_handler_requests_in_flight",
    "acme_bmc_psu0_input_watts", "acme_bmc_psu1_input_watts", "acme_bmc_psu2_input_watts",
    "acme_bmc_psu0_voltage", "acme_bmc_fan0_rpm", "acme_bmc_fan1_rpm", "acme_bmc_fan2_rpm",
    "acme_bmc_fan3_rpm", "acme_bmc_inlet_temp_celsius", "acme_bmc_exhaust_temp_celsius",
    "acme_bmc_sel_entries", "acme_bmc_sensor_read_errors", "acme_nvme0_media_errors",
    "acme_nvme0_percentage_used", "acme_nvme0_temperature_celsius", "acme_ib_port_rcv_errors",
    "acme_ib_port_xmit_discards", "acme_ib_link_downed", "acme_ib_symbol_errors",
    "acme_lustre_client_read_bytes", "acme_lustre_client_rpc_inflight", "slurm_node_cpu_alloc",
    "slurm_node_mem_alloc_bytes", "kubelet_running_pods", "ipmi_chassis_power_state",
    "ipmi_dcmi_power_consumption_watts",
)


def families_for(style: str) -> list[Family]:
    fams: list[Family] = []
    for name, mt, key, hlp, dec in DCGM_ALL:
        if style == "c" and name not in DCGM_SUBSET_C:
            continue
        fams.append(Family(name, mt, hlp, key, "gpu", dec))
    if style == "c":
        fams += [Family(n, t, h, k, "vendor", d) for n, t, k, h, d in VENDOR_C]
    if style == "d":
        fams.append(Family("DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed (in %).", "fan_pct", "gpu"))
    fams.append(Family("up", "gauge", "", "up", "up", 0))
    variants = {"ib_rx": [("ib_rx", ',device="ibp0"'), ("eth_rx", ',device="eth0"')],
                "ib_tx": [("ib_tx", ',device="ibp0"')],
                "cpu_temp": [("cpu_temp", ',chip="platform_coretemp_0",sensor="temp1"')]}
    for name, mt, key, hlp, dec in NODE_FAMS:
        fams.append(Family(name, mt, hlp, key, "node", dec, variants.get(key)))
    if style == "c":
        for i, name in enumerate(NOISE_NAMES):
            fams.append(Family(name, "gauge", "", f"noise{i}", "noise", 2 if i % 3 == 0 else 0))
    else:  # a handful of irrelevant metrics in every style
        for i, name in enumerate(NOISE_NAMES[:3]):
            fams.append(Family(name, "gauge", "", f"noise{i}", "noise", 0))
    return fams


def noise_series(seed: int, i: int, N: int, T: int, interval: int) -> np.ndarray:
    """Irrelevant but realistic-looking node-level signal, with its own unrelated anomalies."""
    rng = np.random.default_rng([seed, 5151, i])
    kind = i % 6
    x = np.arange(T)[None, :] * interval / 86400.0
    scale = 10 ** rng.uniform(0, 9)
    if kind == 0:  # random walk
        v: np.ndarray = np.cumsum(rng.normal(0, 0.01, (N, T)), axis=1) + 1
    elif kind == 1:  # daily cycle
        v = 1 + 0.3 * np.sin(2 * np.pi * (x + rng.random((N, 1)))) + rng.normal(0, .05, (N, T))
    elif kind == 2:  # steps
        v = 1 + np.cumsum(rng.random((N, T)) < 0.0005, axis=1) * rng.uniform(0.05, 0.5)
    elif kind == 3:  # spiky
        v = 1 + (rng.random((N, T)) < 0.002) * rng.uniform(2, 10, (N, T))
    elif kind == 4:  # mostly constant with occasional change
        v = np.ones((N, T)) * rng.integers(1, 5, (N, 1))
        for _ in range(3):
            n, s = int(rng.integers(N)), int(rng.integers(T))
            v[n, s:] += 1
    else:  # noisy gauge
        v = np.abs(1 + rng.normal(0, 0.2, (N, T)))
    out: np.ndarray = np.abs(v * scale)
    return out


# --------------------------------------------------------------------------------------------
# OpenMetrics rendering (vectorised)
# --------------------------------------------------------------------------------------------

_POW10 = 10 ** np.arange(19, dtype=np.int64)


def _digit_field(q: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """q int64 >= 0 (M,), returns ascii digits (M, width) right-aligned and a validity mask."""
    m = q.shape[0]
    out = np.empty((m, width), dtype=np.uint8)
    for j in range(width):
        out[:, j] = (q // _POW10[width - 1 - j]) % 10 + 48
    nd = np.ones(m, dtype=np.int64)
    for p in range(1, width):
        nd += q >= _POW10[p]
    mask = np.arange(width)[None, :] >= (width - nd)[:, None]
    return out, mask


@dataclass
class Block:
    prefixes: list[bytes]
    values: np.ndarray  # (R, W) float
    valid: np.ndarray  # (R, W) bool
    ts: np.ndarray  # (R, W) int64
    dec: int


def render(b: Block) -> bytes:
    R, W = b.values.shape
    if R == 0 or not b.valid.any():
        return b""
    keep = b.valid.any(axis=1)
    if not keep.all():
        idx = np.flatnonzero(keep)
        b = Block([b.prefixes[i] for i in idx], b.values[idx], b.valid[idx], b.ts[idx], b.dec)
        R = len(b.prefixes)
    sel = b.valid.ravel()
    M = int(sel.sum())
    v = np.nan_to_num(b.values.ravel()[sel].astype(np.float64))
    q = np.rint(np.abs(v) * (10 ** b.dec)).astype(np.int64)
    neg = (v < 0) & (q > 0)
    ip = q // (10 ** b.dec)
    wi = max(1, len(str(int(ip.max())))) if M else 1
    idig, imask = _digit_field(ip, wi)
    parts: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    plen = np.array([len(p) for p in b.prefixes])
    pmax = int(plen.max())
    pbuf = np.zeros((R, pmax), dtype=np.uint8)
    for i, p in enumerate(b.prefixes):
        pbuf[i, :len(p)] = np.frombuffer(p, dtype=np.uint8)
    pmask = np.arange(pmax)[None, :] < plen[:, None]
    rows = np.repeat(np.arange(R), W)[sel]
    if (plen == pmax).all():
        parts.append(pbuf[rows])
        masks.append(np.ones((M, pmax), dtype=bool))
    else:
        parts.append(pbuf[rows])
        masks.append(pmask[rows])
    if neg.any():
        parts.append(np.full((M, 1), 45, dtype=np.uint8))
        masks.append(neg[:, None])
    parts.append(idig)
    masks.append(imask)
    if b.dec:
        fdig, _ = _digit_field(q % (10 ** b.dec), b.dec)
        parts.append(np.full((M, 1), 46, dtype=np.uint8))
        masks.append(np.ones((M, 1), dtype=bool))
        parts.append(fdig)
        masks.append(np.ones((M, b.dec), dtype=bool))
    tsd, _ = _digit_field(b.ts.ravel()[sel], 10)
    parts.append(np.full((M, 1), 32, dtype=np.uint8))
    parts.append(tsd)
    parts.append(np.full((M, 1), 10, dtype=np.uint8))
    masks.append(np.ones((M, 12), dtype=bool))
    buf = np.concatenate(parts, axis=1)
    msk = np.concatenate(masks, axis=1)
    if msk.all():
        return bytes(buf.tobytes())
    return bytes(buf[msk].tobytes())


# --------------------------------------------------------------------------------------------
# writer
# --------------------------------------------------------------------------------------------


@dataclass
class SeriesTable:
    rows: np.ndarray  # row in the state array
    nodes: np.ndarray
    labels: list[str]
    k0: np.ndarray  # present in [k0, k1)
    k1: np.ndarray
    jid: np.ndarray  # -2: any; otherwise only where job_of[node] == jid (pod attribution)


def _table(items: list[tuple[int, int, str, int, int, int]]) -> SeriesTable:
    arr = np.array([(r, n, k0, k1, j) for r, n, _lb, k0, k1, j in items], dtype=np.int64)
    return SeriesTable(arr[:, 0], arr[:, 1], [it[2] for it in items], arr[:, 2], arr[:, 3],
                       arr[:, 4])


class Writer:
    def __init__(self, sim: Sim, tel: Telemetry, seed: int) -> None:
        self.sim, self.tel, self.seed = sim, tel, seed
        self.fams = families_for(sim.style)
        self.noise_cache: dict[str, np.ndarray] = {}
        self.tables = self._series_tables()

    def _series_tables(self) -> dict[str, SeriesTable]:
        sim = self.sim
        st = sim.style
        N, G, T = sim.nodes, sim.gpus, sim.steps
        gpu: list[tuple[int, int, str, int, int, int]] = []
        vendor: list[tuple[int, int, str, int, int, int]] = []
        node: list[tuple[int, int, str, int, int, int]] = []
        up: list[tuple[int, int, str, int, int, int]] = []
        repl = dict(sim.replaced)
        for n in range(N):
            h, ip = sim.hostnames[n], sim.ips[n]
            for g in range(G):
                r = n * G + g
                segs = [(0, repl.get(r, T), sim.uuid_of(r))]
                if r in repl:
                    segs.append((repl[r], T, sim.new_uuids[r]))
                for k0, k1, u in segs:
                    if st == "a":
                        lab = f'gpu="{g}",UUID="{u}",Hostname="{h}"'
                    elif st == "b":
                        lab = f'UUID="{u}",instance="{ip}:9400"'
                    else:
                        lab = f'gpu="{g}",UUID="{u}",Hostname="{h}",device="nvidia{g}"'
                    if st == "c":  # k8s pod attribution: series churn with jobs
                        jids = np.unique(sim.job_of[n, k0:k1])
                        for jid in jids.tolist():
                            if jid < 0:
                                gpu.append((r, n, lab, k0, k1, -1))
                                continue
                            j = sim.jobs[jid]
                            rank = int(np.flatnonzero(j.nodes == n)[0])
                            pod = f"{j.kind}-{jid:04d}-worker-{rank}"
                            gpu.append((r, n, f'{lab},namespace="ml",pod="{pod}"',
                                        max(k0, j.start), min(k1, j.end), jid))
                    else:
                        gpu.append((r, n, lab, k0, k1, -2))
                    vendor.append((r, n, f'node="{h}",slot="{g}"', k0, k1, -2))
            inst = f"{h}:9100" if st != "b" else f"{ip}:9100"
            node.append((n, n, f'instance="{inst}",job="node"', 0, T, -2))
        for n in range(N):
            h, ip = sim.hostnames[n], sim.ips[n]
            di = f"{h}:9400" if st != "b" else f"{ip}:9400"
            up.append((n, n, f'instance="{di}",job="dcgm"', 0, T, -2))
        for n in range(N):
            up.append((n, n, node[n][2], 0, T, -3))  # -3 marks the node-exporter target
        return {"gpu": _table(gpu), "vendor": _table(vendor), "node": _table(node),
                "up": _table(up)}

    def _noise(self, key: str) -> np.ndarray:
        if key not in self.noise_cache:
            i = int(key[5:])
            self.noise_cache[key] = noise_series(self.seed, i, self.sim.nodes, self.sim.steps,
                                                 self.sim.interval)
        return self.noise_cache[key]

    def _block(self, f: Family, src: str, extra: str, ws: int, we: int) -> bytes:
        sim, tel = self.sim, self.tel
        scope = "node" if f.scope == "noise" else f.scope
        tb = self.tables[scope]
        sel = np.flatnonzero((tb.k0 < we) & (tb.k1 > ws))
        if sel.size == 0:
            return b""
        rows, nodes = tb.rows[sel], tb.nodes[sel]
        ks = np.arange(ws, we)
        valid = (ks[None, :] >= tb.k0[sel, None]) & (ks[None, :] < tb.k1[sel, None])
        jid = tb.jid[sel]
        if (jid >= -1).any():
            jo = sim.job_of[nodes, ws:we]
            valid &= (jid[:, None] < -1) | (jo == jid[:, None])
        glob = tel.glob_ok[ws:we][None, :]
        if scope in ("gpu", "vendor"):
            arr = tel.gpu[src]
            if arr.shape[1] == 1:
                vals = np.broadcast_to(arr[0, 0], valid.shape)
            else:
                vals = arr[rows, ws:we]
            valid &= (tel.xid_valid if src == "xid" else tel.gpu_valid)[rows, ws:we]
            phase = tel.phase_dcgm[nodes]
        elif scope == "up":
            is_d = jid == -2
            vals = np.where(is_d[:, None], tel.dcgm_up[nodes, ws:we], tel.node_up[nodes, ws:we])
            valid &= glob
            phase = np.where(is_d, tel.phase_dcgm[nodes], tel.phase_node[nodes])
        else:
            arr = tel.node[src] if f.scope == "node" else self._noise(src)
            vals = arr[rows, ws:we]
            valid &= tel.node_up[rows, ws:we] & glob
            phase = tel.phase_node[nodes]
        sname = f.name + ("_total" if f.mtype == "counter" else "")
        labels = [tb.labels[i] for i in sel]
        prefixes = [f"{sname}{{{lb}{extra}}} ".encode() for lb in labels]
        ts = BASE_T0 + ks[None, :] * sim.interval + phase[:, None]
        return render(Block(prefixes, np.asarray(vals, dtype=np.float64), valid, ts, f.dec))

    def window(self, w: int) -> bytes:
        per = WINDOW_S // self.sim.interval
        ws, we = w * per, min(self.sim.steps, (w + 1) * per)
        chunks: list[bytes] = []
        for f in self.fams:
            chunks.append(f"# TYPE {f.name} {f.mtype}\n".encode())
            if f.help:
                chunks.append(f"# HELP {f.name} {f.help}\n".encode())
            for src, extra in f.variants or [(f.src, "")]:
                chunks.append(self._block(f, src, extra, ws, we))
        return b"".join(chunks)


_STATE: dict[str, Any] = {}


def _write_window(w: int) -> tuple[int, int]:
    wr: Writer = _STATE["writer"]
    out: Path = _STATE["out"]
    data = wr.window(w) + b"# EOF\n"
    t0 = BASE_T0 + w * WINDOW_S
    if _STATE["gzip"]:
        with gzip.open(out / "metrics" / f"{t0}.om.gz", "wb", compresslevel=1) as gz:
            gz.write(data)
    else:
        (out / "metrics" / f"{t0}.om").write_bytes(data)
    return w, len(data)


def generate(out: Path, nodes: int = 64, gpus: int = 8, days: float = 7.0, seed: int = 0,
             interval_s: int = 30, style: str = "a", workers: int | None = None,
             gzip_metrics: bool = False, failure_rate: float | None = None) -> dict[str, Any]:
    """Generate a held-out dataset into `out`. Returns a summary dict (also in summary.json).

    gzip_metrics writes metrics/<t0>.om.gz instead of .om (about 20x smaller); failure_rate is
    hardware failures per day per 64 nodes (default 1.5; 8 for style d)."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}")
    if WINDOW_S % interval_s:
        raise ValueError("interval_s must divide 7200")
    out = Path(out)
    t_start = time.perf_counter()
    for sub in ("metrics", "kernel"):
        if (out / sub).exists():
            shutil.rmtree(out / sub)
        (out / sub).mkdir(parents=True)
    sim = simulate(nodes, gpus, days, seed, interval_s, style, failure_rate)
    t_sim = time.perf_counter()
    tel = build_telemetry(sim)
    t_tel = time.perf_counter()
    wr = Writer(sim, tel, seed)
    n_win = int(np.ceil(sim.steps * interval_s / WINDOW_S))
    _STATE.update(writer=wr, out=out, gzip=gzip_metrics)
    nw = workers if workers is not None else min(8, os.cpu_count() or 1)
    total = 0
    if nw > 1 and n_win > 1:
        ctx = mp.get_context("fork")
        with ctx.Pool(nw) as pool:
            for _w, sz in pool.imap_unordered(_write_window, range(n_win)):
                total += sz
    else:
        for w in range(n_win):
            total += _write_window(w)[1]
    t_write = time.perf_counter()
    # kernel logs (+ benign kernel chatter)
    rng = np.random.default_rng([seed, 4242])
    benign = ("mlx5_core 0000:0c:00.0 ibp0: Link up", "EXT4-fs (nvme0n1p2): re-mounted. Opts: "
              "(null). Quota mode: none.", "perf: interrupt took too long (2503 > 2500), lowering "
              "kernel.perf_event_max_sample_rate to 79750", "nvidia-nvswitch0: SXid (PCI:0000:05:"
              "00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
              "audit: type=1400 audit(0.0:123): apparmor=\"STATUS\" operation=\"profile_replace\"",
              "Buffer I/O error on dev loop7, logical block 0, async page read")
    for n in range(nodes):
        for _ in range(rng.poisson(days * 4)):
            sim.log(n, BASE_T0 + rng.uniform(0, days * 86400), str(rng.choice(benign)))
        lines = sorted(sim.klog[n])
        with open(out / "kernel" / f"{sim.hostnames[n]}.log", "w") as fh:
            for ts, text in lines:
                fh.write(f"{syslog_time(ts)} {sim.hostnames[n]} kernel: {text}\n")
    labels = sorted(sim.labels, key=lambda d: (d.get("time", d.get("start", 0)), d["type"]))
    with open(out / "labels.jsonl", "w") as fh:
        for d in labels:
            fh.write(json.dumps(d) + "\n")
    inv = {"style": style, "t0": BASE_T0, "interval_s": interval_s, "nodes": [
        {"hostname": sim.hostnames[n], "ip": sim.ips[n],
         "gpus": [sim.uuid_of(n * gpus + g) for g in range(gpus)]} for n in range(nodes)],
        "replaced": {sim.uuid_of(r): {"new_uuid": sim.new_uuids[r],
                                      "from": BASE_T0 + k * interval_s} for r, k in sim.replaced}}
    t_end = time.perf_counter()
    summary = {
        "style": style, "nodes": nodes, "gpus": gpus, "days": days, "seed": seed,
        "interval_s": interval_s, "windows": n_win, "metric_families": len(wr.fams),
        "metric_bytes_uncompressed": total, "jobs": len(sim.jobs),
        "failures": sum(1 for d in labels if d["type"] == "failure"),
        "app_xids": sum(1 for d in labels if d["type"] == "app_xid"),
        "maintenance": sum(1 for d in labels if d["type"] == "maintenance"),
        "seconds": {"simulate": round(t_sim - t_start, 2), "telemetry": round(t_tel - t_sim, 2),
                    "write_metrics": round(t_write - t_tel, 2), "total": round(t_end - t_start, 2)},
    }
    (out / "inventory.json").write_text(json.dumps(inv, indent=1))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _STATE.clear()
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--interval", type=int, default=30)
    ap.add_argument("--style", choices=STYLES, default="a")
    ap.add_argument("--workers", type=int, default=None, help="writer processes (default: cpus)")
    ap.add_argument("--gzip", action="store_true", help="write metrics/*.om.gz")
    ap.add_argument("--failure-rate", type=float, default=None,
                    help="per day per 64 nodes (default 1.5; style d: 8)")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    s = generate(a.out, a.nodes, a.gpus, a.days, a.seed, a.interval, a.style, a.workers,
                 a.gzip, a.failure_rate)
    json.dump(s, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
