"""How unevenly node exclusions fall on the fleet: counts per node, the Lorenz curve, top-k share
and Gini (from :func:`trainguard.nodehealth.concentration`), and lemon candidates (from
:func:`trainguard.nodehealth.node_health`).

The Lorenz curve of counts ``x`` over ``n`` nodes (nodes without exclusions included as 0):

1. sort the counts ascending;
2. point ``i`` (0..n) is ``(i / n, (x[0] + ... + x[i-1]) / sum(x))``: the poorest ``i / n`` of the
   nodes got that share of the exclusions; it starts at (0, 0) and ends at (1, 1);
3. the diagonal means every node the same; a curve hugging the bottom until the last few nodes
   means a few nodes take most exclusions (Gini = 1 - 2 * area under the curve).

With no exclusions the curve is the diagonal.

    >>> lorenz({"a": 3, "b": 1}, all_nodes=["a", "b", "c", "d"])
    ((0.0, 0.0), (0.25, 0.0), (0.5, 0.0), (0.75, 0.25), (1.0, 1.0))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainguard.analytics.runs import RunView
from trainguard.nodehealth import (
    Concentration,
    LemonPolicy,
    NodeHealth,
    concentration,
    node_health,
)
from trainguard.store import ExclusionRecord, Store


@dataclass(frozen=True, slots=True)
class ExclusionConcentration:
    """Exclusions per node over a set of runs and how concentrated they are.

        >>> c = exclusion_concentration({"a": 3, "b": 1}, ["a", "b", "c"], top_k=1)
        >>> c.summary.top_k_share
        0.75
    """

    counts: Mapping[str, int]
    """Exclusions per node, most first."""
    summary: Concentration
    lorenz: tuple[tuple[float, float], ...]

    def to_dict(self) -> dict[str, object]:
        return {"counts": dict(self.counts), **self.summary.to_dict(),
                "lorenz": [list(p) for p in self.lorenz]}


def exclusion_counts(source: Store | Iterable[ExclusionRecord]) -> dict[str, int]:
    """Exclusions per node (released ones included), most first."""
    records = source.exclusions() if isinstance(source, Store) else source
    counts = Counter(r.node for r in records)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def lorenz(counts: Mapping[str, int],
           all_nodes: Sequence[str] = ()) -> tuple[tuple[float, float], ...]:
    """The Lorenz curve of ``counts`` (module outline); ``all_nodes`` adds nodes with zero."""
    values = dict.fromkeys(all_nodes, 0)
    values.update(counts)
    xs = sorted(values.values())
    n, total = len(xs), sum(xs)
    if n == 0:
        return ((0.0, 0.0), (1.0, 1.0))
    points = [(0.0, 0.0)]
    running = 0
    for i, x in enumerate(xs, start=1):
        running += x
        points.append((i / n, running / total if total else i / n))
    return tuple(points)


def exclusion_concentration(counts: Mapping[str, int], all_nodes: Sequence[str] = (),
                            top_k: int = 3) -> ExclusionConcentration:
    """Counts, top-k share, Gini and Lorenz curve in one value."""
    ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return ExclusionConcentration(ordered, concentration(ordered, top_k, all_nodes),
                                  lorenz(ordered, all_nodes))


def select_exclusions(records: Iterable[ExclusionRecord], *,
                      session_ids: Collection[int] | None = None,
                      since: float | None = None) -> list[ExclusionRecord]:
    """Exclusions made by the sessions in ``session_ids`` (all, operator exclusions included,
    when None) and created at/after ``since`` (when given)."""
    return [r for r in records
            if (session_ids is None or r.session_id in session_ids)
            and (since is None or r.created >= since)]


def run_nodes(runs: Iterable[RunView]) -> list[str]:
    """Every node an attempt of ``runs`` ran on, sorted."""
    return sorted({node for run in runs for a in run.attempts for node in a.nodes})


def lemon_candidates(store: Store, now: float,
                     policy: LemonPolicy | None = None) -> list[NodeHealth]:
    """Nodes whose lemon score marks them as repeat offenders, worst first."""
    return [h for h in node_health(store, now, policy) if h.lemon]


__all__ = [
    "ExclusionConcentration",
    "exclusion_concentration",
    "exclusion_counts",
    "lemon_candidates",
    "lorenz",
    "run_nodes",
    "select_exclusions",
]
