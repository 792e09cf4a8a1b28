"""Repair times (end - start of each fault) by category, and how heavy their long tail is.

Definitions:

- the faults are those that count in the window (they start in it); a repair time is the whole
  ``end - start`` of a closed fault, even where it runs past the window's end (it is a property
  of the fault, not of the window);
- open faults (``end=None``) have no repair time yet: they are counted apart (``open``);
- quantiles interpolate linearly between order statistics (NumPy's default);
- the tail share is the share of all repair time held by the longest ``tail_fraction`` of the
  repairs (``ceil(tail_fraction x count)`` of them, at least one).

    >>> s = repair_stats([60.0, 60.0, 60.0, 3600.0 - 180.0])
    >>> s.median_s, s.tail_share
    (60.0, 0.95)
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainguard.errors import FleetError
from trainguard.fleet.events import FaultEvent, FleetWindow, counted_faults

DEFAULT_TAIL_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class RepairStats:
    """Repair times of a set of faults, in seconds (0 where there are none)."""

    count: int
    """Closed faults (with a repair time)."""
    open: int
    """Faults still open at the end of the record: no repair time, counted apart."""
    median_s: float
    p90_s: float
    mean_s: float
    max_s: float
    total_s: float
    tail_fraction: float
    tail_share: float
    """Share of ``total_s`` held by the longest ``tail_fraction`` of repairs."""

    def to_dict(self) -> dict[str, float | int]:
        return {"count": self.count, "open": self.open, "median_s": self.median_s,
                "p90_s": self.p90_s, "mean_s": self.mean_s, "max_s": self.max_s,
                "total_s": self.total_s, "tail_fraction": self.tail_fraction,
                "tail_share": self.tail_share}


@dataclass(frozen=True, slots=True)
class FleetRepairs:
    """Repair statistics over all counted faults and by category (most faults first)."""

    overall: RepairStats
    by_category: Mapping[str, RepairStats]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of ascending ``sorted_values`` (0 when empty)."""
    if not 0.0 <= q <= 1.0:
        raise FleetError(f"a quantile needs 0 <= q <= 1, got {q}")
    if not sorted_values:
        return 0.0
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def repair_stats(durations: Iterable[float], open_faults: int = 0,
                 tail_fraction: float = DEFAULT_TAIL_FRACTION) -> RepairStats:
    """Statistics of the repair times ``durations`` (seconds, each >= 0)."""
    if not 0.0 < tail_fraction <= 1.0:
        raise FleetError(f"tail fraction must be in (0, 1], got {tail_fraction}")
    xs = sorted(durations)
    if xs and xs[0] < 0:
        raise FleetError(f"a repair time cannot be negative, got {xs[0]}")
    total = math.fsum(xs)
    n = len(xs)
    if n == 0:
        return RepairStats(0, open_faults, 0.0, 0.0, 0.0, 0.0, 0.0, tail_fraction, 0.0)
    tail_n = max(1, math.ceil(tail_fraction * n - 1e-9))
    tail = math.fsum(xs[-tail_n:]) / total if total > 0 else 0.0
    return RepairStats(n, open_faults, quantile(xs, 0.5), quantile(xs, 0.9), total / n, xs[-1],
                       total, tail_fraction, tail)


def _stats_of(faults: Sequence[FaultEvent], tail_fraction: float) -> RepairStats:
    closed = [f.duration_s for f in faults if f.duration_s is not None]
    return repair_stats(closed, len(faults) - len(closed), tail_fraction)


def fleet_repairs(events: Iterable[FaultEvent], window: FleetWindow,
                  tail_fraction: float = DEFAULT_TAIL_FRACTION) -> FleetRepairs:
    """Repair statistics of the faults that count in ``window``, overall and by category."""
    faults = counted_faults(events, window)
    groups: dict[str, list[FaultEvent]] = defaultdict(list)
    for f in faults:
        groups[f.category].append(f)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return FleetRepairs(_stats_of(faults, tail_fraction),
                        {cat: _stats_of(fs, tail_fraction) for cat, fs in ordered})


__all__ = [
    "DEFAULT_TAIL_FRACTION",
    "FleetRepairs",
    "RepairStats",
    "fleet_repairs",
    "quantile",
    "repair_stats",
]
