"""A fleet's fault record: fault events, the observation window, and node outages.

Definitions every module of :mod:`trainguard.fleet` uses:

1. a *fault* is one :class:`FaultEvent`: a node out of service from ``start`` to ``end``
   (seconds); ``end=None`` means still open when the record was taken (it lasts to the window's
   end for downtime, and has no repair time);
2. a fault *counts* in a window (for rates, lemons) when it starts in ``[window.start,
   window.end)``; faults that started earlier are still down time inside the window, not new
   faults;
3. an *outage* of a node is the union of its fault intervals that overlap or touch (the next
   starts at or before the current one ends), clipped to the window: two overlapping faults are
   one outage of two faults. Each fault still counts as a fault; outages count down time.

    >>> w = FleetWindow(0.0, 100.0, fleet_size=2)
    >>> faults = [FaultEvent("n1", 10.0, 30.0, "GPU / DBE", "Hardware"),
    ...           FaultEvent("n1", 30.0, 40.0, "NIC", "Network")]
    >>> [(o.start, o.end, o.faults) for o in merge_outages(faults, w)]
    [(10.0, 40.0, 2)]
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from trainguard.errors import FleetError
from trainguard.intervals import union_spans

DAY_S = 86400.0


def _finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise FleetError(f"{name} must be a finite number of seconds, got {value}")


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """One node fault: ``kind`` may be hierarchical ("Hardware Failure / GPU / GPU DBE")."""

    node: str
    start: float
    end: float | None
    """None: still open at the window's end."""
    kind: str
    category: str

    def __post_init__(self) -> None:
        if not self.node.strip():
            raise FleetError("a fault event needs a node name")
        _finite(f"fault start of {self.node}", self.start)
        if self.end is not None:
            _finite(f"fault end of {self.node}", self.end)
            if self.end < self.start:
                raise FleetError(f"fault of {self.node} ends ({self.end}) before it starts "
                                 f"({self.start})")
        if not self.kind.strip() or not self.category.strip():
            raise FleetError(f"fault of {self.node} at {self.start} needs a kind and a category")

    @property
    def duration_s(self) -> float | None:
        """Repair time (end - start); None while open."""
        return None if self.end is None else self.end - self.start


@dataclass(frozen=True, slots=True)
class FleetWindow:
    """The span the record covers and how many nodes the fleet had in it."""

    start: float
    end: float
    fleet_size: int

    def __post_init__(self) -> None:
        _finite("window start", self.start)
        _finite("window end", self.end)
        if not self.end > self.start:
            raise FleetError(f"window end ({self.end}) must be after its start ({self.start})")
        if self.fleet_size < 1:
            raise FleetError(f"fleet size must be at least 1, got {self.fleet_size}")

    @property
    def length_s(self) -> float:
        return self.end - self.start

    @property
    def days(self) -> float:
        return self.length_s / DAY_S

    @property
    def node_days(self) -> float:
        """Fleet exposure: fleet_size x window days (down time is not subtracted)."""
        return self.fleet_size * self.days

    def contains_start(self, event: FaultEvent) -> bool:
        """Whether ``event`` counts as a fault of this window (it starts inside it)."""
        return self.start <= event.start < self.end


@dataclass(frozen=True, slots=True)
class Outage:
    """A node's merged down time inside the window, and how many faults it is made of."""

    node: str
    start: float
    end: float
    faults: int

    @property
    def duration_s(self) -> float:
        return self.end - self.start


def category_of(kind: str, sep: str = "/") -> str:
    """The top level of a hierarchical kind: "Hardware Failure / GPU / X" -> "Hardware Failure"."""
    head = kind.split(sep, 1)[0].strip()
    return head or kind.strip()


def counted_faults(events: Iterable[FaultEvent], window: FleetWindow) -> list[FaultEvent]:
    """The faults that count in ``window`` (they start in it), checked against its fleet size."""
    faults = [e for e in events if window.contains_start(e)]
    check_fleet_size((e.node for e in faults), window)
    return faults


def check_fleet_size(nodes: Iterable[str], window: FleetWindow) -> None:
    """Raise when more distinct nodes have faults than the fleet has nodes."""
    distinct = set(nodes)
    if len(distinct) > window.fleet_size:
        raise FleetError(f"{len(distinct)} nodes have faults but the fleet size is "
                         f"{window.fleet_size}")


def clip(event: FaultEvent, window: FleetWindow) -> tuple[float, float] | None:
    """The part of ``event`` inside ``window`` (an open fault lasts to its end); None if none.

    A zero-length fault inside the window clips to a zero-length interval.
    """
    end = window.end if event.end is None else event.end
    lo, hi = max(event.start, window.start), min(end, window.end)
    if hi < lo or lo >= window.end or (hi == lo and event.start < window.start):
        return None
    return lo, hi


def merge_outages(events: Iterable[FaultEvent], window: FleetWindow) -> list[Outage]:
    """Per node, the union of overlapping/touching fault intervals clipped to ``window``
    (module rule 3), sorted by node then start."""
    per_node: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for event in events:
        span = clip(event, window)
        if span is not None:
            per_node[event.node].append(span)
    check_fleet_size(per_node, window)
    return [Outage(node, lo, hi, count) for node in sorted(per_node)
            for lo, hi, count in union_spans(per_node[node])]


__all__ = [
    "DAY_S",
    "FaultEvent",
    "FleetWindow",
    "Outage",
    "category_of",
    "check_fleet_size",
    "clip",
    "counted_faults",
    "merge_outages",
]
