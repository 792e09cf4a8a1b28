"""What goes wrong: hardware failures with their precursors, maintenance, benign look-alikes.

Everything here is drawn once per run, before any telemetry, as plain event records; the
telemetry model (`model.py`) then renders each record's effect on the metrics.

Outline of `draw_failures`:
1. the number of failures is Poisson(failures_per_day * days), times uniform over the span;
2. each picks a node, an XID kind (weighted), a GPU (or every GPU: node-level), a precursor shape
   allowed for that XID (or none, with probability `no_precursor_fraction`), a precursor length
   (log-uniform 5 min .. 3 h) and a magnitude (log-uniform, so some precursors are faint);
3. a draw whose precursor..repair span overlaps an earlier one on the same node is re-drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.simulate.config import SimConfig

__all__ = [
    "BENIGN_KINDS",
    "FAILURE_KINDS",
    "PRECURSOR_SHAPES",
    "AppXid",
    "Benign",
    "Failure",
    "FailureKind",
    "Outage",
    "ScrapeGap",
    "draw_benign",
    "draw_failures",
    "draw_maintenance",
    "draw_scrape_gaps",
    "repair_outages",
]

PRECURSOR_SHAPES = ("pcie_replay", "ecc_sbe", "nvlink_crc", "thermal_creep",
                    "power_oscillation", "util_stall")


@dataclass(frozen=True, slots=True)
class FailureKind:
    """One hardware failure XID: how likely, which precursors can lead to it, what it does."""

    xid: int
    weight: float
    shapes: tuple[str, ...]
    vanishes: bool
    """The GPU drops off the bus: its series disappear at the XID."""
    reboot: bool
    """Repair takes the node offline (else a GPU reset while drained)."""
    message: str


FAILURE_KINDS: tuple[FailureKind, ...] = (
    FailureKind(79, 0.28, ("pcie_replay", "thermal_creep", "power_oscillation"), True, True,
                "GPU has fallen off the bus."),
    FailureKind(48, 0.09, ("ecc_sbe",), False, True,
                "An uncorrectable double bit error (DBE) has been detected on GPU in the "
                "framebuffer at partition 6, subpartition 0."),
    FailureKind(94, 0.10, ("ecc_sbe",), False, False,
                "Contained: SM (0x1). RST: No, D-RST: No"),
    FailureKind(95, 0.06, ("ecc_sbe",), False, True,
                "Uncontained: FBHUB. RST: Yes, D-RST: No"),
    FailureKind(74, 0.13, ("nvlink_crc",), False, True,
                "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"),
    FailureKind(119, 0.11, ("util_stall", "power_oscillation"), False, True,
                "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function "
                "76 (GSP_RM_CONTROL) (0x20802a02 0x8)."),
    FailureKind(64, 0.05, ("ecc_sbe",), False, True,
                "Row Remapper: Failed to remap row (0x00000000000132c0), uncorrectable error"),
    FailureKind(92, 0.06, ("ecc_sbe",), False, False, "High single-bit ECC error rate"),
    FailureKind(63, 0.05, ("ecc_sbe",), False, False,
                "Row Remapper: New row (0x00000000000132c0) Pending"),
    FailureKind(62, 0.04, ("thermal_creep", "util_stall"), False, True,
                "Internal micro-controller halt (PMU halt, offset 0x0)"),
    FailureKind(109, 0.03, ("util_stall", "power_oscillation"), False, True,
                "Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x2c014"),
)
_NODE_LEVEL_XIDS = (79, 74)

APP_XIDS = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
        "0x7f2d_3a000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000010",
}

BENIGN_KINDS: dict[str, float] = {
    "thermal_spike": 0.18,
    "sbe_single": 0.13,
    "pcie_replay_burst": 0.13,
    "nvlink_crc_blip": 0.09,
    "node_thermal_drift": 0.10,
    "power_cap": 0.10,
    "high_load_node": 0.05,
    "loader_stall": 0.12,
    "power_jitter": 0.10,
}
"""Benign anomaly -> relative frequency (job-wide `loader_stall` is placed by the scheduler)."""

_HOUR = 3600


@dataclass(frozen=True, slots=True)
class Failure:
    """One hardware failure: the XID, its precursor and the repair that follows."""

    node: int
    gpus: tuple[int, ...]
    node_level: bool
    time_s: int
    xid: int
    precursor: str
    """A `PRECURSOR_SHAPES` name, or "none"."""
    precursor_start_s: int | None
    magnitude: float
    """Scale of the precursor (about 0.2 .. 3)."""
    drain_s: int
    """Seconds from the XID until the node goes offline for repair (drained meanwhile)."""
    repair_s: int
    """Seconds offline (0: the GPU is reset, the node never disappears)."""
    vanishes: bool
    message: str

    @property
    def failure_type(self) -> str:
        return f"xid{self.xid}"

    @property
    def back_s(self) -> int:
        """When the node can run jobs again."""
        return self.time_s + self.drain_s + self.repair_s


@dataclass(frozen=True, slots=True)
class Outage:
    """A node's series vanish over [start_s, end_s); counters reset when it returns."""

    node: int
    start_s: int
    end_s: int
    reason: str
    """"maintenance" or "repair"."""


@dataclass(frozen=True, slots=True)
class AppXid:
    """An application XID that hit every node of one job at once (the job then stops)."""

    job: str
    time_s: int
    xid: int
    nodes: tuple[int, ...]
    gpus: tuple[int, ...]
    """GPU indices hit on each node."""

    @property
    def message(self) -> str:
        return APP_XIDS[self.xid]


@dataclass(frozen=True, slots=True)
class Benign:
    """A harmless anomaly that resembles a failure precursor."""

    what: str
    node: int
    gpu: int | None
    start_s: int
    end_s: int
    magnitude: float
    job: str | None = None


@dataclass(frozen=True, slots=True)
class ScrapeGap:
    """The node's exporters were not scraped over [start_s, end_s)."""

    node: int
    start_s: int
    end_s: int


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))


def _overlaps(spans: list[tuple[int, int]], lo: int, hi: int) -> bool:
    return any(a < hi and lo < b for a, b in spans)


def draw_failures(cfg: SimConfig, rng: np.random.Generator) -> list[Failure]:
    n = int(rng.poisson(cfg.failures_per_day * cfg.days))
    weights = np.array([k.weight for k in FAILURE_KINDS])
    weights /= weights.sum()
    busy: list[list[tuple[int, int]]] = [[] for _ in range(cfg.nodes)]
    out: list[Failure] = []
    for _ in range(n):
        for _attempt in range(20):
            f = _one_failure(cfg, rng, weights)
            lo = (f.precursor_start_s or f.time_s) - _HOUR
            if not _overlaps(busy[f.node], lo, f.back_s + _HOUR):
                busy[f.node].append((lo, f.back_s + _HOUR))
                out.append(f)
                break
    out.sort(key=lambda f: (f.time_s, f.node))
    return out


def _one_failure(cfg: SimConfig, rng: np.random.Generator, weights: np.ndarray) -> Failure:
    node = int(rng.integers(cfg.nodes))
    time_s = int(rng.integers(cfg.start_s + 600, max(cfg.start_s + 601, cfg.end_s - 60)))
    node_level = bool(rng.random() < cfg.node_level_fraction)
    if node_level:
        xid = _NODE_LEVEL_XIDS[int(rng.integers(len(_NODE_LEVEL_XIDS)))]
        kind = next(k for k in FAILURE_KINDS if k.xid == xid)
        gpus = tuple(range(cfg.gpus_per_node))
    else:
        kind = FAILURE_KINDS[int(rng.choice(len(FAILURE_KINDS), p=weights))]
        gpus = (int(rng.integers(cfg.gpus_per_node)),)
    if rng.random() < cfg.no_precursor_fraction:
        shape, pre_start = "none", None
    else:
        shape = kind.shapes[int(rng.integers(len(kind.shapes)))]
        pre_start = time_s - round(_log_uniform(rng, 300, 3 * _HOUR))
    drain_s = int(rng.integers(5 * 60, 45 * 60))
    repair_s = int(_log_uniform(rng, 1 * _HOUR, 10 * _HOUR)) if kind.reboot else 0
    if not kind.reboot:
        drain_s = int(rng.integers(15 * 60, 40 * 60))
    return Failure(node, gpus, node_level, time_s, kind.xid, shape, pre_start,
                   _log_uniform(rng, 0.2, 3.0), drain_s, repair_s, kind.vanishes, kind.message)


def draw_maintenance(cfg: SimConfig, rng: np.random.Generator,
                     failures: list[Failure]) -> list[Outage]:
    """Planned reboots (10-60 min offline) that avoid the failures' spans on the same node."""
    busy: list[list[tuple[int, int]]] = [[] for _ in range(cfg.nodes)]
    for f in failures:
        busy[f.node].append(((f.precursor_start_s or f.time_s) - 2 * _HOUR, f.back_s + _HOUR))
    out: list[Outage] = []
    for _ in range(int(rng.poisson(cfg.maintenances_per_day * cfg.days))):
        node = int(rng.integers(cfg.nodes))
        start = int(rng.integers(cfg.start_s, max(cfg.start_s + 1, cfg.end_s - 600)))
        end = start + int(rng.integers(10 * 60, 60 * 60))
        if not _overlaps(busy[node], start - _HOUR, end + _HOUR):
            busy[node].append((start, end))
            out.append(Outage(node, start, end, "maintenance"))
    return out


def repair_outages(failures: list[Failure]) -> list[Outage]:
    return [Outage(f.node, f.time_s + f.drain_s, f.back_s, "repair")
            for f in failures if f.repair_s > 0]


def draw_benign(cfg: SimConfig, rng: np.random.Generator,
                blocked: list[list[tuple[int, int]]]) -> list[Benign]:
    """Node/GPU-level benign anomalies (job-wide ones come from the scheduler)."""
    kinds = [k for k in BENIGN_KINDS if k != "loader_stall"]
    p = np.array([BENIGN_KINDS[k] for k in kinds])
    p /= p.sum()
    total = cfg.benign_per_day * cfg.days * (1 - BENIGN_KINDS["loader_stall"])
    out: list[Benign] = []
    for _ in range(int(rng.poisson(total))):
        what = kinds[int(rng.choice(len(kinds), p=p))]
        node = int(rng.integers(cfg.nodes))
        gpu: int | None = int(rng.integers(cfg.gpus_per_node))
        start = int(rng.integers(cfg.start_s, cfg.end_s))
        if what in ("sbe_single", "pcie_replay_burst", "nvlink_crc_blip"):
            length = 0
        elif what == "thermal_spike":
            length = int(rng.integers(5 * 60, 20 * 60))
        elif what == "power_jitter":
            length = int(rng.integers(5 * 60, 40 * 60))
        elif what == "high_load_node":
            length, gpu = int(_log_uniform(rng, 2 * _HOUR, 72 * _HOUR)), None
        elif what == "node_thermal_drift":
            length, gpu = int(rng.integers(1 * _HOUR, 4 * _HOUR)), None
        else:  # power_cap
            length, gpu = int(rng.integers(20 * 60, 60 * 60)), None
        end = min(start + length, cfg.end_s)
        if _overlaps(blocked[node], start - 600, end + 600):
            continue
        out.append(Benign(what, node, gpu, start, end, _log_uniform(rng, 0.5, 2.0)))
    out.sort(key=lambda b: (b.start_s, b.node))
    return out


def draw_scrape_gaps(cfg: SimConfig, rng: np.random.Generator) -> list[ScrapeGap]:
    out = []
    for _ in range(int(rng.poisson(cfg.scrape_gaps_per_day * cfg.days))):
        node = int(rng.integers(cfg.nodes))
        start = int(rng.integers(cfg.start_s, cfg.end_s))
        out.append(ScrapeGap(node, start, start + int(rng.integers(1, 6)) * cfg.interval_s))
    out.sort(key=lambda g: (g.start_s, g.node))
    return out
