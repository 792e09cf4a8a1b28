#!/usr/bin/env python3
"""Held-out GPU-cluster telemetry generator, "style e".

Simulates an HGX-H100 training cluster (8 GPUs per node, several nodes per rack) as scraped by
Prometheus from dcgm-exporter (port 9400) and node-exporter (port 9100), and writes OpenMetrics
files per 2-h window, kernel logs, ground-truth labels, an inventory and a summary.  Only numpy
and the standard library are used.  Everything is drawn from one seed (separate sub-streams per
subsystem), so a seed always gives the same cluster.

Workload.  A FIFO+backfill scheduler runs from 36 h before the observed window so the cluster is
in steady state at t0.  Jobs arrive as a Poisson stream (with a mild daily cycle) at 1.3x the
rate that would fill 65-90 % of the nodes, so a backlog builds; users cancel jobs queued for
more than 12 h.  Kinds: pretraining (2/4/8/16 nodes, at most half the cluster, lognormal
duration, median 6 h), fine-tuning (1-4 nodes,
median 2.5 h), evaluation/inference (1-2 nodes, median 50 min, bursty utilisation) and
interactive development (1 node, 1-8 GPUs, median 40 min, on/off utilisation).  Nodes are
allocated exclusively.  Training jobs checkpoint every 20-90 min (30 s-5 min of near-zero
utilisation and ~100-150 W on every GPU of the job at once) and pretraining/fine-tuning jobs run
evaluation phases every 1-6 h (5-20 min at 30-70 % utilisation).  Each job starts with a
2-10 min warm-up (memory fills, utilisation low).  6 % of jobs crash with an application XID
storm and 10 % end early without any XID.  When a GPU dies under a synchronous job the other
ranks spin in NCCL (utilisation 100 %, power ~130 W, tensor pipe idle) until the watchdog fires
after 10 or 30 min (20-90 s for NVLink errors, which NCCL notices at once).

Hardware failures.  Poisson, mean 4.1 per 16x8x2-day cluster (scaled with GPU-days), capped at
8, uniform in time.  The GPU is picked at that moment among nodes that are up and not already
awaiting repair or maintenance, a GPU running a job being three times as likely as an idle one.
Mix (weight, XID): fell off the bus 0.18 (79), NVLink
0.13 (74), GSP RPC timeout 0.12 (119), GSP error 0.05 (120), DBE 0.10 (48, sometimes followed
by 63), contained ECC 0.10 (94), uncontained ECC 0.06 (95), row-remap failure 0.07 (64), high
SBE rate 0.07 (92), PMU halt 0.04 (62).  After 79, and half of 119/120/62, the GPU drops out of
dcgm-exporter (only DCGM_FI_DEV_XID_ERRORS keeps reporting).  The node is drained; ops act
after a lognormal delay (median 1.5 h, 10 min-12 h) with a reboot/reset (median 25 min down) or
a GPU swap (median 3.5 h down, new UUID).  94 and 92 are repaired only about half of the time;
92 does not kill the job.  A per-type share of failures (10-50 %, ~38 % overall) has NO
precursor; the rest draw each of the type's usual precursors independently.

Precursor timing.  Every precursor has its own onset.  "Slow" precursors (PCIe replays,
correctable-ECC ramps, row-remap ramps, NVLink CRC) take a lead that is short with p=0.35
(lognormal median 25 min) and long otherwise (median 9 h, sigma 0.9), clipped to 5 min-44 h.
"Fast" precursors (power jitter, clock jitter, process stalls) are short with p=0.6 (median
15 min), otherwise median 3 h, clipped to 3 min-30 h.  Onsets may fall before t0 (the label's
lead_s is the true onset, not the observable one).  Intensity s ~ Beta(1.3, 2.0) (many weak
ones).  Event rates grow as exp(k (u - 1)) with u the fraction of the lead elapsed and
k ~ U(1.5, 4), so they are sparse at onset and densest just before the XID.
- pcie_replay: bursts at a final rate of 2-20/h x s, size lognormal (median 3 + 40 s) added to
  DCGM_FI_DEV_PCIE_REPLAY_COUNTER; half the bursts leave AER "Corrected error" kernel lines
  (rate-limited to one per minute).
- power_jitter: episodes (final rate 1-6/h x s, ~2 min long) where power gets extra noise of
  sd 25 + 90 s W (reduced when idle) and sometimes brief brake drops (throttle bit 0x80).
- clock_jitter: episodes where the SM clock falls to 50-92 % of its value, usually with the
  HW-slowdown throttle bit (0x8).
- process_stall: episodes (final rate 0.5-4/h x s, 30 s-3 min) where this GPU's utilisation
  falls to 0-25 % and power to idle while its job-mates keep 100 % utilisation but lose
  20-45 % of their power (they wait in collectives).  Invisible when the GPU is idle.
- ecc_sbe_ramp: volatile single-bit ECC counts at a final rate of 5-120/h x s, plus a few
  correctable row remaps (XID 63 in the log and the XID gauge).
- row_remap_ramp: 2-8 x s correctable row remaps spread over the lead (each an XID 63), with a
  modest SBE rate.  Ends with XID 64 and DCGM_FI_DEV_ROW_REMAP_FAILURE=1.
- nvlink_crc: bursts of NVLink CRC flit errors (final rate 2-30/h x s, median size 5 + 200 s)
  and NVLink replays.
Usual precursors per type: 79: pcie_replay, power/clock jitter, stalls; 74: nvlink_crc, stalls;
119/120: stalls, clock jitter; 48/94/95: ecc_sbe_ramp, row_remap_ramp; 64: row_remap_ramp,
ecc_sbe_ramp; 92: ecc_sbe_ramp; 62: power/clock jitter.

Look-alikes on healthy hardware.
- Application XID storms: 13 (60 %), 31 (30 %) or 43 (10 %) on every GPU of a crashing job
  within seconds (nodes up to 15 s apart), 13/31 followed by 43 on 40 % of GPUs.
- Fan degradation: Poisson(0.7 per 16-node 2-day cluster); one chassis fan's RPM
  (node_hwmon_fan_rpm) decays over a lognormal 6 h to 0-50 % of nominal; the node's GPU and HBM
  temperatures rise by up to ~20 C under load (more on GPUs near that fan), thermal throttling
  when the GPU passes 87 C.  40 % of these nodes get a planned maintenance that fixes the fan.
- Maintenance reboots: Poisson(1.5 per 16-node 2 days), 15 min-3 h (median 45 min), jobs drain
  first; series vanish, up=0, node_boot_time_seconds changes, volatile counters (energy, PCIe
  replays, volatile ECC, NVLink, XID gauge) reset.  Exporters return 20-150 s after the node.
- Job starts/stops, checkpoints, evaluation phases, warm-ups and NCCL hangs, as above.  Host
  stalls (dataloader hiccups: all GPUs of one node stall 30 s-2 min while the job's other nodes
  spin) at 0.4/day per job-node and rare single-GPU stalls (0.05/day per busy GPU).
- Thermal excursions: Poisson(0.6 per 2 days); a rack's inlet rises 3-9 C for 15-90 min.
- Isolated correctable errors: 1-2 SBEs at 0.03/day per GPU; 2 % of GPUs have a chronic weak
  SBE rate (0.2-2/h) and never fail; rare healthy row remaps (0.004/day per GPU, with XID 63).
- PCIe replays on healthy GPUs: 0.05/day per GPU (1-5 each), 3 % chronic noisy links
  (0.5-3 bursts/h of 1-10), and 1-30 replays right after 15 % of boots.  Healthy NVLink CRC
  bursts at 0.2/day per GPU, 2 % noisy links at ~1/h.
- Power-capped jobs make healthy clocks hover at 1600-1980 MHz (throttle bit 0x4).
- Scrape gaps: 0.08 % of scrapes fail (up=0), dcgm-exporter restarts (1 per 16 nodes per 2 days,
  1-3 min of up=0) and Prometheus outages (Poisson 0.8 per 2 days, 2-12 min, no samples at all).

Output: metrics/<t0>.om[.gz], labels.jsonl, kernel/<host>.log, inventory.json, summary.json.
Cumulative DCGM fields are typed `gauge` (as they appear after scraping dcgm-exporter, with
their real names and no `_total` suffix added).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field

import numpy as np

T_START = 1731888000  # 2024-11-18 00:00:00 UTC
WINDOW = 7200
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.90.07"
FB_TOTAL = 81559
POWER_CAP = 700.0
PCI_BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
NODES_PER_RACK = 4
N_FANS = 6

THR_IDLE = 0x1
THR_SW_POWER = 0x4
THR_HW_SLOW = 0x8
THR_SW_THERMAL = 0x20
THR_HW_THERMAL = 0x40
THR_HW_BRAKE = 0x80

SLOW_PREC = ("pcie_replay", "ecc_sbe_ramp", "row_remap_ramp", "nvlink_crc")

# name, xid, weight, share without precursor, {precursor: probability}, repair prob,
# swap prob, P(GPU drops out of DCGM)
FAILURE_TYPES = [
    ("fallen_off_bus", 79, 0.18, 0.35,
     {"pcie_replay": 0.55, "power_jitter": 0.3, "clock_jitter": 0.2, "process_stall": 0.2},
     1.0, 0.5, 1.0),
    ("nvlink", 74, 0.13, 0.40, {"nvlink_crc": 0.65, "process_stall": 0.3}, 1.0, 0.3, 0.0),
    ("gsp_rpc_timeout", 119, 0.12, 0.50,
     {"process_stall": 0.5, "clock_jitter": 0.3, "power_jitter": 0.15}, 1.0, 0.1, 0.5),
    ("gsp_error", 120, 0.05, 0.50, {"process_stall": 0.4, "clock_jitter": 0.3}, 1.0, 0.1, 0.5),
    ("dbe", 48, 0.10, 0.45, {"ecc_sbe_ramp": 0.7, "row_remap_ramp": 0.35}, 1.0, 0.6, 0.0),
    ("ecc_contained", 94, 0.10, 0.40, {"ecc_sbe_ramp": 0.7, "row_remap_ramp": 0.4},
     0.5, 0.2, 0.0),
    ("ecc_uncontained", 95, 0.06, 0.45, {"ecc_sbe_ramp": 0.7, "row_remap_ramp": 0.4},
     1.0, 0.5, 0.0),
    ("row_remap_failure", 64, 0.07, 0.10, {"row_remap_ramp": 0.9, "ecc_sbe_ramp": 0.5},
     1.0, 0.9, 0.0),
    ("sbe_storm", 92, 0.07, 0.15, {"ecc_sbe_ramp": 0.95}, 0.6, 0.4, 0.0),
    ("pmu_halt", 62, 0.04, 0.50, {"power_jitter": 0.5, "clock_jitter": 0.4}, 1.0, 0.3, 0.5),
]

XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC {a}, TPC {b}, SM 0): Out Of Range Address",
    31: ("Ch 0000000{a}, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{b} faulted @ "
         "0x7f{c:x}_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"),
    43: "Ch 0000000{a}",
    48: ("An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
         "at partition {a}, subpartition {b}."),
    62: "{c:08x} 00000000 00000000 00000000",
    63: "Row Remapper: New row (0x{c:016x}) marked for remapping, reset gpu to activate.",
    64: "Row Remapper Error: Remapping of row 0x{c:016x} failed, no spare rows available.",
    74: "NVLink: fatal error detected on link {a}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate detected.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: ("Timeout after 6s of waiting for RPC response from GPU{a} GSP! Expected function 76 "
          "(GSP_RM_CONTROL) (0x20800a4c 0x4)."),
    120: "GSP task exception: Task {a} raised error code 0x{b:x} for reason 0x0 at 0x{c:x}",
}

BENIGN_KERNEL = [
    "perf: interrupt took too long (3141 > 3136), lowering kernel.perf_event_max_sample_rate to "
    "63500",
    "mlx5_core 0000:{bus}:00.0: mlx5_fw_tracer_handle_traces:756:(pid 0): FW tracer: "
    "link_up event",
    "audit: type=1400 audit(0.0:{n}): apparmor=\"DENIED\" operation=\"open\" "
    "profile=\"snap-update-ns\" name=\"/proc/self/mountinfo\"",
    "EXT4-fs (md0): mounted filesystem with ordered data mode. Quota mode: none.",
    "nfs: server storage-nfs01 OK",
    "TCP: request_sock_TCP: Possible SYN flooding on port 29500. Sending cookies.",
    "systemd-journald[1123]: Data hash table of /var/log/journal/system.journal has a fill "
    "level at 75.0, suggesting rotation.",
    "infiniband mlx5_{k}: mlx5_ib_event:3020:(pid {n}): warning: event on port 1",
    "Lustre: lustre-OST00{k}-osc: Connection restored to 10.9.0.{n} (at 10.9.0.{n}@o2ib)",
]

GPU_FAMILIES = [
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock", "i"),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "mem_clock", "i"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", "mem_temp", "i"),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gpu_temp", "i"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power", "3"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).",
     "energy", "i"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "replay", "i"),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util", "i"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "memcopy", "i"),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb", "i"),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "xid", "i"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "Current clock throttle reasons.", "thr", "i"),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.",
     "sbe", "i"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.",
     "dbe", "i"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors",
     "crr", "i"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
     "Number of remapped rows for uncorrectable errors", "urr", "i"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed", "rrf", "i"),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
     "Total number of NVLink flow-control CRC errors.", "nvc", "i"),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "Total number of NVLink retries.",
     "nvr", "i"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.",
     "gr", "f"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.",
     "tensor", "f"),
    ("DCGM_FI_PROF_DRAM_ACTIVE",
     "Ratio of cycles the device memory interface is active sending or receiving data.",
     "dram", "f"),
]


def lognorm(rng, median, sigma, lo, hi):
    return float(np.clip(median * math.exp(sigma * rng.standard_normal()), lo, hi))


def new_uuid(rng):
    a = rng.integers(0, 2**32)
    b, c, d = rng.integers(0, 2**16, 3)
    e = rng.integers(0, 2**48)
    return f"GPU-{a:08x}-{b:04x}-{c:04x}-{d:04x}-{e:012x}"


def syslog_time(t):
    st = time.gmtime(int(t))
    return time.strftime("%b ", st) + f"{st.tm_mday:2d}" + time.strftime(" %H:%M:%S", st)


@dataclass
class Job:
    jid: int
    kind: str
    nnodes: int
    ngpus: int
    dur: float
    submit: float
    p: dict
    nodes: list = field(default_factory=list)
    gpus: list = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0
    crash: str | None = None  # "xid" | "noxid"
    crash_t: float = 0.0
    crash_frac: float = 0.0
    kill: tuple | None = None  # (tf, node, gpu, mate_end)
    node_end: dict = field(default_factory=dict)


class Cluster:
    def __init__(self, args):
        self.args = args
        self.seed = args.seed
        self.N = args.nodes
        self.Gp = args.gpus
        self.G = self.N * self.Gp
        self.iv = int(args.interval)
        self.S = round(args.days * 86400 / self.iv)
        self.end = T_START + self.S * self.iv
        self._streams = {}
        r = self.r("phase")
        self.ph = r.integers(0, self.iv, self.N)
        self.phn = r.integers(0, self.iv, self.N)
        k = np.arange(self.S, dtype=np.int64)
        self.tg = T_START + k[None, :] * self.iv + self.ph[:, None]
        self.tn = T_START + k[None, :] * self.iv + self.phn[:, None]
        self.klog = [[] for _ in range(self.N)]
        self.xids = [[] for _ in range(self.G)]  # (t, xid, text)
        self.labels = []
        self.stalls = []  # (job, [(n, gi)], ts, te)
        self.stats = {}

    # ----------------------------------------------------------------- helpers
    def r(self, name):
        if name not in self._streams:
            code = sum((i + 1) * ord(c) for i, c in enumerate(name)) % 100003
            self._streams[name] = np.random.default_rng([self.seed, code])
        return self._streams[name]

    def ix(self, n, t, grid="d"):
        ph = self.ph[n] if grid == "d" else self.phn[n]
        k = math.ceil((t - T_START - ph) / self.iv)
        return min(max(k, 0), self.S)

    def log(self, n, t, msg):
        self.klog[n].append((float(t), msg))

    # ----------------------------------------------------------------- inventory
    def build_inventory(self):
        r = self.r("inventory")
        self.hosts, self.ips, self.rack = [], [], []
        for n in range(self.N):
            rack = 1 + n // NODES_PER_RACK
            unit = 3 + 10 * (n % NODES_PER_RACK) + int(r.integers(0, 2)) * 5
            self.hosts.append(f"hgx-r{rack}-u{unit:02d}")
            self.ips.append(f"10.31.{rack}.{unit + 10}")
            self.rack.append(rack)
        self.bus = [PCI_BUSES[i] if i < 8 else f"{0xe0 + i:02x}" for i in range(self.Gp)]
        self.uuid0 = [new_uuid(r) for _ in range(self.G)]
        self.serial0 = [f"16524230{int(r.integers(10000, 99999))}" for _ in range(self.G)]
        self.segs = [[(self.uuid0[g], 0, self.S)] for g in range(self.G)]
        self.replacements = []
        # per-GPU physical constants
        self.idle_w = r.normal(71, 3, self.G)
        self.dyn_w = r.normal(640, 18, self.G)
        self.rth = r.normal(0.050, 0.003, self.G)
        self.rth_m = r.normal(0.056, 0.004, self.G)
        self.fan_w = r.uniform(0.15, 0.6, self.G)
        self.inlet0 = r.normal(23.5, 1.0, self.N)
        self.uptime0 = r.uniform(2, 90, self.N) * 86400
        self.boots = [[T_START - self.uptime0[n]] for n in range(self.N)]
        # healthy-hardware character
        self.noisy_pcie = r.random(self.G) < 0.03
        self.weak_ecc = r.random(self.G) < 0.02
        self.noisy_nvl = r.random(self.G) < 0.02
        self.fan_rpm0 = r.normal(12500, 300, (self.N, N_FANS))

    # ----------------------------------------------------------------- events
    def plan_events(self):
        r = self.r("events")
        scale = self.G * self.args.days / 256.0
        if self.args.failures is not None:
            nf = self.args.failures
        else:
            nf = min(8, int(r.poisson(33 / 8 * scale)))
        self.down = [[] for _ in range(self.N)]  # (start, end, reason)
        self.unavail = [[] for _ in range(self.N)]  # scheduler-unknown unavailability
        self.failures = []
        weights = np.array([ft[2] for ft in FAILURE_TYPES])
        weights /= weights.sum()
        busy_win = [[] for _ in range(self.N)]
        for _ in range(nf):
            tf = int(r.uniform(T_START + 600, self.end - 300))
            ft = FAILURE_TYPES[int(r.choice(len(FAILURE_TYPES), p=weights))]
            name, xid, _w, p_none, precs, p_rep, p_swap, p_lost = ft
            repaired = r.random() < p_rep
            swap = repaired and r.random() < p_swap
            rep = None
            if repaired:
                rs = tf + lognorm(r, 5400, 0.8, 600, 43200)
                dur = (lognorm(r, 12600, 0.5, 5400, 43200) if swap
                       else lognorm(r, 1500, 0.5, 480, 5400))
                rep = (int(rs), int(rs + dur))
            plist = []
            if r.random() >= p_none:
                for pn, pp in precs.items():
                    if r.random() < pp:
                        plist.append(pn)
                if not plist:
                    plist.append(max(precs, key=precs.get))
            prec = []
            for pn in plist:
                if pn in SLOW_PREC:
                    lead = (lognorm(r, 1500, 0.8, 300, 158400) if r.random() < 0.35
                            else lognorm(r, 32400, 0.9, 300, 158400))
                else:
                    lead = (lognorm(r, 900, 0.9, 180, 108000) if r.random() < 0.6
                            else lognorm(r, 10800, 0.8, 180, 108000))
                s = float(np.clip(r.beta(1.3, 2.0), 0.04, 1.0))
                prec.append({"name": pn, "lead": int(lead), "s": s,
                             "k": float(r.uniform(1.5, 4.0))})
            self.failures.append({
                "n": None, "gi": None, "g": None, "tf": tf, "type": name, "xid": xid,
                "prec": prec, "rep": rep, "swap": swap, "lost": r.random() < p_lost,
                "nccl": float(r.choice([600.0, 1800.0]) + r.uniform(0, 60)), "job": None,
            })
        self.failures.sort(key=lambda f: f["tf"])
        # planned maintenance (jobs drain first; the scheduler knows about it)
        self.planned = [[] for _ in range(self.N)]
        for _ in range(int(r.poisson(1.5 * self.N * self.args.days / 32))):
            self._add_planned(r, int(r.integers(0, self.N)),
                              r.uniform(T_START + 1800, self.end - 1800), busy_win)
        # fan degradation
        self.fans = []
        for _ in range(int(r.poisson(0.7 * self.N * self.args.days / 32))):
            n = int(r.integers(0, self.N))
            onset = r.uniform(T_START - 43200, self.end - 7200)
            tau = lognorm(r, 21600, 0.6, 3600, 86400)
            fan = {"n": n, "fan": int(r.integers(0, N_FANS)), "onset": onset, "tau": tau,
                   "final": float(r.uniform(0.0, 0.5)), "fixed": None}
            if r.random() < 0.4:
                t_fix = onset + tau + r.uniform(3600, 36000)
                if self._add_planned(r, n, t_fix, busy_win):
                    fan["fixed"] = self.planned[n][-1][0]
            self.fans.append(fan)
        # thermal excursions (rack inlet)
        self.thermal = []
        nr = 1 + (self.N - 1) // NODES_PER_RACK
        for _ in range(int(r.poisson(0.6 * self.args.days / 2))):
            self.thermal.append((int(r.integers(1, nr + 1)), r.uniform(T_START, self.end - 600),
                                 r.uniform(300, 900), r.uniform(900, 5400), r.uniform(3, 9)))
        # exporter restarts and Prometheus outages
        self.exp_restart = [(int(r.integers(0, self.N)), r.uniform(T_START, self.end),
                             r.uniform(60, 180))
                            for _ in range(int(r.poisson(self.N * self.args.days / 32)))]
        self.outages = []
        for _ in range(int(r.poisson(0.8 * self.args.days / 2))):
            a = r.uniform(T_START, self.end - 900)
            self.outages.append((a, a + r.uniform(120, 720)))

    def finalize_downtime(self):
        r = self.r("boots")
        for n in range(self.N):
            self.down[n].sort()
            for _a, b, _reason in self.down[n]:
                self.boots[n].append(b - r.uniform(90, 240))

    def _place_failure(self, f, running):
        """Pick the GPU that fails at f["tf"]; loaded GPUs are three times as likely."""
        r = self.r("place")
        tf = f["tf"]
        w_end = f["rep"][1] if f["rep"] else tf + 1800
        cands, weights = [], []
        for n in range(self.N):
            if any(a - 3600 <= tf < b + 3600 for a, b, _ in self.down[n]):
                continue
            if any(a - 3600 <= tf < b + 3600 for a, b in self.unavail[n]):
                continue
            if any(a < w_end + 3600 and tf - 3600 < b for a, b in self.planned[n]):
                continue
            job = running[n]
            for gi in range(self.Gp):
                busy = job is not None and job.start <= tf < job.end and gi in job.gpus
                cands.append((n, gi))
                weights.append(3.0 if busy else 1.0)
        if not cands:
            return False
        w = np.array(weights) / sum(weights)
        n, gi = cands[int(r.choice(len(cands), p=w))]
        f.update(n=n, gi=gi, g=n * self.Gp + gi)
        if f["rep"]:
            self.down[n].append((f["rep"][0], f["rep"][1], "repair"))
            self.unavail[n].append((tf, f["rep"][1]))
        elif f["xid"] == 94:
            self.unavail[n].append((tf, tf + 300))
        else:
            self.unavail[n].append((tf, tf))
        return True

    def _add_planned(self, r, n, start, busy_win):
        dur = lognorm(r, 2700, 0.6, 900, 10800)
        a, b = int(start), int(start + dur)
        if b >= self.end or any(x < b + 7200 and a - 7200 < y for x, y in busy_win[n]):
            return False
        busy_win[n].append((a, b))
        self.down[n].append((a, b, "planned"))
        self.planned[n].append((a, b))
        return True

    # ----------------------------------------------------------------- workload
    def new_job(self, r, jid, t):
        kind = str(r.choice(["pretrain", "finetune", "eval", "dev"], p=[0.2, 0.35, 0.22, 0.23]))
        ngpus = self.Gp
        if kind == "pretrain":
            nn = int(r.choice([2, 4, 8, 16], p=[0.3, 0.4, 0.25, 0.05]))
            dur = lognorm(r, 21600, 0.8, 3600, 172800)
        elif kind == "finetune":
            nn = int(r.choice([1, 2, 4], p=[0.5, 0.35, 0.15]))
            dur = lognorm(r, 9000, 0.8, 1200, 86400)
        elif kind == "eval":
            nn = int(r.choice([1, 2], p=[0.8, 0.2]))
            dur = lognorm(r, 3000, 0.7, 600, 21600)
        else:
            nn = 1
            ngpus = min(self.Gp, int(r.choice([1, 2, 4, 8], p=[0.3, 0.2, 0.2, 0.3])))
            dur = lognorm(r, 2400, 0.9, 300, 21600)
        nn = max(1, min(nn, max(1, self.N // 2) if kind == "pretrain" else self.N))
        p = {"warmup": r.uniform(120, 600), "util_sd": 1.0}
        if kind == "pretrain":
            p.update(util=r.uniform(97, 100), pf=r.uniform(0.85, 1.06),
                     tensor=r.uniform(0.38, 0.62),
                     dram=r.uniform(0.25, 0.45), fb=r.uniform(70000, 79500),
                     ckpt=r.uniform(1800, 5400), ckpt_dur=r.uniform(60, 300),
                     evl=r.uniform(7200, 21600), evl_dur=r.uniform(300, 1200))
        elif kind == "finetune":
            p.update(util=r.uniform(85, 99), pf=r.uniform(0.6, 0.95), tensor=r.uniform(0.25, 0.5),
                     dram=r.uniform(0.2, 0.45), fb=r.uniform(40000, 79000),
                     ckpt=r.uniform(1200, 3600), ckpt_dur=r.uniform(30, 120),
                     evl=r.uniform(3600, 10800), evl_dur=r.uniform(300, 900), util_sd=3.0)
        elif kind == "eval":
            p.update(util=r.uniform(60, 95), pf=r.uniform(0.3, 0.6), tensor=r.uniform(0.1, 0.3),
                     dram=r.uniform(0.3, 0.6), fb=r.uniform(20000, 60000), ckpt=0, evl=0,
                     flip=r.uniform(0.05, 0.2), util_sd=6.0)
        else:
            p.update(util=r.uniform(40, 100), pf=r.uniform(0.1, 0.5), tensor=r.uniform(0.0, 0.3),
                     dram=r.uniform(0.05, 0.4), fb=r.uniform(2000, 40000), ckpt=0, evl=0,
                     flip=r.uniform(0.03, 0.15), util_sd=8.0)
        p["ckpt_off"] = r.uniform(0, p["ckpt"]) if p["ckpt"] else 0.0
        p["evl_off"] = r.uniform(0, p["evl"]) if p["evl"] else 0.0
        job = Job(jid=jid, kind=kind, nnodes=nn, ngpus=ngpus, dur=dur, submit=t, p=p)
        u = r.random()
        if u < 0.06:
            job.crash = "xid"
        elif u < 0.16:
            job.crash = "noxid"
        job.crash_frac = float(r.beta(0.8, 1.6))
        return job

    def schedule(self):
        r = self.r("sched")
        # estimate node-seconds per job to size the arrival rate
        probe = np.random.default_rng([self.seed, 7])
        demand = np.mean([j.nnodes * j.dur
                          for j in (self.new_job(probe, 0, 0) for _ in range(400))])
        target = r.uniform(0.65, 0.9)
        lam = 1.3 * target * self.N / demand  # jobs per second (keeps a backlog)
        step = 60.0
        t = T_START - 36 * 3600.0
        queue, self.jobs = [], []
        free_at = np.full(self.N, -1e18)
        running = [None] * self.N
        jid = int(r.integers(480000, 520000))
        fail_i = 0
        while t < self.end:
            rate = lam * step * (1 + 0.25 * math.sin(2 * math.pi * (t - T_START) / 86400 - 1.0))
            for _ in range(int(r.poisson(rate))):
                jid += 1
                queue.append(self.new_job(r, jid, t + r.uniform(0, step)))
            while fail_i < len(self.failures) and self.failures[fail_i]["tf"] <= t:
                f = self.failures[fail_i]
                if self._place_failure(f, running):
                    self._fail_kill(f, running, free_at)
                fail_i += 1
            avail = [n for n in range(self.N) if free_at[n] <= t
                     and not any(a <= t < b for a, b in self.unavail[n])
                     and not any(a <= t < b for a, b, _ in self.down[n])]
            for job in list(queue):
                if not avail:
                    break
                if len(avail) < job.nnodes:
                    continue
                fits = [n for n in avail
                        if not any(a < t + job.dur + 600 and t < b for a, b in self.planned[n])]
                if len(fits) < job.nnodes:
                    continue
                k0 = int(r.integers(0, len(fits) - job.nnodes + 1))
                job.nodes = fits[k0:k0 + job.nnodes]
                if job.ngpus < self.Gp:
                    off = int(r.integers(0, self.Gp // job.ngpus)) * job.ngpus
                    job.gpus = list(range(off, off + job.ngpus))
                else:
                    job.gpus = list(range(self.Gp))
                job.start = t + r.uniform(0, 45)
                job.end = job.start + job.dur
                if job.crash:
                    job.crash_t = job.start + max(120.0, job.crash_frac * job.dur)
                    job.end = job.crash_t
                for n in job.nodes:
                    avail.remove(n)
                    free_at[n] = job.end + 30
                    running[n] = job
                    job.node_end[n] = job.end
                queue.remove(job)
                self.jobs.append(job)
            queue = [j for j in queue if t - j.submit < 43200]  # users give up after 12 h
            t += step
        self.failures = [f for f in self.failures if f["n"] is not None]
        self.stats["target_util"] = round(float(target), 3)

    def _fail_kill(self, f, running, free_at):
        n, tf = f["n"], f["tf"]
        job = running[n]
        f["job"] = None
        if job is None or not (job.start <= tf < job.end) or f["gi"] not in job.gpus:
            return
        f["job"] = job.jid
        if f["xid"] == 92:
            return
        nccl = (20 + 70 * self.r("sched").random()) if f["xid"] == 74 else f["nccl"]
        multi = job.nnodes * job.ngpus > 1
        mate_end = tf + nccl if multi else tf
        job.kill = (tf, n, f["gi"], mate_end)
        if job.crash and job.crash_t > tf:
            job.crash = None
        job.end = mate_end
        for m in job.nodes:
            job.node_end[m] = mate_end
            free_at[m] = mate_end + 30

    # ----------------------------------------------------------------- rendering
    def render_jobs(self):
        G, S = self.G, self.S
        r = self.r("render")
        self.util = np.zeros((G, S))
        self.pf = np.zeros((G, S))
        self.tensor = np.zeros((G, S))
        self.dram = np.zeros((G, S))
        self.fb = np.zeros((G, S))
        self.jobid = np.full((G, S), -1, dtype=np.int64)
        self.job_by_id = {}
        for job in self.jobs:
            if job.end <= T_START or job.start >= self.end:
                continue
            self.job_by_id[job.jid] = job
            for n in job.nodes:
                i0 = self.ix(n, job.start)
                i1 = self.ix(n, job.node_end[n])
                if i1 <= i0:
                    continue
                t = self.tg[n, i0:i1]
                u, pf, ten, dr, fb = self.job_profile(job, t, r)
                for gi in job.gpus:
                    g = n * self.Gp + gi
                    j1 = i1
                    if job.kill and job.kill[1] == n and job.kill[2] == gi:
                        j1 = max(i0, self.ix(n, job.kill[0]))
                    L = j1 - i0
                    if L <= 0:
                        continue
                    self.util[g, i0:j1] = np.clip(u[:L] + r.normal(0, 0.7, L), 0, 100)
                    self.pf[g, i0:j1] = pf[:L] * (1 + r.normal(0, 0.02, L))
                    self.tensor[g, i0:j1] = np.clip(ten[:L] * (1 + r.normal(0, 0.03, L)), 0, 1)
                    self.dram[g, i0:j1] = np.clip(dr[:L] * (1 + r.normal(0, 0.04, L)), 0, 1)
                    self.fb[g, i0:j1] = np.clip(fb[:L] + r.normal(0, 40, L), 0, FB_TOTAL - 600)
                    self.jobid[g, i0:j1] = job.jid
                # benign stalls for synchronous multi-GPU jobs
                if job.kind in ("pretrain", "finetune") and len(job.gpus) * job.nnodes > 1:
                    span = (t[-1] - t[0]) / 86400.0
                    for _ in range(int(r.poisson(0.4 * span))):
                        ts = float(r.uniform(t[0], t[-1]))
                        self.stalls.append((job, [(n, gi) for gi in job.gpus], ts,
                                            ts + self.iv * int(r.integers(1, 5))))
                    for gi in job.gpus:
                        for _ in range(int(r.poisson(0.05 * span))):
                            ts = float(r.uniform(t[0], t[-1]))
                            self.stalls.append((job, [(n, gi)], ts,
                                                ts + self.iv * int(r.integers(1, 3))))
            if job.crash == "xid" and T_START <= job.crash_t < self.end:
                self._app_xid(job, r)

    def job_profile(self, job, t, r):
        p = job.p
        L = len(t)
        rel = (t - job.start).astype(float)
        util = r.normal(p["util"], p["util_sd"], L)
        pf = p["pf"] * (1 + r.normal(0, 0.035, L))
        ten = p["tensor"] * (1 + r.normal(0, 0.04, L))
        dr = p["dram"] * (1 + r.normal(0, 0.05, L))
        if "flip" in p:
            on = (np.cumsum(r.random(L) < p["flip"]) % 2) == 0
            low = 0.0 if job.kind == "dev" else r.uniform(5, 30)
            f = np.where(on, 1.0, low / max(p["util"], 1))
            util = util * f
            pf = pf * np.where(on, 1.0, 0.1)
            ten = ten * np.where(on, 1.0, 0.05)
            dr = dr * np.where(on, 1.0, 0.2)
        if p["ckpt"]:
            m = (((rel - p["ckpt_off"]) % p["ckpt"]) < p["ckpt_dur"]) & (rel > p["warmup"])
            k = int(m.sum())
            util[m] = r.uniform(0, 12, k)
            pf[m] = r.uniform(0.05, 0.12, k)
            ten[m] = r.uniform(0, 0.02, k)
            dr[m] = r.uniform(0.0, 0.05, k)
        if p["evl"]:
            m = (((rel - p["evl_off"]) % p["evl"]) < p["evl_dur"]) & (rel > p["warmup"])
            k = int(m.sum())
            util[m] = r.uniform(30, 70, k)
            pf[m] = r.uniform(0.25, 0.45, k)
            ten[m] *= 0.35
        w = rel < p["warmup"]
        k = int(w.sum())
        util[w] = r.uniform(0, 40, k)
        pf[w] = r.uniform(0.02, 0.2, k)
        ten[w] = r.uniform(0, 0.05, k)
        fb = p["fb"] * np.clip(rel / p["warmup"], 0.05, 1.0)
        if job.kill:
            h = t >= job.kill[0]
            k = int(h.sum())
            util[h] = 100.0
            pf[h] = r.uniform(0.08, 0.13, k)
            ten[h] = 0.0
            dr[h] = r.uniform(0.0, 0.02, k)
        return np.clip(util, 0, 100), np.clip(pf, 0, None), ten, dr, fb

    def _app_xid(self, job, r):
        primary = int(r.choice([13, 31, 43], p=[0.6, 0.3, 0.1]))
        for n in job.nodes:
            tn = job.crash_t + r.uniform(0, 15)
            first = None
            for gi in job.gpus:
                tx = int(tn + r.uniform(0, 2))
                first = tx if first is None else min(first, tx)
                pid = int(r.integers(2000, 400000))
                self._xid(n, gi, tx, primary, pid=pid)
                if primary != 43 and r.random() < 0.4:
                    self._xid(n, gi, tx + int(r.integers(1, 4)), 43, pid=pid)
            self.labels.append({"type": "app_xid", "node": self.hosts[n], "time": first,
                                "xid": primary})

    def _xid(self, n, gi, t, xid, pid=None, text=None):
        r = self.r("xidtext")
        if text is None:
            text = XID_TEXT[xid].format(a=int(r.integers(0, 8)), b=int(r.integers(0, 9)),
                                        c=int(r.integers(0, 2**31)))
        who = "pid='<unknown>', name=<unknown>" if pid is None else f"pid={pid}, name=python3"
        self.xids[n * self.Gp + gi].append((int(t), xid))
        self.klog[n].append((float(t) + r.random() * 0.9,
                             ("XID", gi, f"NVRM: Xid (PCI:0000:{self.bus[gi]}:00): {xid}, "
                                         f"{who}, {text}")))

    # ----------------------------------------------------------------- hardware
    def render_hardware(self):
        G, S, iv = self.G, self.S, self.iv
        r = self.r("hw")
        self.inc = {k: np.zeros((G, S)) for k in ("replay", "sbe", "dbe", "crr", "urr",
                                                  "nvc", "nvr")}
        self.rrf = np.zeros((G, S))
        self.lost = np.zeros((G, S), dtype=bool)
        self.pjit = []  # (g, idx array, sd, brake)
        self.cjit = []  # (g, idx array)
        hours = iv / 3600.0
        # healthy background
        for g in range(G):
            n = g // self.Gp
            ev = r.random(S) < 0.05 / 24 * hours
            self.inc["replay"][g, ev] += r.integers(1, 6, int(ev.sum()))
            if self.noisy_pcie[g]:
                ev = r.random(S) < r.uniform(0.5, 3) * hours
                self.inc["replay"][g, ev] += r.integers(1, 11, int(ev.sum()))
            ev = r.random(S) < 0.03 / 24 * hours
            self.inc["sbe"][g, ev] += r.integers(1, 3, int(ev.sum()))
            if self.weak_ecc[g]:
                self.inc["sbe"][g] += r.poisson(r.uniform(0.2, 2) * hours, S)
            ev = r.random(S) < (1.0 if self.noisy_nvl[g] else 0.2 / 24) * hours
            c = r.integers(1, 21, int(ev.sum()))
            self.inc["nvc"][g, ev] += c
            self.inc["nvr"][g, ev] += c // 4
            if r.random() < 0.004 * self.args.days:
                i = int(r.integers(0, S))
                self.inc["crr"][g, i] += 1
                self._xid(n, g % self.Gp, int(self.tg[n, i]) - int(r.integers(1, iv)), 63)
            for b in self.boots[n][1:]:
                if r.random() < 0.15:
                    i = self.ix(n, b + 200)
                    if i < S:
                        self.inc["replay"][g, i] += int(r.integers(1, 31))
        for f in self.failures:
            self._render_failure(f, r)

    def _growth_events(self, r, f, pr, rate_h):
        """Sample indices (with multiplicity) of events with a growing rate before the XID."""
        n, tf = f["n"], f["tf"]
        t_on = tf - pr["lead"]
        i0, i1 = self.ix(n, t_on), self.ix(n, tf)
        if i1 <= i0:
            return np.zeros(0, dtype=np.int64)
        t = self.tg[n, i0:i1]
        u = (t - t_on) / max(pr["lead"], 1)
        lam = rate_h * self.iv / 3600.0 * np.exp(pr["k"] * (u - 1))
        cnt = r.poisson(lam)
        return np.repeat(np.arange(i0, i1), cnt)

    def _render_failure(self, f, r):
        n, gi, g, tf, xid = f["n"], f["gi"], f["g"], f["tf"], f["xid"]
        bus = self.bus[gi]
        last_aer = -1e18
        for pr in f["prec"]:
            s, name = pr["s"], pr["name"]
            if name == "pcie_replay":
                idx = self._growth_events(r, f, pr, r.uniform(2, 20) * s)
                for i in idx:
                    self.inc["replay"][g, i] += max(1, int(lognorm(r, 3 + 40 * s, 1.0, 1, 5000)))
                    t = int(self.tg[n, i]) - int(r.integers(1, self.iv))
                    if r.random() < 0.5 and t - last_aer > 60:
                        last_aer = t
                        self._aer(n, gi, t)
            elif name in ("power_jitter", "clock_jitter", "process_stall"):
                rate = r.uniform(0.5, 4) if name == "process_stall" else r.uniform(1, 6)
                starts = self._growth_events(r, f, pr, rate * s)
                for i in np.unique(starts):
                    ln = int(r.integers(1, 7)) if name == "process_stall" else int(
                        r.geometric(0.25))
                    j = min(int(i) + ln, self.ix(n, tf))
                    if j <= i:
                        continue
                    if name == "power_jitter":
                        self.pjit.append((g, np.arange(i, j), 25 + 90 * s, r.random() < 0.4))
                    elif name == "clock_jitter":
                        self.cjit.append((g, np.arange(i, j)))
                    else:
                        ts = float(self.tg[n, i]) - 1
                        self.stalls.append((None, [(n, gi)], ts, ts + (j - i) * self.iv))
            elif name == "ecc_sbe_ramp":
                idx = self._growth_events(r, f, pr, r.uniform(5, 120) * s)
                np.add.at(self.inc["sbe"][g], idx, 1)
                self._remaps(r, f, pr, int(r.poisson(1 + 3 * s)))
            elif name == "row_remap_ramp":
                idx = self._growth_events(r, f, pr, r.uniform(1, 10) * s)
                np.add.at(self.inc["sbe"][g], idx, 1)
                self._remaps(r, f, pr, max(1, round((2 + 6 * r.random()) * s)))
            elif name == "nvlink_crc":
                idx = self._growth_events(r, f, pr, r.uniform(2, 30) * s)
                for i in idx:
                    c = max(1, int(lognorm(r, 5 + 200 * s, 1.0, 1, 100000)))
                    self.inc["nvc"][g, i] += c
                    self.inc["nvr"][g, i] += int(c * r.uniform(0.02, 0.2))
        # the failure itself
        i_f = self.ix(n, tf)
        i_end = self.ix(n, f["rep"][0]) if f["rep"] else self.S
        pid = int(r.integers(2000, 400000)) if f.get("job") else None
        if xid == 119:
            self._xid(n, gi, tf, 119, pid=pid)
            t = tf
            for _ in range(int(r.integers(1, 5))):
                t += int(r.integers(6, 60))
                self._xid(n, gi, t, 119, pid=pid)
        elif xid == 79:
            self._xid(n, gi, tf, 79)
            self.log(n, tf + 0.001, f"NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus.")
            self.log(n, tf + 0.002, "NVRM: A GPU crash dump has been created. If possible, "
                                    "please run")
            self.log(n, tf + 0.003, "NVRM: nvidia-bug-report.sh as root to collect this data "
                                    "before")
            self.log(n, tf + 0.004, "NVRM: the NVIDIA kernel module is unloaded.")
        else:
            self._xid(n, gi, tf, xid, pid=pid)
        if i_f < self.S:
            if xid in (48, 94, 95):
                self.inc["dbe"][g, i_f] += 1
                self.inc["urr"][g, i_f] += 1
                if xid == 48 and r.random() < 0.3:
                    self._xid(n, gi, tf + int(r.integers(1, 6)), 63, pid=pid)
            elif xid == 64:
                self.rrf[g, i_f:] = 1
                self.inc["urr"][g, i_f] += 1
            elif xid == 92:
                self.inc["sbe"][g, i_f:i_end] += r.poisson(r.uniform(100, 600) * self.iv / 3600,
                                                           i_end - i_f)
                self.inc["sbe"][g, i_f] += int(r.integers(50, 500))
            elif xid == 74:
                self.inc["nvc"][g, i_f] += int(r.integers(100, 50000))
                self.inc["nvr"][g, i_f] += int(r.integers(10, 2000))
            if f["lost"]:
                self.lost[g, i_f:i_end] = True
        # repair: GPU swap gives a new UUID; persistent counters start over
        if f["rep"] and f["swap"]:
            ia = self.ix(n, f["rep"][0])
            old = self.segs[g][-1]
            new = new_uuid(r)
            self.segs[g][-1] = (old[0], old[1], ia)
            self.segs[g].append((new, ia, self.S))
            self.rrf[g, ia:] = 0
            self.replacements.append({"node": self.hosts[n], "gpu": gi,
                                      "time": f["rep"][0], "old_uuid": old[0],
                                      "new_uuid": new, "xid": xid})

    def _remaps(self, r, f, pr, nrow):
        n, gi, g = f["n"], f["gi"], f["g"]
        t_on = f["tf"] - pr["lead"]
        for _ in range(nrow):
            u = 1 - r.power(pr["k"])  # biased towards the XID
            t = int(f["tf"] - u * pr["lead"] * 0.98)
            if t < t_on or t >= f["tf"]:
                continue
            i = self.ix(n, t)
            if i < self.S:
                self.inc["crr"][g, i] += 1
                self._xid(n, gi, t, 63)

    def _aer(self, n, gi, t):
        bus = self.bus[gi]
        up = f"{int(bus, 16) - 1:02x}"
        kind = ["[12] Timeout               ", "[ 7] BadDLLP               ",
                "[ 6] BadTLP                "][int(self.r("aer").integers(0, 3))]
        status = {"[12": "00001000", "[ 7": "00000080", "[ 6": "00000040"}[kind[:3]]
        base = float(t) + self.r("aer").random() * 0.5
        self.log(n, base, f"pcieport 0000:{up}:01.0: AER: Corrected error received: "
                          f"0000:{bus}:00.0")
        self.log(n, base + 1e-5, f"nvidia 0000:{bus}:00.0: PCIe Bus Error: severity=Corrected, "
                                 "type=Data Link Layer, (Transmitter ID)")
        self.log(n, base + 2e-5, f"nvidia 0000:{bus}:00.0:   device [10de:2330] error "
                                 f"status/mask={status}/0000e000")
        self.log(n, base + 3e-5, f"nvidia 0000:{bus}:00.0:    {kind.rstrip()}")

    # ----------------------------------------------------------------- stalls
    def apply_stalls(self):
        r = self.r("stalls")
        for job, members, ts, te in self.stalls:
            n0, g0 = members[0]
            gidx0 = n0 * self.Gp + g0
            i0, i1 = self.ix(n0, ts), self.ix(n0, te)
            if i1 <= i0:
                continue
            if job is None:  # precursor stall: whichever job holds the GPU
                jids = self.jobid[gidx0, i0:i1]
                jids = jids[jids >= 0]
                if len(jids) == 0:
                    continue
                job = self.job_by_id.get(int(jids[0]))
                if job is None:
                    continue
            mem = set(members)
            for n, gi in mem:
                g = n * self.Gp + gi
                a, b = self.ix(n, ts), self.ix(n, te)
                m = self.jobid[g, a:b] == job.jid
                k = int(m.sum())
                if not k:
                    continue
                sl = np.arange(a, b)[m]
                self.util[g, sl] = r.uniform(0, 25, k)
                self.pf[g, sl] = r.uniform(0.03, 0.1, k)
                self.tensor[g, sl] = r.uniform(0, 0.03, k)
            fac = r.uniform(0.55, 0.8)
            for n in job.nodes:
                a, b = self.ix(n, ts), self.ix(n, te)
                for gi in job.gpus:
                    if (n, gi) in mem:
                        continue
                    g = n * self.Gp + gi
                    m = self.jobid[g, a:b] == job.jid
                    sl = np.arange(a, b)[m]
                    self.pf[g, sl] *= fac
                    self.tensor[g, sl] *= 0.1

    # ----------------------------------------------------------------- environment
    def inlet(self, n, t):
        t = t.astype(float)
        v = self.inlet0[n] + 0.8 * np.sin(2 * np.pi * (t - T_START) / 86400 - 2.0)
        for rack, a, ramp, dur, amp in self.thermal:
            if rack != self.rack[n]:
                continue
            up = np.clip((t - a) / ramp, 0, 1)
            down = np.clip(1 - (t - a - ramp - dur) / ramp, 0, 1)
            v = v + amp * np.minimum(up, down)
        return v

    def fan_frac(self, n, fan_i, t):
        t = t.astype(float)
        v = np.ones(len(t))
        for f in self.fans:
            if f["n"] != n or f["fan"] != fan_i:
                continue
            x = np.clip((t - f["onset"]) / f["tau"], 0, 1)
            d = (1 - f["final"]) * x * x * (3 - 2 * x)
            if f["fixed"] is not None:
                d = np.where(t >= f["fixed"], 0.0, d)
            v = v - d
        return v

    def derive(self):
        G, S, Gp = self.G, self.S, self.Gp
        r = self.r("derive")
        busy = self.jobid >= 0
        power = self.idle_w[:, None] + self.dyn_w[:, None] * np.clip(self.pf, 0, None)
        power += r.normal(0, 1, (G, S)) * np.where(busy, 7.0, 1.2)
        thr = np.where(busy, 0, THR_IDLE).astype(np.int64)
        clock = np.where(busy, 1980.0, 345.0)
        over = power > POWER_CAP
        excess = power - POWER_CAP
        clock = np.where(over, 1980 - 2.2 * excess - np.abs(r.normal(0, 40, (G, S))), clock)
        power = np.where(over, POWER_CAP - np.abs(r.normal(0, 5, (G, S))), power)
        thr[over] |= THR_SW_POWER
        for g, idx, sd, brake in self.pjit:
            load = 0.3 + 0.7 * busy[g, idx]
            power[g, idx] += r.normal(0, sd, len(idx)) * load
            if brake:
                k = r.random(len(idx)) < 0.3
                power[g, idx[k]] = r.uniform(90, 200, int(k.sum()))
                thr[g, idx[k]] |= THR_HW_BRAKE
                clock[g, idx[k]] *= 0.6
        power = np.clip(power, 35, 720)
        # temperatures: first-order lag on power, inlet and fan deficit per node
        deficit = np.zeros((G, S))
        inlet = np.zeros((G, S))
        for n in range(self.N):
            t = self.tg[n]
            d = np.zeros(S)
            for fi in range(N_FANS):
                d = np.maximum(d, 1 - self.fan_frac(n, fi, t))
            sl = slice(n * Gp, (n + 1) * Gp)
            deficit[sl] = d[None, :] * self.fan_w[sl, None] / 0.6
            inlet[sl] = self.inlet(n, t)[None, :]
        a1 = 1 - math.exp(-self.iv / 80.0)
        a2 = 1 - math.exp(-self.iv / 150.0)
        pf_ = power[:, 0].copy()
        pm_ = power[:, 0].copy()
        gt = np.empty((G, S))
        mt = np.empty((G, S))
        for k in range(S):
            pf_ += a1 * (power[:, k] - pf_)
            pm_ += a2 * (power[:, k] - pm_)
            gt[:, k] = inlet[:, k] + 7 + self.rth * pf_ * (1 + 0.9 * deficit[:, k])
            mt[:, k] = inlet[:, k] + 5 + self.rth_m * pm_ * (1 + 0.8 * deficit[:, k])
        gt += r.normal(0, 0.4, (G, S))
        mt += r.normal(0, 0.4, (G, S))
        hot = gt > 87
        clock = np.where(hot & busy, clock - (gt - 87) * 45, clock)
        thr[hot & busy] |= THR_SW_THERMAL
        thr[(gt > 92) & busy] |= THR_HW_THERMAL
        for g, idx in self.cjit:
            k = busy[g, idx] | (r.random(len(idx)) < 0.3)
            idx = idx[k]
            clock[g, idx] = np.maximum(clock[g, idx], 1000) * r.uniform(0.5, 0.92, len(idx))
            sel = idx[r.random(len(idx)) < 0.7]
            thr[g, sel] |= THR_HW_SLOW
        clock = np.clip(np.round(clock / 15) * 15, 345, 1980)
        self.m = {
            "sm_clock": clock,
            "mem_clock": np.full((G, S), 2619.0),
            "gpu_temp": np.round(gt),
            "mem_temp": np.round(mt),
            "power": power,
            "util": np.round(self.util),
            "memcopy": np.round(np.clip(self.dram * 100 * 0.85 + r.normal(0, 1, (G, S)), 0,
                                        100) * (self.util > 0)),
            "fb": np.round(self.fb),
            "thr": thr,
            "gr": np.clip(self.util / 100 * r.uniform(0.93, 0.995, (G, S)), 0, 1),
            "tensor": np.clip(self.tensor, 0, 1),
            "dram": np.clip(self.dram, 0, 1),
            "rrf": self.rrf,
        }
        self.power_for_energy = power

    # ----------------------------------------------------------------- presence / counters
    def presence(self):
        N, S, Gp = self.N, self.S, self.Gp
        r = self.r("presence")
        self.out_d = np.zeros((N, S), dtype=bool)
        self.out_n = np.zeros((N, S), dtype=bool)
        self.ok_d = np.ones((N, S), dtype=bool)
        self.ok_n = np.ones((N, S), dtype=bool)
        self.down_d = np.zeros((N, S), dtype=bool)
        self.boot_idx = [[] for _ in range(N)]
        self.boot_val_n = np.zeros((N, S))
        for n in range(N):
            td, tn = self.tg[n], self.tn[n]
            for a, b in self.outages:
                self.out_d[n] |= (td >= a) & (td < b)
                self.out_n[n] |= (tn >= a) & (tn < b)
            self.boot_val_n[n] = self.boots[n][0]
            for bi, (a, b, _reason) in enumerate(self.down[n]):
                d_ex = r.uniform(30, 150)
                n_ex = r.uniform(20, 40)
                self.ok_d[n] &= ~((td >= a) & (td < b + d_ex))
                self.ok_n[n] &= ~((tn >= a) & (tn < b + n_ex))
                self.down_d[n] |= (td >= a) & (td < b)
                self.boot_idx[n].append(self.ix(n, a))
                self.boot_val_n[n, tn >= a] = self.boots[n][bi + 1]
            for m, a, dur in self.exp_restart:
                if m == n:
                    self.ok_d[n] &= ~((td >= a) & (td < a + dur))
            self.ok_d[n] &= r.random(S) >= 0.0008
            self.ok_n[n] &= r.random(S) >= 0.0008
        self.ok_d &= ~self.out_d
        self.ok_n &= ~self.out_n
        node_of = np.repeat(np.arange(N), Gp)
        self.pres_x = self.ok_d[node_of]
        self.pres_g = self.pres_x & ~self.lost
        # a GPU that is gone or the node that is down draws no power
        self.power_for_energy = np.where(self.down_d[node_of], 0.0, self.power_for_energy)

    def counters(self):
        G, S, Gp = self.G, self.S, self.Gp
        r = self.r("counters")
        node_of = np.repeat(np.arange(self.N), Gp)
        up0 = self.uptime0[node_of]

        def vol(inc, off):
            c = np.cumsum(inc, axis=1) + off[:, None]
            for g in range(G):
                for b in self.boot_idx[g // Gp]:
                    if 0 < b < S:
                        c[g, b:] -= c[g, b - 1]
            return c

        def pers(inc, off):
            c = np.cumsum(inc, axis=1) + off[:, None]
            for g in range(G):
                for _u, a, _b in self.segs[g][1:]:
                    if 0 < a < S:
                        c[g, a:] -= c[g, a - 1]
            return c

        e_inc = self.power_for_energy * self.iv * 1000.0
        self.m["energy"] = vol(e_inc, up0 * r.uniform(250, 450, G) * 1000.0)
        rep_off = np.where(self.noisy_pcie, up0 / 3600 * r.uniform(1, 10, G),
                           r.poisson(up0 / 86400 * 0.2))
        self.m["replay"] = vol(self.inc["replay"], rep_off)
        sbe_off = np.where(self.weak_ecc, up0 / 3600 * r.uniform(0.2, 2, G),
                           r.poisson(up0 / 86400 * 0.02))
        self.m["sbe"] = vol(self.inc["sbe"], sbe_off)
        self.m["dbe"] = vol(self.inc["dbe"], np.zeros(G))
        crr0 = np.where(r.random(G) < 0.03, r.integers(1, 4, G), 0)
        urr0 = np.where(r.random(G) < 0.005, 1, 0)
        self.m["crr"] = pers(self.inc["crr"], crr0.astype(float))
        self.m["urr"] = pers(self.inc["urr"], urr0.astype(float))
        nv_off = np.where(self.noisy_nvl, up0 / 3600 * r.uniform(5, 20, G),
                          r.poisson(up0 / 86400 * 2.0))
        self.m["nvc"] = vol(self.inc["nvc"], nv_off)
        self.m["nvr"] = vol(self.inc["nvr"], np.floor(nv_off / 6))
        # XID gauge: last XID since driver load
        xg = np.zeros((G, S))
        for g in range(G):
            n = g // Gp
            resets = sorted(set(self.boot_idx[n]))
            for t, x in sorted(self.xids[g]):
                i = self.ix(n, t)
                if i >= S:
                    continue
                j = next((b for b in resets if b > i), S)
                xg[g, i:j] = x
        self.m["xid"] = xg

    # ----------------------------------------------------------------- node exporter
    def node_series(self):
        N, S, Gp = self.N, self.S, self.Gp
        r = self.r("node")
        self.nm = {}
        load = np.zeros((N, S))
        mem = np.zeros((N, S))
        for n in range(N):
            busy = (self.jobid[n * Gp:(n + 1) * Gp] >= 0).mean(axis=0)
            base = r.uniform(18, 48)
            load[n] = np.abs(busy * base + r.normal(0, 2, S) * busy + r.gamma(1.2, 0.4, S))
            mem[n] = 2.01e12 - busy * r.uniform(3e11, 1.2e12) - r.normal(4e10, 3e9, S)
        self.nm["load"] = load
        self.nm["mem"] = mem
        self.nm["fans"] = np.zeros((N, N_FANS, S))
        self.nm["temp"] = np.zeros((N, S))
        for n in range(N):
            t = self.tn[n]
            for fi in range(N_FANS):
                frac = self.fan_frac(n, fi, t)
                self.nm["fans"][n, fi] = np.round(self.fan_rpm0[n, fi] * frac
                                                  + r.normal(0, 60, S)).clip(0)
            self.nm["temp"][n] = self.inlet(n, t) + r.normal(0, 0.3, S)

    # ----------------------------------------------------------------- kernel logs
    def boot_lines(self, n):
        host = self.hosts[n]
        return [
            (0.0, "Linux version 5.15.0-125-generic (buildd@lcy02-amd64-047) (gcc (Ubuntu "
                  "11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) "
                  "#135-Ubuntu SMP Fri Sep 27 13:53:58 UTC 2024 (Ubuntu 5.15.0-125.135-generic "
                  "5.15.163)"),
            (0.0, "Command line: BOOT_IMAGE=/boot/vmlinuz-5.15.0-125-generic "
                  "root=/dev/mapper/vg00-root ro pci=realloc=off iommu=pt"),
            (0.0, "DMI: NVIDIA DGXH100/DGXH100, BIOS 1.1.3 10/25/2023"),
            (14.2, "nvidia: loading out-of-tree module taints kernel."),
            (14.3, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {DRIVER}  Wed Jun  5 "
                   "04:38:53 UTC 2024"),
            (15.1, "nvidia-nvlink: Nvlink Core is being initialized, major device number 508"),
            (15.4, "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX "
                   f"platforms  {DRIVER}  Wed Jun  5 04:30:37 UTC 2024"),
            (21.9, f"IPv6: ADDRCONF(NETDEV_CHANGE): ibp24s0: link becomes ready ({host})"),
        ]

    def write_kernel(self, out):
        r = self.r("kernel")
        os.makedirs(os.path.join(out, "kernel"), exist_ok=True)
        for n in range(self.N):
            ev = list(self.klog[n])
            for _ in range(int(r.poisson(6 * self.args.days))):
                tmpl = BENIGN_KERNEL[int(r.integers(0, len(BENIGN_KERNEL)))]
                ev.append((r.uniform(T_START, self.end),
                           tmpl.format(bus=PCI_BUSES[int(r.integers(0, 8))],
                                       n=int(r.integers(10, 250)), k=int(r.integers(0, 8)))))
            ev = [e for e in ev if T_START <= e[0] < self.end
                  and not any(a <= e[0] < b for a, b, _ in self.down[n])]
            for b in self.boots[n][1:]:
                jit = r.random() * 0.5
                for i, (off, msg) in enumerate(self.boot_lines(n)):
                    if b + off < self.end:
                        ev.append((b + off + jit + i * 1e-3, msg))
            ev.sort(key=lambda e: e[0])
            boots = self.boots[n]
            seen = set()
            lines = []
            for t, msg in ev:
                bt = max(b for b in boots if b <= t)
                up = t - bt
                stamp = f"[{int(up):5d}.{int((up % 1) * 1e6):06d}]"
                pre = f"{syslog_time(t)} {self.hosts[n]} kernel: {stamp} "
                if isinstance(msg, tuple):
                    gi, text = msg[1], msg[2]
                    key = (bt, gi)
                    if key not in seen:
                        seen.add(key)
                        g = n * self.Gp + gi
                        uuid = self.uuid_at(g, t)
                        lines.append(f"{pre}NVRM: GPU at PCI:0000:{self.bus[gi]}:00: {uuid}")
                        lines.append(f"{pre}NVRM: GPU Board Serial Number: {self.serial0[g]}")
                    lines.append(pre + text)
                else:
                    lines.append(pre + msg)
            with open(os.path.join(out, "kernel", f"{self.hosts[n]}.log"), "w") as fh:
                fh.write("\n".join(lines) + ("\n" if lines else ""))

    # ----------------------------------------------------------------- metrics writer
    def prepare_writer(self):
        self.tstr_d = [list(map(str, self.tg[n].tolist())) for n in range(self.N)]
        self.tstr_n = [list(map(str, self.tn[n].tolist())) for n in range(self.N)]
        self.nwin = (self.end - T_START + WINDOW - 1) // WINDOW

    def write_window(self, w):
        lo = T_START + w * WINDOW
        hi = lo + WINDOW
        parts = []
        N, Gp = self.N, self.Gp

        def rng_idx(tarr):
            return int(np.searchsorted(tarr, lo)), int(np.searchsorted(tarr, hi))

        wd = [rng_idx(self.tg[n]) for n in range(N)]
        wn = [rng_idx(self.tn[n]) for n in range(N)]

        def fmt(vals, kind):
            if kind == "i":
                return map(str, np.round(vals).astype(np.int64).tolist())
            if kind == "3":
                return map(str, np.round(vals, 3).tolist())
            return map(str, np.round(vals, 4).tolist())

        def emit(buf, prefix, vals, kind, tlist, mask, a, b):
            m = mask[a:b]
            v = vals[a:b][m]
            if not len(v):
                return
            ts = itertools.compress(tlist[a:b], m.tolist())
            buf.append("".join([f"{prefix}{x} {t}\n"
                                for x, t in zip(fmt(v, kind), ts, strict=True)]))

        for name, hlp, key, kind in GPU_FAMILIES:
            buf = []
            arr = self.m[key]
            pres = self.pres_x if key == "xid" else self.pres_g
            for g in range(self.G):
                n, gi = divmod(g, Gp)
                a, b = wd[n]
                host = self.hosts[n]
                for uuid, s0, s1 in self.segs[g]:
                    a2, b2 = max(a, s0), min(b, s1)
                    if a2 >= b2:
                        continue
                    prefix = (f'{name}{{gpu="{gi}",UUID="{uuid}",device="nvidia{gi}",'
                              f'modelName="{MODEL}",Hostname="{host}",instance="{host}:9400",'
                              f'job="dcgm"}} ')
                    emit(buf, prefix, arr[g], kind, self.tstr_d[n], pres[g], a2, b2)
            if buf:
                parts.append(f"# HELP {name} {hlp}\n# TYPE {name} gauge\n")
                parts.extend(buf)
        node_fams = [
            ("node_boot_time_seconds", "Node boot time, in unixtime.", "boot", "i"),
            ("node_load1", "1m load average.", "load", "2"),
            ("node_memory_MemAvailable_bytes", "Memory information field MemAvailable_bytes.",
             "mem", "i"),
            ("node_hwmon_temp_celsius", "Hardware monitor for temperature (input)", "temp", "1"),
        ]
        for name, hlp, key, kind in node_fams:
            buf = []
            arr = self.boot_val_n if key == "boot" else self.nm[key]
            for n in range(N):
                a, b = wn[n]
                host = self.hosts[n]
                lab = 'chip="platform_coretemp_0",' if key == "temp" else ""
                sen = ',sensor="temp1"' if key == "temp" else ""
                prefix = f'{name}{{{lab}instance="{host}:9100",job="node"{sen}}} '
                vals = np.round(arr[n], 2 if kind == "2" else 1) if kind in "12" else arr[n]
                emit(buf, prefix, vals, "i" if kind == "i" else "f", self.tstr_n[n],
                     self.ok_n[n], a, b)
            if buf:
                parts.append(f"# HELP {name} {hlp}\n# TYPE {name} gauge\n")
                parts.extend(buf)
        buf = []
        for n in range(N):
            a, b = wn[n]
            host = self.hosts[n]
            for fi in range(N_FANS):
                prefix = (f'node_hwmon_fan_rpm{{chip="platform_ipmi_bmc",instance="{host}:9100",'
                          f'job="node",sensor="fan{fi + 1}"}} ')
                emit(buf, prefix, self.nm["fans"][n, fi], "i", self.tstr_n[n], self.ok_n[n],
                     a, b)
        if buf:
            parts.append("# HELP node_hwmon_fan_rpm Hardware monitor for fan revolutions per "
                         "minute (input)\n# TYPE node_hwmon_fan_rpm gauge\n")
            parts.extend(buf)
        buf = []
        for n in range(N):
            host = self.hosts[n]
            for port, jobn, ok, out, tl, (a, b) in (
                    ("9400", "dcgm", self.ok_d[n], self.out_d[n], self.tstr_d[n], wd[n]),
                    ("9100", "node", self.ok_n[n], self.out_n[n], self.tstr_n[n], wn[n])):
                prefix = f'up{{instance="{host}:{port}",job="{jobn}"}} '
                emit(buf, prefix, ok.astype(float), "i", tl, ~out, a, b)
        if buf:
            parts.append("# HELP up Whether the scrape target is up.\n# TYPE up gauge\n")
            parts.extend(buf)
        parts.append("# EOF\n")
        data = "".join(parts).encode("ascii")
        base = os.path.join(self.out, "metrics", f"{lo}.om")
        if self.args.gzip:
            with gzip.open(base + ".gz", "wb", compresslevel=2) as fh:
                fh.write(data)
        else:
            with open(base, "wb") as fh:
                fh.write(data)
        return len(data)

    # ----------------------------------------------------------------- outputs
    def uuid_at(self, g, t):
        n = g // self.Gp
        uuid = self.segs[g][0][0]
        for u, a, _b in self.segs[g][1:]:
            if a < self.S and self.tg[n, a] <= t:
                uuid = u
        return uuid

    def write_meta(self, out):
        fail_labels = []
        for f in self.failures:
            n, g = f["n"], f["g"]
            uuid = self.uuid_at(g, f["tf"])
            fail_labels.append({
                "type": "failure", "node": self.hosts[n], "gpu": f["gi"], "time": f["tf"],
                "xid": f["xid"], "failure_type": f["type"], "instance": f"{self.hosts[n]}:9400",
                "uuid": uuid, "precursors": [p["name"] for p in f["prec"]],
                "lead_s": max((p["lead"] for p in f["prec"]), default=None),
                "job": f.get("job"),
            })
        maint = [{"type": "maintenance", "node": self.hosts[n], "start": int(a), "end": int(b),
                  "reason": reason} for n in range(self.N) for a, b, reason in self.down[n]
                 if a < self.end]
        labels = fail_labels + self.labels + maint
        labels.sort(key=lambda d: (d.get("time", d.get("start")), d["node"]))
        with open(os.path.join(out, "labels.jsonl"), "w") as fh:
            for d in labels:
                fh.write(json.dumps(d) + "\n")
        inv = {"cluster": f"style-e-{self.seed}", "model": MODEL, "driver": DRIVER,
               "nodes": [{"hostname": self.hosts[n], "ip": self.ips[n], "rack": self.rack[n],
                          "gpus": [{"index": gi, "uuid": self.uuid0[n * self.Gp + gi],
                                    "pci_bus_id": f"00000000:{self.bus[gi].upper()}:00.0",
                                    "serial": self.serial0[n * self.Gp + gi]}
                                   for gi in range(self.Gp)]}
                         for n in range(self.N)],
               "replacements": [x for x in self.replacements if x["time"] < self.end]}
        with open(os.path.join(out, "inventory.json"), "w") as fh:
            json.dump(inv, fh, indent=1)
        precs = {}
        for f in self.failures:
            for p in f["prec"]:
                precs[p["name"]] = precs.get(p["name"], 0) + 1
        jobs_in = list(self.job_by_id.values())
        summary = {
            "nodes": self.N, "gpus": self.Gp, "days": self.args.days, "seed": self.seed,
            "interval_s": self.iv, "failures": len(self.failures),
            "app_xids": len(self.labels), "maintenance": len(maint), "style": "e",
            "start": T_START, "end": self.end,
            "failure_types": {t: sum(1 for f in self.failures if f["type"] == t)
                              for t in sorted({f["type"] for f in self.failures})},
            "failures_without_precursor": sum(1 for f in self.failures if not f["prec"]),
            "precursor_counts": precs,
            "jobs": len(jobs_in),
            "jobs_app_xid_crash": sum(1 for j in jobs_in if j.crash == "xid"
                                      and T_START <= j.crash_t < self.end),
            "fan_degradations": len(self.fans),
            "thermal_excursions": len(self.thermal),
            "exporter_restarts": len(self.exp_restart),
            "prometheus_outages": len(self.outages),
            "gpu_replacements": len(inv["replacements"]),
            "gpu_busy_fraction": round(float((self.jobid >= 0).mean()), 3),
            **self.stats,
        }
        with open(os.path.join(out, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=1)
        return summary


_CLUSTER = None


def _write_window(w):
    return _CLUSTER.write_window(w)


def main(argv=None):
    global _CLUSTER
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=int, default=30)
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--failures", type=int, default=None,
                    help="force this many hardware failures (default: random)")
    args = ap.parse_args(argv)
    t0 = time.time()
    c = Cluster(args)
    c.out = args.out
    os.makedirs(os.path.join(args.out, "metrics"), exist_ok=True)
    c.build_inventory()
    c.plan_events()
    c.schedule()
    c.finalize_downtime()
    c.render_jobs()
    c.render_hardware()
    c.apply_stalls()
    c.derive()
    c.presence()
    c.counters()
    c.node_series()
    c.write_kernel(args.out)
    summary = c.write_meta(args.out)
    t1 = time.time()
    c.prepare_writer()
    _CLUSTER = c
    if args.workers > 1:
        with mp.get_context("fork").Pool(args.workers) as pool:
            sizes = pool.map(_write_window, range(c.nwin))
    else:
        sizes = [c.write_window(w) for w in range(c.nwin)]
    t2 = time.time()
    print(json.dumps({"simulate_s": round(t1 - t0, 1), "write_s": round(t2 - t1, 1),
                      "bytes": int(sum(sizes)), "failures": summary["failures"],
                      "app_xids": summary["app_xids"], "maintenance": summary["maintenance"]}))


if __name__ == "__main__":
    main()
