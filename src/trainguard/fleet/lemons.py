"""Lemon nodes by a test, not a fixed count, and whether faults cluster on a few nodes at all.

Definitions (faults are those that count in the window; every node has the window's length as
exposure; the fleet has ``fleet_size`` nodes, those without faults counting as 0):

1. the fleet rate gives each node an expected count ``mu = total faults / fleet_size`` (pooled:
   the node itself is part of the estimate, which makes the test conservative);
2. a node's p-value is the one-sided Poisson tail ``Pr(X >= count | mu)``;
3. lemons are the nodes Benjamini-Hochberg rejects at false-discovery rate ``q`` (0.05) over all
   ``fleet_size`` p-values; ``q_value`` is each node's BH-adjusted p-value;
4. over-dispersion: the index of dispersion ``D = s^2 / mean`` of the per-node counts (sample
   variance) and its test ``(n - 1) D ~ chi2(n - 1)`` under a homogeneous Poisson fleet
   (upper tail: more spread than Poisson);
5. concentration: the share of all faults on the top-``k`` nodes (and Gini), from
   :func:`trainguard.concentration.concentration`; the report's observation "3 of 63 nodes caused
   more than 50 % of exclusions" holds for this fleet when the top-3 share exceeds 0.5.

    >>> w = FleetWindow(0.0, 86400.0, fleet_size=4)
    >>> r = lemon_report([FaultEvent("a", float(i), None, "x", "x") for i in range(12)], w)
    >>> [n.node for n in r.nodes if n.lemon], r.top3_share > 0.5
    (['a'], True)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainguard.concentration import Concentration, concentration
from trainguard.errors import FleetError
from trainguard.fleet.events import FaultEvent, FleetWindow, counted_faults
from trainguard.fleet.poisson import chi2_sf, poisson_sf_at_least

DEFAULT_FDR = 0.05
REPORT_TOP_K = 3
REPORT_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class NodeTest:
    """One node's fault count against the fleet rate."""

    node: str
    faults: int
    expected: float
    p_value: float
    q_value: float
    """Benjamini-Hochberg adjusted p-value."""
    lemon: bool


@dataclass(frozen=True, slots=True)
class Dispersion:
    """Index of dispersion of the per-node counts and its chi-square p-value."""

    nodes: int
    mean: float
    variance: float
    index: float
    """variance / mean; 1 for a homogeneous Poisson fleet (0 when there are no faults)."""
    statistic: float
    p_value: float


@dataclass(frozen=True, slots=True)
class LemonReport:
    """Per-node tests (faulty nodes, most faults first), dispersion and concentration."""

    window: FleetWindow
    q: float
    nodes: Sequence[NodeTest]
    dispersion: Dispersion
    concentration: Concentration
    top3_share: float
    looks_like_report: bool
    """Top-3 share > 50 %: the report's "3 of 63 nodes caused >50 % of exclusions"."""

    @property
    def lemons(self) -> list[str]:
        return [n.node for n in self.nodes if n.lemon]


def benjamini_hochberg(p_values: Sequence[float], q: float = DEFAULT_FDR,
                       ) -> tuple[list[float], list[bool]]:
    """BH-adjusted p-values and rejections at FDR ``q``, in the order given."""
    if not 0.0 < q < 1.0:
        raise FleetError(f"false-discovery rate must be between 0 and 1, got {q}")
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, p_values[i] * m / rank)
        adjusted[i] = running
    cutoff = max((r for r in range(1, m + 1) if p_values[order[r - 1]] <= r * q / m), default=0)
    rejected = [False] * m
    for rank in range(cutoff):
        rejected[order[rank]] = True
    return adjusted, rejected


def dispersion(counts: Sequence[int]) -> Dispersion:
    """Index of dispersion of ``counts`` (one per node, zeros included) and its p-value."""
    n = len(counts)
    if n < 2:
        raise FleetError(f"a dispersion test needs at least 2 nodes, got {n}")
    mean = sum(counts) / n
    ss = sum((c - mean) ** 2 for c in counts)
    variance = ss / (n - 1)
    if mean == 0:
        return Dispersion(n, 0.0, 0.0, 0.0, 0.0, 1.0)
    stat = ss / mean
    return Dispersion(n, mean, variance, variance / mean, stat, chi2_sf(stat, n - 1))


def node_counts(faults: Iterable[FaultEvent], fleet_size: int) -> list[int]:
    """Faults per node, padded with zeros to ``fleet_size`` nodes, most first."""
    counts = sorted(Counter(f.node for f in faults).values(), reverse=True)
    return counts + [0] * (fleet_size - len(counts))


def lemon_report(events: Iterable[FaultEvent], window: FleetWindow, q: float = DEFAULT_FDR,
                 top_k: int = REPORT_TOP_K) -> LemonReport:
    """Lemons, over-dispersion and concentration of the faults that count in ``window``."""
    faults = counted_faults(events, window)
    per_node: Mapping[str, int] = Counter(f.node for f in faults)
    ordered = sorted(per_node.items(), key=lambda kv: (-kv[1], kv[0]))
    n = window.fleet_size
    mu = len(faults) / n
    # Nodes without faults have p = 1; they enter BH's m as such.
    p_values = [poisson_sf_at_least(c, mu) for _, c in ordered]
    p_values += [1.0] * (n - len(ordered))
    adjusted, rejected = benjamini_hochberg(p_values, q)
    tests = [NodeTest(node, c, mu, p_values[i], adjusted[i], rejected[i])
             for i, (node, c) in enumerate(ordered)]
    counts = node_counts(faults, n)
    spread = dispersion(counts) if n >= 2 else Dispersion(n, mu, 0.0, 0.0, 0.0, 1.0)
    padded = {f"#{i}": c for i, c in enumerate(counts)}
    conc = concentration(padded, top_k)
    top3 = concentration(padded, REPORT_TOP_K).top_k_share
    return LemonReport(window, q, tests, spread, conc, top3, top3 > REPORT_SHARE)


__all__ = [
    "DEFAULT_FDR",
    "Dispersion",
    "LemonReport",
    "NodeTest",
    "benjamini_hochberg",
    "dispersion",
    "lemon_report",
    "node_counts",
]
