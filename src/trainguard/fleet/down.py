"""How many nodes are down at once: the time-weighted distribution over the window.

From the merged outages (:func:`trainguard.fleet.events.merge_outages`, so a node with two
overlapping faults counts once), a sweep over the window gives, for each ``c``, the seconds
during which exactly ``c`` nodes were down (``c = 0`` included). From that:

- the quantile ``p`` is the smallest ``c`` such that at least a fraction ``p`` of the window had
  ``c`` or fewer nodes down (p50, p90, p99);
- ``max`` is the largest count held for a positive time (zero-length outages weigh nothing);
- ``at_least[k]`` is the fraction of the window with ``k`` or more nodes down;
- the mean is the time-weighted mean number of nodes down (node-seconds down / window length);
- for a chart over time, :func:`down_series` cuts the window into equal buckets (the last one
  shorter) and gives each bucket's maximum (over positive time) and time-weighted mean.

    >>> w = FleetWindow(0.0, 100.0, fleet_size=3)
    >>> d = nodes_down([FaultEvent("a", 0.0, 50.0, "x", "x"),
    ...                 FaultEvent("b", 40.0, 60.0, "x", "x")], w)
    >>> dict(d.seconds_at), d.fraction_at_least(2)
    ({0: 40.0, 1: 50.0, 2: 10.0}, 0.1)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from trainguard.errors import FleetError
from trainguard.fleet.events import FaultEvent, FleetWindow, merge_outages


@dataclass(frozen=True, slots=True)
class NodesDown:
    """Seconds of the window spent with each number of nodes down, and summary figures."""

    window: FleetWindow
    seconds_at: Mapping[int, float]
    """Nodes down -> seconds with exactly that many down (counts with positive time only)."""
    p50: int
    p90: int
    p99: int
    max: int

    def fraction_at_least(self, k: int) -> float:
        """Fraction of the window with ``k`` or more nodes down."""
        if k <= 0:
            return 1.0
        held = sum(s for c, s in self.seconds_at.items() if c >= k)
        return held / self.window.length_s

    def at_least(self) -> dict[int, float]:
        """``fraction_at_least(k)`` for k = 1..max."""
        return {k: self.fraction_at_least(k) for k in range(1, self.max + 1)}

    def to_dict(self) -> dict[str, object]:
        return {"seconds_at": {str(c): s for c, s in self.seconds_at.items()}, "p50": self.p50,
                "p90": self.p90, "p99": self.p99, "max": self.max,
                "at_least": {str(k): f for k, f in self.at_least().items()}}


@dataclass(frozen=True, slots=True)
class DownBucket:
    """Nodes down within ``[start, end)``: the most at once and the time-weighted mean."""

    start: float
    end: float
    max: int
    mean: float


def down_steps(events: Iterable[FaultEvent], window: FleetWindow) -> list[tuple[float, int]]:
    """``(time, nodes down from then on)`` at the window's start and at every change before its
    end, ascending (a sweep over the merged outages; zero-length outages change nothing)."""
    deltas: dict[float, int] = defaultdict(int)
    for outage in merge_outages(events, window):
        if outage.end > outage.start:
            deltas[outage.start] += 1
            deltas[outage.end] -= 1
    steps = [(window.start, 0)]
    for at in sorted(deltas):
        if at >= window.end:
            break
        level = steps[-1][1] + deltas[at]
        if level == steps[-1][1]:
            continue
        if at == steps[-1][0]:
            steps[-1] = (at, level)
        else:
            steps.append((at, level))
    return steps


def _spans(steps: list[tuple[float, int]], end: float) -> Iterator[tuple[float, float, int]]:
    for i, (t, level) in enumerate(steps):
        yield t, steps[i + 1][0] if i + 1 < len(steps) else end, level


def down_seconds(events: Iterable[FaultEvent], window: FleetWindow) -> dict[int, float]:
    """Nodes down -> seconds of ``window`` with exactly that many down (sweep over outages)."""
    seconds: dict[int, float] = defaultdict(float)
    for lo, hi, level in _spans(down_steps(events, window), window.end):
        seconds[level] += hi - lo
    return {c: s for c, s in sorted(seconds.items()) if s > 0}


def mean_down(seconds_at: Mapping[int, float]) -> float:
    """Time-weighted mean number of nodes down (0 over no time)."""
    total = sum(seconds_at.values())
    return sum(c * s for c, s in seconds_at.items()) / total if total > 0 else 0.0


def down_series(steps: list[tuple[float, int]], window: FleetWindow,
                bucket_s: float) -> list[DownBucket]:
    """Each bucket of ``bucket_s`` seconds from the window's start: its max and mean down."""
    if not bucket_s > 0:
        raise FleetError(f"a bucket must last a positive time, got {bucket_s}")
    spans = list(_spans(steps, window.end))
    out: list[DownBucket] = []
    i, k = 0, 0
    while (lo := window.start + k * bucket_s) < window.end:
        hi = min(window.start + (k + 1) * bucket_s, window.end)
        while spans[i][1] <= lo:
            i += 1
        peak, area, j = 0, 0.0, i
        while j < len(spans) and spans[j][0] < hi:
            held = min(spans[j][1], hi) - max(spans[j][0], lo)
            if held > 0:
                peak, area = max(peak, spans[j][2]), area + spans[j][2] * held
            j += 1
        out.append(DownBucket(lo, hi, peak, area / (hi - lo)))
        k += 1
    return out


def time_quantile(seconds_at: Mapping[int, float], p: float) -> int:
    """Smallest count ``c`` with at least a fraction ``p`` of the time at ``c`` or fewer down."""
    if not 0.0 <= p <= 1.0:
        raise FleetError(f"a quantile needs 0 <= p <= 1, got {p}")
    total = sum(seconds_at.values())
    running = 0.0
    for c in sorted(seconds_at):
        running += seconds_at[c]
        if running >= p * total * (1 - 1e-12):
            return c
    return max(seconds_at, default=0)


def nodes_down(events: Iterable[FaultEvent], window: FleetWindow) -> NodesDown:
    """The time-weighted distribution of concurrently-down nodes over ``window``."""
    seconds = down_seconds(events, window)
    return NodesDown(window, seconds, time_quantile(seconds, 0.5), time_quantile(seconds, 0.9),
                     time_quantile(seconds, 0.99), max(seconds, default=0))


__all__ = ["DownBucket", "NodesDown", "down_seconds", "down_series", "down_steps", "mean_down",
           "nodes_down", "time_quantile"]
