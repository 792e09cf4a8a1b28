"""Each series' learned normal: level and spread of its peer residual, per activity state.

A residual (a GPU minus its node's median, a node minus its peer group's median) is compared with
what that same series usually shows, so a GPU that always runs 4 C hotter than its siblings is
not flagged forever. Two slots are kept per series, idle and busy, because offsets differ under
load. Updates are exponentially weighted and clipped: a slow precursor is not learned away.

Outline of one block:
1. z = (r - mu[slot]) / max(spread[slot], floor)   (NaN until the series has warmed up)
2. mu += a * clip(r - mu, +-k * spread);  spread += a * (min(|r - mu|, k * spread) - spread)
   with a = max(a_halflife, 1 / (n + 1)) so a fresh series learns quickly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trainguard.telemetry.frame import FloatArray

__all__ = ["Baseline"]

BoolArray = npt.NDArray[np.bool_]


@dataclass
class Baseline:
    """Mutable per-series state over `shape` (metric, node[, gpu]) x 2 activity slots."""

    mu: FloatArray
    spread: FloatArray
    n: FloatArray

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> Baseline:
        return cls(np.zeros((2, *shape)), np.zeros((2, *shape)), np.zeros((2, *shape)))

    def grow(self, shape: tuple[int, ...]) -> None:
        """Pad to a larger shape (new metrics, nodes or GPUs start unlearned)."""
        if self.mu.shape[1:] == shape:
            return
        pad = [(0, 0)] + [(0, new - old) for old, new in zip(self.mu.shape[1:], shape,
                                                             strict=True)]
        self.mu = np.pad(self.mu, pad)
        self.spread = np.pad(self.spread, pad)
        self.n = np.pad(self.n, pad)

    def forget(self, mask: BoolArray) -> None:
        """Restart learning where `mask` (shape without the slot axis) is true."""
        for arr in (self.mu, self.spread, self.n):
            arr[:, mask] = 0.0

    def score(self, r: FloatArray, busy: BoolArray, floor: FloatArray, warm_n: float
              ) -> FloatArray:
        """Signed robust deviation of `r`; NaN where the series is not warm or r is NaN.

        `busy` and `floor` broadcast against `r` (floor per metric, busy per node).
        """
        mu = np.where(busy, self.mu[1], self.mu[0])
        spread = np.where(busy, self.spread[1], self.spread[0])
        n = np.where(busy, self.n[1], self.n[0])
        scale = np.maximum(1.25 * spread, floor)
        with np.errstate(invalid="ignore", divide="ignore"):
            z = (r - mu) / scale
        return np.where(n >= warm_n, z, np.nan)

    def score_update(self, r: FloatArray, busy: BoolArray, floor: FloatArray, warm_n: float,
                     alpha: float, clip: float, fast: BoolArray | None = None) -> FloatArray:
        """`score(r, ...)` then `update(r, ...)` (the same numbers), each series' slot read once.

        `busy` broadcasts against `r`; `fast` marks series relearning a new regime. Values
        computed where `r` is NaN are never stored, so they are not masked first.
        """
        s = 1 if bool(np.all(busy)) else 0 if not np.any(busy) else -1
        uniform = s >= 0
        busy = np.broadcast_to(busy, r.shape)
        if uniform:
            # Every series in the same slot (all nodes busy, or all idle): read it in place.
            mu, spread, n = self.mu[s], self.spread[s], self.n[s]
        else:
            mu = np.where(busy, self.mu[1], self.mu[0])
            spread = np.where(busy, self.spread[1], self.spread[0])
            n = np.where(busy, self.n[1], self.n[0])
        # In place where a value is not needed again: fewer large temporaries, the same bits.
        scale = 1.25 * spread
        np.maximum(scale, floor, out=scale)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            dev = r - mu
            z: FloatArray = np.asarray(dev / scale, dtype=np.float64)
            z[n < warm_n] = np.nan
            sel = np.isfinite(r)
            if not sel.any():
                return z
            n1 = n + 1.0
            a = 1.0 / n1
            np.maximum(a, alpha, out=a)
            if fast is not None:
                a = np.where(fast, np.maximum(a, 0.1), a)
            lim = scale
            lim *= clip
            lim[n < 3] = np.inf  # too few points for a spread: do not clip yet
            absdev = np.abs(dev)
            np.minimum(absdev, lim, out=absdev)
            step = np.clip(dev, -lim, lim, out=dev)
            first = n == 0
            step *= a
            step += mu
            np.copyto(step, r, where=first)
            new_mu = step
            absdev -= spread
            absdev *= a
            absdev += spread
            np.copyto(absdev, spread, where=first)
            new_spread = absdev
        for slot, in_slot in (((s, sel),) if uniform else ((0, sel & ~busy), (1, sel & busy))):
            np.copyto(self.mu[slot], new_mu, where=in_slot)
            np.copyto(self.spread[slot], new_spread, where=in_slot)
            np.copyto(self.n[slot], n1, where=in_slot)
        return z

    def update(self, r: FloatArray, busy: BoolArray, floor: FloatArray, alpha: float,
               clip: float, fast: BoolArray | None = None) -> None:
        """Learn from `r` (NaN = no observation). `fast` marks series relearning a new regime."""
        valid = np.isfinite(r)
        for slot, in_slot in ((0, ~busy), (1, busy)):
            sel = valid & in_slot
            if not sel.any():
                continue
            mu, spread, n = self.mu[slot], self.spread[slot], self.n[slot]
            a = np.maximum(alpha, 1.0 / (n + 1.0))
            if fast is not None:
                a = np.where(fast, np.maximum(a, 0.1), a)
            scale = np.maximum(1.25 * spread, floor)
            fresh = n < 3  # too few points for a spread: do not clip yet
            dev = np.where(sel, r - mu, 0.0)
            lim = np.where(fresh, np.inf, clip * scale)
            step = np.clip(dev, -lim, lim)
            absdev = np.minimum(np.abs(dev), lim)
            first = n == 0
            self.mu[slot] = np.where(sel, np.where(first, r, mu + a * step), mu)
            self.spread[slot] = np.where(sel & ~first, spread + a * (absdev - spread), spread)
            self.n[slot] = np.where(sel, n + 1.0, n)
