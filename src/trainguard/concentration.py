"""How unevenly a count (exclusions, faults) falls on nodes: the top-k share and the Gini
coefficient, the report's "3 of 63 nodes caused more than half of all exclusions". Pure; used by
:mod:`trainguard.nodehealth` (exclusions) and :mod:`trainguard.fleet` (imported faults)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Concentration:
    """How unevenly a count (exclusions) falls on nodes."""

    total: int
    nodes: int
    top_k: int
    top_k_share: float
    """Share of the total on the ``top_k`` nodes with the most."""
    gini: float
    """0: every node the same; towards 1: all on one node (over the nodes given)."""

    def to_dict(self) -> dict[str, float | int]:
        return {"total": self.total, "nodes": self.nodes, "top_k": self.top_k,
                "top_k_share": round(self.top_k_share, 4), "gini": round(self.gini, 4)}


def concentration(counts: Mapping[str, int], top_k: int = 3,
                  all_nodes: Sequence[str] = ()) -> Concentration:
    """Top-k share and Gini coefficient of ``counts``; ``all_nodes`` adds nodes with zero."""
    values = {n: 0 for n in all_nodes}
    values.update(counts)
    xs = sorted(values.values())
    total, n = sum(xs), len(xs)
    if total == 0 or n == 0:
        return Concentration(total, n, top_k, 0.0, 0.0)
    share = sum(xs[-top_k:]) / total
    # Gini = sum_i (2i - n - 1) x_i / (n * sum x), x ascending, i from 1.
    gini = sum((2 * i - n - 1) * x for i, x in enumerate(xs, start=1)) / (n * total)
    return Concentration(total, n, top_k, share, gini)


__all__ = ["Concentration", "concentration"]
