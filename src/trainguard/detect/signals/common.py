"""Small numeric helpers shared by the signal units (pure functions, no state)."""

from __future__ import annotations

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.numeric import nanmedian_axis
from trainguard.telemetry.frame import FloatArray

__all__ = ["ew_typical", "learning_rates", "pad_to", "regrow", "rows"]


def learning_rates(cfg: DetectorConfig) -> tuple[float, float]:
    """(blocks a series must be seen before it is warm, per-block weight of a new observation)
    from the warm-up and half-life settings: what every learned normal uses."""
    warm_n = cfg.warmup_s / cfg.block_s
    alpha = 1.0 - 0.5 ** (cfg.block_s / cfg.halflife_s)
    return warm_n, alpha


def rows(x: FloatArray) -> FloatArray:
    """`x` as a 2-D (first axis, everything else) array. Not `reshape(m, -1)`: that is an error
    for an empty array, e.g. no GPU metrics at all (node-exporter-only telemetry)."""
    return x.reshape(x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64)))


def pad_to(v: FloatArray, n: int) -> FloatArray:
    """`v` (1-D) zero-padded at the end to length `n`."""
    return np.pad(v, (0, n - v.shape[0]))


def regrow(v: FloatArray, old_mg: int, mg: int, m: int) -> FloatArray:
    """A per-metric vector (GPU metrics first, then node metrics) re-placed for a layout of
    `mg` GPU metrics and `m` metrics in all: node-metric rows move behind the new GPU rows.

        >>> regrow(np.array([1.0, 2.0, 9.0]), 2, 3, 5).tolist()
        [1.0, 2.0, 0.0, 9.0, 0.0]
    """
    out = np.zeros(m)
    out[:old_mg] = v[:old_mg]
    out[mg:mg + v.shape[0] - old_mg] = v[old_mg:]
    return out


def ew_typical(cur: FloatArray, disp: FloatArray) -> FloatArray:
    """Slowly track each metric's typical (median over entities) positive dispersion."""
    flat = rows(np.where(disp > 0, disp, np.nan))
    med, k = nanmedian_axis(flat, axis=1)
    upd = np.where(cur == 0, med, 0.98 * cur + 0.02 * med)
    return np.where(k > 0, upd, cur)
