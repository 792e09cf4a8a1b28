"""Synthetic outage histories for the planning tests, drawn with seeded numpy generators."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trainguard.fleet import FaultEvent, FleetWindow, category_of
from trainguard.planning import Fleet, Outage, OutageTable, PlanningReport, planning_report

YEAR_S = 365 * 86400.0

TraceMaker = Callable[..., OutageTable]


def poisson_outages(nodes: int, mtbf_s: float, repair_s: float, span_s: float,
                    seed: int) -> list[Outage]:
    """Each node alternates exponential up (mean ``mtbf_s``) and down (mean ``repair_s``)
    times, starting in its stationary state."""
    rng = np.random.default_rng(seed)
    out: list[Outage] = []
    for i in range(nodes):
        t = 0.0
        if rng.random() < repair_s / (mtbf_s + repair_s):
            t = float(rng.exponential(repair_s))
            out.append(Outage(f"n{i}", 0.0, t))
        while True:
            t += float(rng.exponential(mtbf_s))
            if t >= span_s:
                break
            end = t + float(rng.exponential(repair_s))
            out.append(Outage(f"n{i}", t, end))
            t = end
    return out


def bursty_outages(nodes: int, bursts_per_day: float, burst_size: int, repair_s: float,
                   span_s: float, seed: int) -> list[Outage]:
    """Correlated faults: at Poisson burst times, ``burst_size`` random nodes go down within a
    minute of each other."""
    rng = np.random.default_rng(seed)
    out: list[Outage] = []
    t = 0.0
    while True:
        t += float(rng.exponential(86400.0 / bursts_per_day))
        if t >= span_s:
            return out
        for i in rng.choice(nodes, size=burst_size, replace=False):
            s = t + float(rng.uniform(0.0, 60.0))
            out.append(Outage(f"n{i}", s, s + float(rng.exponential(repair_s))))


def fleet_of(nodes: int, span_s: float = YEAR_S) -> Fleet:
    return Fleet(tuple(f"n{i}" for i in range(nodes)), 0.0, span_s)


def fault_events(outages: list[Outage], kind: str = "GPU / Xid 79") -> list[FaultEvent]:
    """The outages as a fleet's fault events (one fault each)."""
    return [FaultEvent(o.node, o.start, o.end, kind, category_of(kind)) for o in outages]


def plan_report(events: list[FaultEvent], window: FleetWindow, job_sizes: tuple[int, ...],
                **kw: Any) -> PlanningReport:
    """The planning report with a 2-minute checkpoint save and a 10-minute restart."""
    return planning_report(events, window, job_sizes=job_sizes, save_cost_s=120.0,
                           restart_cost_s=600.0, **kw)
