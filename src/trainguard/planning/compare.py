"""The analytic model and the trace-driven replay side by side, and whether the model may be
trusted on this fault history.

The model (:mod:`.model`) assumes independent nodes failing at constant rates: outage starts
then form (close to) a Poisson process. :func:`burstiness` tests that on the trace: the index
of dispersion (variance / mean) of outage starts per hour and per day, which is 1 for Poisson
and grows with bursts, and the share of outages that begin within ``window_s`` of another
node's, against the share a Poisson process of the same rate would give. Where the test fails,
or where model and replay disagree by more than the tolerances, the row's answer is the
replay's ("the replay says so").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trainguard.errors import ConfigError
from trainguard.planning.model import (
    JobPlan,
    NodeReliability,
    daly_interval,
    expected_ettr,
    job_mtbf_s,
    spares_needed,
    wait_fraction,
)
from trainguard.planning.replay import replay, replay_spares_needed
from trainguard.planning.trace import OutageTable, estimate_reliability

JOB_SIZES = (8, 16, 32, 64, 128, 256)
ETTR_TOLERANCE_PP = 2.0
"""Model and replay agree when their ETTRs differ by at most this (percentage points) ..."""
SPARES_TOLERANCE = 1
"""... and their spare-pool answers by at most this many nodes."""


@dataclass(frozen=True, slots=True)
class Burstiness:
    """Whether outage starts look like a Poisson process (module docstring)."""

    faults: int
    dispersion_hour: float | None
    """Variance / mean of starts per hour; None with too few bins or no faults."""
    dispersion_day: float | None
    clustered_fraction: float
    """Share of outages beginning within ``window_s`` of another node's."""
    expected_clustered: float
    """That share for a Poisson process of the same rate."""
    window_s: float
    reasons: tuple[str, ...]
    """Why the trace is flagged; empty when it is not."""

    @property
    def bursty(self) -> bool:
        return bool(self.reasons)


def _dispersion(starts: npt.NDArray[np.float64], t0: float, t1: float,
                width: float) -> tuple[float, int] | None:
    bins = int((t1 - t0) // width)
    if bins < 10 or starts.size == 0:
        return None
    counts = np.bincount(((starts - t0) // width).astype(np.int64), minlength=bins)[:bins]
    mean = float(np.mean(counts))
    return (float(np.var(counts, ddof=1)) / mean if mean > 0 else 1.0), bins


def burstiness(table: OutageTable, *, window_s: float = 300.0, z: float = 3.0,
               min_dispersion: float = 1.5) -> Burstiness:
    """Flag the trace when a dispersion index exceeds both ``1 + z`` standard errors of a
    Poisson one (``sqrt(2 / (bins - 1))``) and ``min_dispersion``, or when the clustered share
    is at least 0.1 and over three times the Poisson share."""
    if not window_s > 0:
        raise ConfigError(f"window must be > 0 seconds, got {window_s}")
    fleet = table.fleet
    began = table.start > fleet.start_s
    starts, nodes = table.start[began], table.node[began]  # the table is sorted by start
    reasons: list[str] = []
    found: dict[str, float | None] = {}
    for label, width in (("hour", 3600.0), ("day", 86400.0)):
        got = _dispersion(starts, fleet.start_s, fleet.end_s, width)
        found[label] = None if got is None else got[0]
        if got is not None:
            d, bins = got
            if d > max(min_dispersion, 1.0 + z * math.sqrt(2.0 / (bins - 1))):
                reasons.append(f"outage starts per {label} vary {d:.1f}x as much as Poisson")
    clustered = 0
    for i in range(starts.size):
        lo = np.searchsorted(starts, starts[i] - window_s, side="left")
        hi = np.searchsorted(starts, starts[i] + window_s, side="right")
        if np.any(nodes[lo:hi] != nodes[i]):
            clustered += 1
    share = clustered / starts.size if starts.size else 0.0
    rate = starts.size / fleet.span_s
    expected = -math.expm1(-2.0 * rate * window_s)
    if share >= 0.1 and share > 3.0 * expected:
        reasons.append(f"{share:.0%} of outages begin within {window_s:g} s of another node's "
                       f"(Poisson: {expected:.1%})")
    return Burstiness(int(starts.size), found["hour"], found["day"], share, expected, window_s,
                      tuple(reasons))


@dataclass(frozen=True, slots=True)
class CompareRow:
    """Model and replay for one job size (at Daly's interval and the model's spare count)."""

    nodes: int
    interval_s: float
    spares: int
    """Spares both sides were evaluated with: the model's answer."""
    model_spares: int | None
    replay_spares: int | None
    model_ettr: float
    replay_ettr: float
    replay_ettr_spread: float
    model_wait: float
    replay_wait: float
    replay_failures: float
    answer_from: str
    """"model", or "replay" where the model's assumptions or answers fail here."""
    reasons: tuple[str, ...]

    @property
    def ettr_gap_pp(self) -> float:
        """Model minus replay, percentage points."""
        return 100.0 * (self.model_ettr - self.replay_ettr)


@dataclass(frozen=True, slots=True)
class Comparison:
    reliability: NodeReliability
    burstiness: Burstiness
    max_wait_fraction: float
    rows: tuple[CompareRow, ...]


def _spares_said(count: int | None) -> str:
    return "none the fleet allows" if count is None else str(count)


def trust(bursts: Burstiness, gap_pp: float, model_spares: int | None,
          replay_spares: int | None) -> tuple[str, tuple[str, ...]]:
    """Which answer to take for one job size, and why: "replay" when the trace is bursty, the
    model's ETTR is more than :data:`ETTR_TOLERANCE_PP` off the replay's (``gap_pp`` = model
    minus replay), or the spare answers differ by more than
    :data:`SPARES_TOLERANCE` (or either finds none); else "model" with no reasons."""
    reasons = list(bursts.reasons)
    if abs(gap_pp) > ETTR_TOLERANCE_PP:
        reasons.append(f"model ETTR is {gap_pp:+.1f} pp off the replay's")
    if model_spares is None and replay_spares is None:
        reasons.append("no spare count the fleet allows meets the wait target")
    elif model_spares is None or replay_spares is None \
            or abs(model_spares - replay_spares) > SPARES_TOLERANCE:
        reasons.append(f"spare answers differ: model {_spares_said(model_spares)}, "
                       f"replay {_spares_said(replay_spares)}")
    return ("replay" if reasons else "model"), tuple(reasons)


def compare_row(table: OutageTable, rel: NodeReliability, bursts: Burstiness, *, nodes: int,
                save_cost_s: float, restart_cost_s: float, max_wait_fraction: float,
                placements: int = 5, seed: int = 0) -> CompareRow:
    """One job size: both answers, and which one to take."""
    room = table.fleet.size - nodes
    if room < 0:
        raise ConfigError(f"a {nodes}-node job does not fit a {table.fleet.size}-node fleet")
    p = rel.down_probability
    model_s = spares_needed(nodes, p, max_wait_fraction, max_spares=room)
    replay_s = replay_spares_needed(table, nodes, max_wait_fraction, count=placements,
                                    seed=seed, max_spares=room)
    spares = room if model_s is None else model_s
    tau = daly_interval(save_cost_s=save_cost_s, mtbf_s=job_mtbf_s(nodes, rel))
    if not 0 < tau < math.inf:
        tau = 86400.0
    plan = JobPlan(nodes, spares, tau, save_cost_s, restart_cost_s)
    model_ettr = expected_ettr(plan, rel)
    summary = replay(table, plan, count=placements, seed=seed)
    source, reasons = trust(bursts, 100.0 * (model_ettr - summary.mean_ettr), model_s, replay_s)
    return CompareRow(nodes, tau, spares, model_s, replay_s, model_ettr, summary.mean_ettr,
                      summary.ettr_spread, wait_fraction(nodes, spares, p),
                      summary.mean_wait_fraction, summary.mean_failures, source, reasons)


def compare(table: OutageTable, *, save_cost_s: float, restart_cost_s: float,
            max_wait_fraction: float = 0.01, sizes: Sequence[int] = JOB_SIZES,
            placements: int = 5, seed: int = 0) -> Comparison:
    """Model vs replay for each job size that fits the fleet."""
    rel = estimate_reliability(table)
    bursts = burstiness(table)
    rows = tuple(compare_row(table, rel, bursts, nodes=n, save_cost_s=save_cost_s,
                             restart_cost_s=restart_cost_s,
                             max_wait_fraction=max_wait_fraction, placements=placements,
                             seed=seed)
                 for n in sizes if n <= table.fleet.size)
    return Comparison(rel, bursts, max_wait_fraction, rows)


__all__ = [
    "ETTR_TOLERANCE_PP",
    "JOB_SIZES",
    "SPARES_TOLERANCE",
    "Burstiness",
    "CompareRow",
    "Comparison",
    "burstiness",
    "compare",
    "compare_row",
    "trust",
]
