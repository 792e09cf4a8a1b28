"""Every fleet figure of one window, assembled from the pure functions of :mod:`trainguard.fleet`.

Definitions (those of the modules it composes, restated where the figure is made here):

- *faults*: the events that start in ``[window.start, window.end)``; every one counts, however
  it overlaps others. Events that started before the window are down time only;
- *exposure*: ``fleet_size x window days`` node-days, down time not subtracted;
- *rates*: faults per node-day, overall, by category and by kind, each with Garwood's exact
  Poisson interval at ``confidence``; *MTBF per node* = 1 / rate, *MTBF of an N-node job* =
  MTBF per node / N (the interval inverted). Job sizes above the fleet size are left out, and
  the fleet size itself is added in their place (a job on the whole fleet);
- *repair time*: ``end - start`` of each closed fault (open ones have none and are counted
  apart); median and p90 interpolate; the *tail share* is the share of the total repair time
  held by the longest ``tail_fraction`` of repairs; ``longest`` lists the longest few;
- *nodes down*: the union of each node's faults (an open one lasts to the window's end) swept
  over the window: the fraction of time with exactly 0, 1, 2... nodes down, the time-weighted
  mean, p99 and max, and per time bucket the maximum and the mean (hourly, or coarser so that
  a long window has at most :data:`MAX_BUCKETS`);
- *lemons*: each node's count against ``Poisson(faults / fleet_size)`` (one-sided tail),
  Benjamini-Hochberg over all ``fleet_size`` nodes at ``fdr``; *over-dispersion*: the index of
  dispersion ``s^2 / mean`` of the per-node counts (zeros included) with its chi-square
  p-value; ``count_bins``: nodes with 0, 1, 2... faults against ``fleet_size x Poisson pmf``;
- *top-k share*: the faults on the ``k`` nodes with most faults over all faults; its *Poisson
  expectation* is analytic: the expected sum of the ``k`` largest of ``fleet_size`` independent
  Poisson(faults / fleet_size) counts over the expected total (``faults``), see
  :func:`trainguard.fleet.poisson.poisson_top_k_mean`;
- the report's "3 of 63 nodes caused > 50 % of exclusions" (:class:`ReportComparison`): this
  fleet looks like that when its top-3 share exceeds 50 %; the same is shown for the top
  ``ceil(3/63 x fleet_size)`` nodes (the report's share of nodes, at this fleet's size).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainguard.errors import FleetError
from trainguard.fleet.down import (
    DownBucket,
    NodesDown,
    down_series,
    down_steps,
    mean_down,
    nodes_down,
)
from trainguard.fleet.events import FaultEvent, FleetWindow, counted_faults
from trainguard.fleet.lemons import (
    DEFAULT_FDR,
    REPORT_SHARE,
    REPORT_TOP_K,
    LemonReport,
    lemon_report,
    node_counts,
)
from trainguard.fleet.poisson import poisson_pmf, poisson_top_k_mean
from trainguard.fleet.rates import FleetRates, Mtbf, fault_rates, mtbf_by_job_size, mtbf_for_job
from trainguard.fleet.repairs import DEFAULT_TAIL_FRACTION, FleetRepairs, fleet_repairs

DEFAULT_JOB_SIZES = (1, 8, 16, 32, 64, 128, 256)
REPORT_FLEET = 63
"""The report's fleet: 3 of 63 nodes caused more than half of the exclusions."""
MAX_BUCKETS = 2000
_BUCKETS_S = (3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0)
LONGEST = 5


@dataclass(frozen=True, slots=True)
class LongRepair:
    """One of the longest repairs."""

    node: str
    kind: str
    category: str
    start: float
    duration_s: float


@dataclass(frozen=True, slots=True)
class DownSummary:
    """Nodes down over the window: the distribution, its mean, and a coarse series."""

    distribution: NodesDown
    mean: float
    bucket_s: float
    series: tuple[DownBucket, ...]

    def fraction_at(self) -> dict[int, float]:
        """Nodes down -> fraction of the window with exactly that many down."""
        length = self.distribution.window.length_s
        return {c: s / length for c, s in self.distribution.seconds_at.items()}


@dataclass(frozen=True, slots=True)
class TopShare:
    """Share of all faults on the ``nodes`` nodes with the most, and a Poisson fleet's."""

    nodes: int
    share: float
    poisson_share: float
    """Expected under a homogeneous Poisson fleet of the same size and rate (analytic)."""


@dataclass(frozen=True, slots=True)
class ReportComparison:
    """Does this fleet look like the report's "3 of 63 nodes caused > 50 % of exclusions"?"""

    top3: TopShare
    scaled: TopShare
    """The top ``ceil(3/63 x fleet_size)`` nodes: the report's share of the fleet."""
    threshold: float
    looks_like_report: bool
    """``top3.share > threshold``."""


@dataclass(frozen=True, slots=True)
class CountBin:
    """How many nodes had ``faults`` faults, and how many a Poisson fleet would have."""

    faults: int
    nodes: int
    expected: float


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """The fleet figures of one window (module docstring for every definition)."""

    window: FleetWindow
    confidence: float
    events: int
    """Events given (in the window or not)."""
    faults: int
    """Faults that count: they start in the window."""
    open_faults: int
    """Counted faults still open at the end of the record (no repair time)."""
    before_window: int
    """Events that started before the window: not its faults; what of them lies in the window
    is down time."""
    nodes_with_faults: int
    rates: FleetRates
    mtbf_node: Mtbf
    mtbf_jobs: tuple[Mtbf, ...]
    job_sizes_dropped: tuple[int, ...]
    """Requested job sizes above the fleet size (left out)."""
    repairs: FleetRepairs
    repair_times: Mapping[str, tuple[float, ...]]
    """Category -> its repair times, ascending (for the distribution chart)."""
    longest: tuple[LongRepair, ...]
    down: DownSummary
    lemons: LemonReport
    top_k: TopShare
    count_bins: tuple[CountBin, ...]
    report: ReportComparison


def job_sizes_within(sizes: Iterable[int], fleet_size: int) -> tuple[tuple[int, ...],
                                                                     tuple[int, ...]]:
    """(the sizes kept, ascending, distinct; the sizes dropped): sizes above ``fleet_size``
    are dropped and ``fleet_size`` itself is kept in their place."""
    wanted = sorted(set(sizes))
    if wanted and wanted[0] < 1:
        raise FleetError(f"a job needs at least one node, got job size {wanted[0]}")
    kept = [n for n in wanted if n <= fleet_size]
    dropped = tuple(n for n in wanted if n > fleet_size)
    if dropped and fleet_size not in kept:
        kept.append(fleet_size)
    return tuple(kept), dropped


def bucket_for(length_s: float) -> float:
    """The series' bucket: an hour, 6 hours, a day or a week, the first that gives at most
    :data:`MAX_BUCKETS` buckets (else ``length / MAX_BUCKETS``)."""
    for b in _BUCKETS_S:
        if math.ceil(length_s / b) <= MAX_BUCKETS:
            return b
    return length_s / MAX_BUCKETS


def top_share(counts: Sequence[int], k: int) -> TopShare:
    """Share of ``sum(counts)`` on the ``k`` largest counts (one per node, zeros included),
    with the analytic Poisson expectation for as many nodes at the same mean."""
    if k < 1:
        raise FleetError(f"top-k needs k >= 1, got {k}")
    total = sum(counts)
    if total == 0:
        return TopShare(k, 0.0, 0.0)
    share = sum(sorted(counts, reverse=True)[:k]) / total
    mu = total / len(counts)
    return TopShare(k, share, poisson_top_k_mean(len(counts), mu, k) / total)


def count_bins(counts: Sequence[int]) -> tuple[CountBin, ...]:
    """Nodes with each fault count 0..max, against ``len(counts) x Poisson pmf`` at the mean."""
    n = len(counts)
    mu = sum(counts) / n
    seen = Counter(counts)
    return tuple(CountBin(k, seen.get(k, 0), n * poisson_pmf(k, mu))
                 for k in range(max(counts, default=0) + 1))


def report_comparison(counts: Sequence[int]) -> ReportComparison:
    """The report's top-3 observation against this fleet's per-node counts."""
    top3 = top_share(counts, REPORT_TOP_K)
    scaled = top_share(counts, max(1, math.ceil(REPORT_TOP_K / REPORT_FLEET * len(counts))))
    return ReportComparison(top3, scaled, REPORT_SHARE, top3.share > REPORT_SHARE)


def _longest(faults: Iterable[FaultEvent], n: int) -> tuple[LongRepair, ...]:
    closed = [f for f in faults if f.end is not None]
    closed.sort(key=lambda f: (-(f.duration_s or 0.0), f.start, f.node))
    return tuple(LongRepair(f.node, f.kind, f.category, f.start, f.duration_s or 0.0)
                 for f in closed[:n])


def _repair_times(faults: Iterable[FaultEvent]) -> dict[str, tuple[float, ...]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for f in faults:
        if f.duration_s is not None:
            groups[f.category].append(f.duration_s)
    return {cat: tuple(sorted(xs)) for cat, xs in groups.items()}


def _down(events: Sequence[FaultEvent], window: FleetWindow) -> DownSummary:
    dist = nodes_down(events, window)
    bucket = bucket_for(window.length_s)
    series = down_series(down_steps(events, window), window, bucket)
    return DownSummary(dist, mean_down(dist.seconds_at), bucket, tuple(series))


def fleet_summary(events: Iterable[FaultEvent], window: FleetWindow, *,
                  job_sizes: Iterable[int] = DEFAULT_JOB_SIZES, top_k: int = REPORT_TOP_K,
                  confidence: float = 0.95, fdr: float = DEFAULT_FDR,
                  tail_fraction: float = DEFAULT_TAIL_FRACTION,
                  longest: int = LONGEST) -> FleetSummary:
    """The fleet figures of ``events`` in ``window`` (module docstring)."""
    if top_k < 1:
        raise FleetError(f"top-k needs k >= 1, got {top_k}")
    given = list(events)
    faults = counted_faults(given, window)
    sizes, dropped = job_sizes_within(job_sizes, window.fleet_size)
    rates = fault_rates(faults, window, confidence)
    counts = node_counts(faults, window.fleet_size)
    return FleetSummary(
        window=window, confidence=confidence, events=len(given), faults=len(faults),
        open_faults=sum(1 for f in faults if f.end is None),
        before_window=sum(1 for e in given if e.start < window.start),
        nodes_with_faults=len({f.node for f in faults}),
        rates=rates, mtbf_node=mtbf_for_job(rates.overall, 1),
        mtbf_jobs=tuple(mtbf_by_job_size(rates.overall, sizes)), job_sizes_dropped=dropped,
        repairs=fleet_repairs(faults, window, tail_fraction),
        repair_times=_repair_times(faults), longest=_longest(faults, longest),
        down=_down(given, window),
        lemons=lemon_report(faults, window, fdr, top_k),
        top_k=top_share(counts, top_k), count_bins=count_bins(counts),
        report=report_comparison(counts))


__all__ = [
    "DEFAULT_JOB_SIZES",
    "MAX_BUCKETS",
    "REPORT_FLEET",
    "CountBin",
    "DownSummary",
    "FleetSummary",
    "LongRepair",
    "ReportComparison",
    "TopShare",
    "bucket_for",
    "count_bins",
    "fleet_summary",
    "job_sizes_within",
    "report_comparison",
    "top_share",
]
