"""Fault rates per node-day with exact Poisson (Garwood) intervals, and the MTBF a job sees.

Definitions:

- numerator: the faults that count in the window (they start in it, see
  :mod:`trainguard.fleet.events`); every fault counts, overlapping ones included;
- denominator (exposure): ``fleet_size x window length`` in node-days. Nothing is subtracted: a
  node under repair still accrues exposure, so the rate is "faults per node-day of the fleet as
  provisioned", not per node-day in service;
- the interval is Garwood's exact one for the count, divided by the exposure;
- MTBF per node = fleet node-time / faults; a job on ``N`` nodes fails when any of its nodes
  does, so it sees ``N`` times the per-node rate: ``MTBF_N = MTBF_node / N``. Its interval is the
  rate interval inverted (an upper bound of infinity with no faults).

    >>> w = FleetWindow(0.0, 10 * 86400.0, fleet_size=4)
    >>> r = rate(20, w.node_days)
    >>> r.rate, round(mtbf_for_job(r, 2).mtbf_s / 3600, 1)
    (0.5, 24.0)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trainguard.errors import FleetError
from trainguard.fleet.events import DAY_S, FaultEvent, FleetWindow, counted_faults
from trainguard.fleet.poisson import garwood_interval


@dataclass(frozen=True, slots=True)
class Rate:
    """Faults per node-day with its exact interval."""

    faults: int
    node_days: float
    """Exposure: fleet_size x window days (module docstring)."""
    rate: float
    low: float
    high: float
    confidence: float

    def to_dict(self) -> dict[str, float | int]:
        return {"faults": self.faults, "node_days": self.node_days, "per_node_day": self.rate,
                "low": self.low, "high": self.high, "confidence": self.confidence}


@dataclass(frozen=True, slots=True)
class Mtbf:
    """Mean time between failures a job on ``job_nodes`` nodes sees, in seconds."""

    job_nodes: int
    mtbf_s: float
    """math.inf with no faults."""
    low_s: float
    high_s: float
    """math.inf when the rate's lower bound is 0 (no faults)."""

    def to_dict(self) -> dict[str, float | int | None]:
        def finite(v: float) -> float | None:
            return v if math.isfinite(v) else None
        return {"job_nodes": self.job_nodes, "mtbf_s": finite(self.mtbf_s),
                "low_s": finite(self.low_s), "high_s": finite(self.high_s)}


@dataclass(frozen=True, slots=True)
class FleetRates:
    """The overall rate and the rates by category and by kind (most faults first)."""

    window: FleetWindow
    overall: Rate
    by_category: Mapping[str, Rate]
    by_kind: Mapping[str, Rate]


def rate(faults: int, node_days: float, confidence: float = 0.95) -> Rate:
    """``faults`` over ``node_days`` of exposure, with its Garwood interval."""
    if faults < 0:
        raise FleetError(f"a fault count cannot be negative, got {faults}")
    if not node_days > 0 or not math.isfinite(node_days):
        raise FleetError(f"exposure must be a positive number of node-days, got {node_days}")
    low, high = garwood_interval(faults, confidence)
    return Rate(faults, node_days, faults / node_days, low / node_days, high / node_days,
                confidence)


def _rates_by(counts: Counter[str], node_days: float, confidence: float) -> dict[str, Rate]:
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {key: rate(n, node_days, confidence) for key, n in ordered}


def fault_rates(events: Iterable[FaultEvent], window: FleetWindow,
                confidence: float = 0.95) -> FleetRates:
    """Faults per node-day in ``window``: overall, by category and by kind."""
    faults = counted_faults(events, window)
    exposure = window.node_days
    return FleetRates(window, rate(len(faults), exposure, confidence),
                      _rates_by(Counter(f.category for f in faults), exposure, confidence),
                      _rates_by(Counter(f.kind for f in faults), exposure, confidence))


def mtbf_for_job(node_rate: Rate, job_nodes: int = 1) -> Mtbf:
    """MTBF of a job on ``job_nodes`` nodes from the per-node rate: ``MTBF_node / N``."""
    if job_nodes < 1:
        raise FleetError(f"a job needs at least one node, got {job_nodes}")

    def per_job(per_node_day: float) -> float:
        return math.inf if per_node_day == 0 else DAY_S / (per_node_day * job_nodes)
    return Mtbf(job_nodes, per_job(node_rate.rate), per_job(node_rate.high),
                per_job(node_rate.low))


def mtbf_by_job_size(node_rate: Rate, sizes: Iterable[int] = (1, 8, 16, 32, 64)) -> list[Mtbf]:
    """:func:`mtbf_for_job` for each job size in ``sizes``."""
    return [mtbf_for_job(node_rate, n) for n in sizes]


__all__ = [
    "FleetRates",
    "Mtbf",
    "Rate",
    "fault_rates",
    "mtbf_by_job_size",
    "mtbf_for_job",
    "rate",
]
