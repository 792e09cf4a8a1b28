"""The whole run drawn up front: the fleet, the jobs and every event, before any telemetry.

    >>> from trainguard.simulate.config import SimConfig
    >>> sc = build_scenario(SimConfig(nodes=4, gpus_per_node=2, days=0.5, seed=1))
    >>> sc.fleet.node_names
    ('node01', 'node02', 'node03', 'node04')
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.simulate.config import SimConfig
from trainguard.simulate.faults import (
    AppXid,
    Benign,
    Failure,
    Outage,
    ScrapeGap,
    draw_benign,
    draw_failures,
    draw_maintenance,
    draw_scrape_gaps,
    repair_outages,
)
from trainguard.simulate.workload import Job, schedule_jobs

__all__ = ["Fleet", "Scenario", "build_scenario", "rng_for"]

# HGX H100 baseboard bus ids; more GPUs per node continue the pattern.
_PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
_STREAMS = {"fleet": 1, "failures": 2, "maintenance": 3, "jobs": 4, "benign": 5, "gaps": 6}


def rng_for(seed: int, stream: str | int, *extra: int) -> np.random.Generator:
    """An independent, reproducible random stream per purpose (and per window)."""
    key = _STREAMS[stream] if isinstance(stream, str) else stream
    return np.random.default_rng([seed, key, *extra])


@dataclass(frozen=True, eq=False)
class Fleet:
    """The hardware: names, identities and fixed per-node / per-GPU offsets."""

    node_names: tuple[str, ...]
    gpus_per_node: int
    uuids: tuple[tuple[str, ...], ...]
    """uuids[node][gpu]"""
    pci: tuple[str, ...]
    """PCI bus id per GPU index (same on every node), e.g. "0000:18:00.0"."""
    boot_s: tuple[int, ...]
    """Boot time of each node before the span."""
    gpu_temp_offset: np.ndarray
    """(nodes*gpus,) degrees C: some GPUs run hotter (airflow position, paste)."""
    gpu_power_scale: np.ndarray
    """(nodes*gpus,) silicon lottery: power draw at equal work."""
    node_power_scale: np.ndarray
    """(nodes,) PSU / firmware differences."""
    sbe_agg_base: np.ndarray
    """(nodes*gpus,) lifetime SBE count before the span (most 0)."""
    remap_base: np.ndarray
    """(nodes*gpus,) correctable remapped rows before the span (most 0)."""
    cpu_cores: int = 96


def _draw_fleet(cfg: SimConfig) -> Fleet:
    rng = rng_for(cfg.seed, "fleet")
    g = cfg.nodes * cfg.gpus_per_node

    def uuid() -> str:
        h = rng.bytes(16).hex()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    uuids = tuple(tuple(uuid() for _ in range(cfg.gpus_per_node)) for _ in range(cfg.nodes))
    pci = tuple(f"0000:{_PCI_BUSES[i % 8] + i // 8:02x}:00.0" for i in range(cfg.gpus_per_node))
    boot = tuple(int(cfg.start_s - rng.uniform(2, 60) * 86400) for _ in range(cfg.nodes))
    sbe = np.where(rng.random(g) < 0.05, rng.integers(1, 40, g), 0).astype(np.float64)
    remap = np.where(rng.random(g) < 0.03, rng.integers(1, 4, g), 0).astype(np.float64)
    return Fleet(
        node_names=cfg.node_names, gpus_per_node=cfg.gpus_per_node, uuids=uuids, pci=pci,
        boot_s=boot, gpu_temp_offset=rng.normal(0, 2.5, g),
        gpu_power_scale=rng.normal(1.0, 0.025, g), node_power_scale=rng.normal(1.0, 0.03,
                                                                               cfg.nodes),
        sbe_agg_base=sbe, remap_base=remap)


@dataclass(frozen=True, eq=False)
class Scenario:
    """Everything that happens in one run; the ground truth is derived from it."""

    cfg: SimConfig
    fleet: Fleet
    jobs: tuple[Job, ...]
    failures: tuple[Failure, ...]
    app_xids: tuple[AppXid, ...]
    outages: tuple[Outage, ...]
    benign: tuple[Benign, ...]
    gaps: tuple[ScrapeGap, ...]


def build_scenario(cfg: SimConfig) -> Scenario:
    fleet = _draw_fleet(cfg)
    failures = draw_failures(cfg, rng_for(cfg.seed, "failures"))
    maintenance = draw_maintenance(cfg, rng_for(cfg.seed, "maintenance"), failures)
    jobs, app_xids, job_benign = schedule_jobs(cfg, rng_for(cfg.seed, "jobs"), failures,
                                               maintenance)
    outages = sorted([*maintenance, *repair_outages(failures)],
                     key=lambda o: (o.start_s, o.node))
    blocked: list[list[tuple[int, int]]] = [[] for _ in range(cfg.nodes)]
    for f in failures:
        blocked[f.node].append(((f.precursor_start_s or f.time_s) - 1800, f.back_s))
    for o in outages:
        blocked[o.node].append((o.start_s, o.end_s))
    benign = draw_benign(cfg, rng_for(cfg.seed, "benign"), blocked)
    benign += [b for b in job_benign
               if b.end_s > cfg.start_s and b.start_s < cfg.end_s]
    benign.sort(key=lambda b: (b.start_s, b.node, b.what))
    in_span = [x for x in app_xids if cfg.start_s <= x.time_s < cfg.end_s]
    return Scenario(cfg, fleet, tuple(j for j in jobs if j.end_s > cfg.start_s - 3600),
                    tuple(failures), tuple(in_span), tuple(outages), tuple(benign),
                    tuple(draw_scrape_gaps(cfg, rng_for(cfg.seed, "gaps"))))
