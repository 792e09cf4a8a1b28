"""Sparse error counters: PCIe replays, correctable ECC, NVLink CRC, normally zero.

For such a counter the level of one block says little: a healthy GPU logs a single correctable
error now and then, or one burst of replays. What precedes a failure is *recurrence*: errors in
block after block, often growing. So each series keeps a bitmask of its last `WINDOW` blocks
with activity and a slowly learned normal count per block; its deviation is

    z = 2.5 * (active blocks in the window)   if it was active in the last 3 blocks and
                                              that many is beyond chance (below), else 0
      + 2 * (sqrt(k + 3/8) - sqrt(normal + 3/8))   (Anscombe: the count's excess, in sd units)

A series whose normal count is not small (a GPU that always logs a few replays) is not sparse
and goes through the ordinary residual path instead, so it is not flagged forever.

*Beyond chance.* A healthy GPU can count now and then all its life: a link with a few replays an
hour, a trickle of correctable ECC. Its window fills by chance every few hours, and each time
the recurrence term alone would score like a precursor. So each series also learns how often it
was active in the blocks that have *left* the window (`before`: the rate before the window, so a
burst never lowers its own score), and the recurrence counts only when that many active blocks
in the window has a chance of at most `recur_chance` at that rate (binomial tail). That chance
is per look, and every series is looked at every block (720 times a day at 2-minute blocks), so
it is a day's share of `RECUR_QUIET_DAYS` days: 1e-5 per look, not 1e-3 (at which a series
counting at random in 5-12% of its blocks opened a chance recurrence about once a day; now about
once a year, `test_sparse`). The rate is taken as learnt. Reading it low (two standard errors
under it, so that a few events before the window proved no usual rate) let about a third more
chance recurrences through on the held-out clusters and caught no failure earlier
(docs/accuracy.md). A series that was quiet before the window keeps the full term, at once.
Counters of repairs made for good (remapped rows, retired pages: `knowledge.is_repair_counter`)
are not gated: a healthy GPU spends a spare now and then in its life, so a slow ramp of them
that has gone on since before the history began is still a precursor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from trainguard.detect.numeric import learn
from trainguard.telemetry.frame import FloatArray

__all__ = ["RECUR_CHANCE", "RECUR_QUIET_DAYS", "SPARSE_MAX_NORMAL", "WINDOW", "SparseCounters",
           "at_least", "recur_chance", "step_rows"]

WINDOW = 10
"""Blocks of activity history per series."""
SPARSE_MAX_NORMAL = 0.2
"""A series whose learned normal is at most this many events per block is sparse."""
RECUR_QUIET_DAYS = 140.0
"""The recurrence gate allows each look `1 / (looks in this many days)` of chance: at the rate
the test assumes, a series that counts as it always has would pass once in this many days. The
rate is learnt, not known, so a real trickle passes more often (`test_sparse`)."""


def recur_chance(block_s: float) -> float:
    """The chance per look at which the recurrence term counts: its active blocks at most this
    likely at the series' own rate before the window. One look per block of `block_s` seconds.

        >>> f"{recur_chance(120):.1e}"
        '9.9e-06'
    """
    return block_s / (RECUR_QUIET_DAYS * 86400.0)


RECUR_CHANCE = recur_chance(120)
"""`recur_chance` at the default 2-minute block."""
_POPCOUNT = np.array([bin(i).count("1") for i in range(1 << WINDOW)], dtype=np.float64)
_RECENT = 0b111
_CHOOSE = np.array([math.comb(WINDOW, j) for j in range(WINDOW + 1)], dtype=np.float64)

BoolArray = npt.NDArray[np.bool_]


@dataclass
class SparseCounters:
    """Mutable state over a fixed shape (grown with `grow`)."""

    mask: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    normal: FloatArray = field(default_factory=lambda: np.zeros(0))
    n: FloatArray = field(default_factory=lambda: np.zeros(0))
    before: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Fraction of blocks with activity among those that have left the window (learned like
    `normal`: a plain mean at first, then exponentially)."""

    def grow(self, shape: tuple[int, ...]) -> None:
        if self.mask.shape == shape:
            return
        self.mask = _pad(self.mask, shape).astype(np.int64)
        self.normal = _pad(self.normal, shape).astype(np.float64)
        self.n = _pad(self.n, shape).astype(np.float64)
        self.before = _pad(self.before, shape).astype(np.float64)

    def reset_row(self, i: int) -> None:
        """Forget everything learned for metric `i` (the first axis)."""
        if i < self.mask.shape[0]:
            self.mask[i] = 0
            self.normal[i] = 0.0
            self.n[i] = 0.0
            self.before[i] = 0.0

    def step(self, k: FloatArray, alpha: float, warm_n: float, gated: BoolArray | None = None,
             chance: float = RECUR_CHANCE) -> tuple[FloatArray, BoolArray]:
        """Feed one block of event counts `k` (NaN = not a counter / no data). `gated` (per
        first-axis row; default all): the rows whose recurrence must be beyond `chance`
        (`recur_chance` of the block length).

        Returns (z, sparse): the deviation and where it applies (sparse and warm).
        """
        valid = ~np.isnan(k)
        kk = np.where(valid, k, 0.0)
        active = valid & (kk > 0.5)
        # The block leaving the window (a real one once `WINDOW` blocks were seen).
        leaves = valid & (self.n >= WINDOW)
        left = ((self.mask >> (WINDOW - 1)) & 1).astype(np.float64)
        self.before = learn(self.before, left, self.n - WINDOW, alpha, leaves)
        self.mask = np.where(valid, ((self.mask << 1) | active) & ((1 << WINDOW) - 1), self.mask)
        count = _POPCOUNT[self.mask]
        recur = (self.mask & _RECENT) != 0
        sparse = valid & (self.normal <= SPARSE_MAX_NORMAL) & (self.n >= warm_n)
        # Only where the score is used: a busy counter (bytes, energy) recurs on every series.
        ask = recur & sparse
        if gated is not None:
            ask &= gated.reshape(-1, *[1] * (k.ndim - 1))
        if ask.any():
            recur[ask] = at_least(count[ask], self.before[ask]) <= chance
        excess = 2.0 * (np.sqrt(kk + 0.375) - np.sqrt(self.normal + 0.375))
        z = np.where(recur, 2.5 * count, 0.0) + np.maximum(excess, 0.0)
        # Learn the normal count slowly; increases are capped so a precursor is not absorbed.
        a = np.maximum(alpha, 1.0 / (self.n + 1.0))
        step = np.minimum(kk - self.normal, 0.5)
        self.normal = np.where(valid, self.normal + a * step, self.normal)
        self.n = np.where(valid, self.n + 1.0, self.n)
        return np.where(sparse, z, np.nan), sparse


def step_rows(counters: SparseCounters, rows: npt.NDArray[np.intp], k: FloatArray,
              alpha: float, warm_n: float, gated: BoolArray | None = None,
              chance: float = RECUR_CHANCE) -> tuple[FloatArray, BoolArray]:
    """`counters.step` for the metric rows `rows` only (`k` holds just those rows); the other
    rows are left as a step with no data would leave them. Returns (z, sparse) of those rows.
    A block's counters are few of its metrics: gauges need not pass through here at all."""
    if rows.size == counters.mask.shape[0]:
        return counters.step(k, alpha, warm_n, gated, chance)
    part = SparseCounters(counters.mask[rows], counters.normal[rows], counters.n[rows],
                          counters.before[rows])
    z, sparse = part.step(k, alpha, warm_n, gated, chance)
    counters.mask[rows] = part.mask
    counters.normal[rows] = part.normal
    counters.n[rows] = part.n
    counters.before[rows] = part.before
    return z, sparse


def at_least(count: FloatArray, p: FloatArray) -> FloatArray:
    """P(X >= count) for X ~ Binomial(`WINDOW`, p), elementwise (`count` whole numbers).

    >>> at_least(np.array([1.0, 3.0, 3.0]), np.array([0.0, 0.5, 0.05])).round(4).tolist()
    [0.0, 0.9453, 0.0115]
    """
    j = np.arange(WINDOW + 1, dtype=np.float64)
    pp = np.clip(p, 0.0, 1.0)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        pmf = _CHOOSE * np.power(pp, j) * np.power(1.0 - pp, WINDOW - j)
    tail = np.where(j >= np.asarray(count)[..., None], pmf, 0.0).sum(axis=-1)
    return np.asarray(np.minimum(tail, 1.0), dtype=np.float64)


def _pad(x: npt.NDArray[np.generic], shape: tuple[int, ...]) -> npt.NDArray[np.generic]:
    out = np.zeros(shape, dtype=x.dtype)
    if x.ndim == len(shape):
        common = tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape, strict=True))
        out[common] = x[common]
    return out
