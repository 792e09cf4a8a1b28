"""The Prometheus query behind a span of the detector grid during a replay, and the way back.

Prometheus keeps time in whole milliseconds: it rounds a query's start to the millisecond and
evaluates at ``start + k * step`` with the step cut to whole milliseconds too. In a replay the
detector grid maps (`TimeMap.to_prom`) to wall times that are not whole milliseconds, so the
answer's timestamps, mapped back through the `TimeMap`, miss the grid by up to ``speed``
milliseconds of detector time. A miss upwards put every sample one step late (a sample goes
to the first grid point at or after it): the last point of each query fell outside it, and a
round that fetched one new point got "no samples between ..." although Prometheus had it.

So the query is asked on whole milliseconds, and each timestamp of the answer is mapped back
by its index in the query: evaluation k is detector time ``lo + k * step`` exactly.

    >>> from trainguard.watch.config import TimeMap
    >>> g = ReplayGrid.of(TimeMap(speed=90, sim_start=0, wall_start=1000, phase_s=0.3),
    ...                   lo=870, hi=930, step=30)
    >>> g.start, g.step, g.end
    (1009.967, 0.333, 1010.633)
    >>> g.to_det(np.array([1009.967, 1010.3, 1010.633])).tolist()
    [870.0, 900.0, 930.0]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.telemetry.frame import FloatArray
from trainguard.watch.config import TimeMap

__all__ = ["ReplayGrid"]

_MS = 0.001


@dataclass(frozen=True, slots=True)
class ReplayGrid:
    """Wall-time query parameters (whole milliseconds) for the detector points lo..hi."""

    start: float
    """Wall time of the first evaluation (detector time `lo`)."""
    step: float
    """Wall seconds between evaluations (whole milliseconds, at least one)."""
    end: float
    """Wall time of the last evaluation (detector time `hi`)."""
    lo: int
    det_step: int

    @classmethod
    def of(cls, tm: TimeMap, lo: int, hi: int, step: int) -> ReplayGrid:
        start = round(tm.to_prom(lo), 3)
        wall_step = max(_MS, round(step / tm.speed, 3))
        n = (hi - lo) // step
        return cls(start, wall_step, round(start + n * wall_step, 3), lo, step)

    def to_det(self, ts: FloatArray) -> FloatArray:
        """Detector times of the answer's timestamps: the grid point of each one's index."""
        k = np.rint((np.asarray(ts, dtype=np.float64) - self.start) / self.step)
        return np.asarray(self.lo + k * self.det_step, dtype=np.float64)
