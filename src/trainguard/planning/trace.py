"""A cluster's fault history as the planner reads it: outages of named nodes over a window.

A node is unavailable in ``[start, end)`` of each of its outages. Overlapping or touching
outages of one node are merged, and everything is clipped to the fleet's observation window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trainguard.errors import ConfigError
from trainguard.intervals import union_spans
from trainguard.planning.model import NodeReliability


@dataclass(frozen=True, slots=True)
class Outage:
    """One node unavailable in ``[start, end)`` (seconds)."""

    node: str
    start: float
    end: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end < self.start:
            raise ConfigError(f"outage of {self.node!r} needs finite start <= end, "
                              f"got [{self.start}, {self.end})")


@dataclass(frozen=True, slots=True)
class Fleet:
    """The nodes a job can be placed on and the window their history covers."""

    nodes: tuple[str, ...]
    start_s: float
    end_s: float

    def __post_init__(self) -> None:
        if not self.nodes or len(set(self.nodes)) != len(self.nodes):
            raise ConfigError("a fleet needs at least one node and no duplicate names")
        if not (math.isfinite(self.start_s) and math.isfinite(self.end_s)) \
                or self.end_s <= self.start_s:
            raise ConfigError(f"fleet window needs start < end, got [{self.start_s}, "
                              f"{self.end_s})")

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def span_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class OutageTable:
    """Merged, clipped outages as arrays sorted by start: node index (into ``Fleet.nodes``),
    start and end. Outages of nodes outside the fleet are dropped."""

    fleet: Fleet
    node: npt.NDArray[np.int64]
    start: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]

    @property
    def count(self) -> int:
        return int(self.node.size)


def outage_table(outages: Sequence[Outage], fleet: Fleet) -> OutageTable:
    """Merge each node's overlapping outages and clip them to the fleet's window."""
    index = {name: i for i, name in enumerate(fleet.nodes)}
    per_node: dict[int, list[tuple[float, float]]] = {}
    for o in outages:
        i = index.get(o.node)
        s, e = max(o.start, fleet.start_s), min(o.end, fleet.end_s)
        if i is None or e <= s:
            continue
        per_node.setdefault(i, []).append((s, e))
    nodes: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    for i, spans in per_node.items():
        for lo, hi, _ in union_spans(spans):
            nodes.append(i)
            starts.append(lo)
            ends.append(hi)
    order = np.argsort(np.asarray(starts, dtype=np.float64), kind="stable")
    return OutageTable(fleet, np.asarray(nodes, dtype=np.int64)[order],
                       np.asarray(starts, dtype=np.float64)[order],
                       np.asarray(ends, dtype=np.float64)[order])


def estimate_reliability(table: OutageTable) -> NodeReliability:
    """``λ`` = outages that began inside the window per node-second of up time; ``R`` = mean
    outage length (clipped to the window). An outage already running at the window's start
    counts towards downtime but not as a failure."""
    fleet = table.fleet
    down = float(np.sum(table.end - table.start))
    up = fleet.size * fleet.span_s - down
    began = int(np.count_nonzero(table.start > fleet.start_s))
    rate = began / up if up > 0 else 0.0
    repair = down / table.count if table.count else 0.0
    return NodeReliability(rate, repair)


__all__ = ["Fleet", "Outage", "OutageTable", "estimate_reliability", "outage_table"]
