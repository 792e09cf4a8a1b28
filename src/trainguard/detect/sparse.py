"""Sparse error counters: PCIe replays, correctable ECC, NVLink CRC, normally zero.

For such a counter the level of one block says little: a healthy GPU logs a single correctable
error now and then, or one burst of replays. What precedes a failure is *recurrence*: errors in
block after block, often growing. So each series keeps a bitmask of its last `WINDOW` blocks
with activity and a slowly learned normal count per block; its deviation is

    z = 2.5 * (active blocks in the window)   if it was active in the last 3 blocks, else 0
      + 2 * (sqrt(k + 3/8) - sqrt(normal + 3/8))   (Anscombe: the count's excess, in sd units)

A series whose normal count is not small (a GPU that always logs a few replays) is not sparse
and goes through the ordinary residual path instead, so it is not flagged forever.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from trainguard.telemetry.frame import FloatArray

__all__ = ["SPARSE_MAX_NORMAL", "WINDOW", "SparseCounters", "step_rows"]

WINDOW = 10
"""Blocks of activity history per series."""
SPARSE_MAX_NORMAL = 0.2
"""A series whose learned normal is at most this many events per block is sparse."""
_POPCOUNT = np.array([bin(i).count("1") for i in range(1 << WINDOW)], dtype=np.float64)
_RECENT = 0b111

BoolArray = npt.NDArray[np.bool_]


@dataclass
class SparseCounters:
    """Mutable state over a fixed shape (grown with `grow`)."""

    mask: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    normal: FloatArray = field(default_factory=lambda: np.zeros(0))
    n: FloatArray = field(default_factory=lambda: np.zeros(0))

    def grow(self, shape: tuple[int, ...]) -> None:
        if self.mask.shape == shape:
            return
        self.mask = _pad(self.mask, shape).astype(np.int64)
        self.normal = _pad(self.normal, shape).astype(np.float64)
        self.n = _pad(self.n, shape).astype(np.float64)

    def reset_row(self, i: int) -> None:
        """Forget everything learned for metric `i` (the first axis)."""
        if i < self.mask.shape[0]:
            self.mask[i] = 0
            self.normal[i] = 0.0
            self.n[i] = 0.0

    def step(self, k: FloatArray, alpha: float, warm_n: float) -> tuple[FloatArray, BoolArray]:
        """Feed one block of event counts `k` (NaN = not a counter / no data).

        Returns (z, sparse): the deviation and where it applies (sparse and warm).
        """
        valid = ~np.isnan(k)
        kk = np.where(valid, k, 0.0)
        active = valid & (kk > 0.5)
        self.mask = np.where(valid, ((self.mask << 1) | active) & ((1 << WINDOW) - 1), self.mask)
        count = _POPCOUNT[self.mask]
        recent = (self.mask & _RECENT) != 0
        excess = 2.0 * (np.sqrt(kk + 0.375) - np.sqrt(self.normal + 0.375))
        z = np.where(recent, 2.5 * count, 0.0) + np.maximum(excess, 0.0)
        sparse = valid & (self.normal <= SPARSE_MAX_NORMAL) & (self.n >= warm_n)
        # Learn the normal count slowly; increases are capped so a precursor is not absorbed.
        a = np.maximum(alpha, 1.0 / (self.n + 1.0))
        step = np.minimum(kk - self.normal, 0.5)
        self.normal = np.where(valid, self.normal + a * step, self.normal)
        self.n = np.where(valid, self.n + 1.0, self.n)
        return np.where(sparse, z, np.nan), sparse


def step_rows(counters: SparseCounters, rows: npt.NDArray[np.intp], k: FloatArray,
              alpha: float, warm_n: float) -> tuple[FloatArray, BoolArray]:
    """`counters.step` for the metric rows `rows` only (`k` holds just those rows); the other
    rows are left as a step with no data would leave them. Returns (z, sparse) of those rows.
    A block's counters are few of its metrics: gauges need not pass through here at all."""
    if rows.size == counters.mask.shape[0]:
        return counters.step(k, alpha, warm_n)
    part = SparseCounters(counters.mask[rows], counters.normal[rows], counters.n[rows])
    z, sparse = part.step(k, alpha, warm_n)
    counters.mask[rows] = part.mask
    counters.normal[rows] = part.normal
    counters.n[rows] = part.n
    return z, sparse


def _pad(x: npt.NDArray[np.generic], shape: tuple[int, ...]) -> npt.NDArray[np.generic]:
    out = np.zeros(shape, dtype=x.dtype)
    if x.ndim == len(shape):
        common = tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape, strict=True))
        out[common] = x[common]
    return out
