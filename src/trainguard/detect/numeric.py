"""Small vectorised helpers: NaN-aware medians over short axes, forward fills, block means.

They run on every scoring block over (metrics x nodes x GPUs x time) tensors, so each is written
to touch memory as few times as possible: sorts and gathers along the last, contiguous axis,
flat 1-D gathers instead of `take_along_axis`, and a fast return when nothing is missing.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from trainguard.telemetry.frame import FloatArray

__all__ = ["block_means", "ffill", "nanmedian_axis", "previous_valid"]


def nanmedian_axis(x: FloatArray, axis: int) -> tuple[FloatArray, FloatArray]:
    """Median over `axis` ignoring NaN, and the count of valid values (both with `axis` removed).

    Much faster than `np.nanmedian` for short axes (8 GPUs, tens of nodes): sort puts NaN last, so
    the median of the k valid values sits at positions (k-1)//2 and k//2.
    """
    last = np.moveaxis(x, axis, -1)
    n = last.shape[-1]
    out_shape = last.shape[:-1]
    if n == 0:
        return np.full(out_shape, np.nan), np.zeros(out_shape)
    s = np.sort(last, axis=-1).reshape(-1, n)
    if not np.isnan(s[:, -1]).any():
        # Sort puts NaN last: none is missing, every median sits at the same two positions.
        full = 0.5 * (s[:, (n - 1) // 2] + s[:, n // 2])
        return full.reshape(out_shape), np.full(out_shape, float(n))
    k = n - np.count_nonzero(np.isnan(s), axis=1)
    base = np.arange(s.shape[0], dtype=np.intp) * n
    flat = s.reshape(-1)
    lo = flat[base + np.maximum(k - 1, 0) // 2]
    hi = flat[base + np.minimum(np.maximum(k, 1) // 2, n - 1)]
    med = 0.5 * (lo + hi)
    med = np.where(k > 0, med, np.nan)
    return med.reshape(out_shape), k.astype(np.float64).reshape(out_shape)


def _ffill_with_carry(x: FloatArray, carry: FloatArray) -> FloatArray:
    """Forward fill of [carry, x] along the last axis (one more column than `x`)."""
    t = x.shape[-1] + 1
    full = np.empty((*x.shape[:-1], t))
    full[..., 0] = carry
    full[..., 1:] = x
    if full.size == 0:
        return full
    flat = full.reshape(-1, t)
    missing = np.isnan(flat)
    rows = np.flatnonzero(missing[:, 1:].any(axis=1))
    if rows.size == 0:
        return full
    # Gather, per row with a gap, each sample's last valid position (a running maximum).
    sub = missing[rows]
    itype = np.int32 if rows.size * t < 1 << 31 else np.int64
    idx = np.where(sub, itype(0), np.arange(t, dtype=itype))
    np.maximum.accumulate(idx, axis=1, out=idx)
    idx += (rows * t).astype(itype)[:, None]
    flat[rows] = np.take(full.reshape(-1), idx)
    return full


def ffill(x: FloatArray, carry: FloatArray) -> FloatArray:
    """Forward-fill NaN along the last axis, seeded with `carry` (the value before the chunk)."""
    return np.asarray(_ffill_with_carry(x, carry)[..., 1:], dtype=np.float64)


def previous_valid(x: FloatArray, carry: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per sample, the last valid value before it (seeded with `carry`), and the carry for the
    next chunk (the last valid value of this one). One forward fill serves both."""
    filled = _ffill_with_carry(x, carry)
    return filled[..., :-1], filled[..., -1].copy()


def block_means(x: FloatArray, block: int) -> FloatArray:
    """Means over consecutive groups of `block` samples on the last axis (NaN-aware).

    The last axis length must be a multiple of `block`. Summed position by position in order
    (what `sum` does for so few values), so the result is the same to the bit.
    """
    shape = (*x.shape[:-1], x.shape[-1] // block, block)
    v = x.reshape(shape)
    total = np.zeros(shape[:-1])
    if not np.isnan(x.sum()):
        # Nothing missing (a NaN anywhere makes the sum NaN): the same adds, in the same order,
        # without the masks; every count is `block`.
        for j in range(block):
            total += v[..., j]
        return total / np.float64(block)
    n: npt.NDArray[np.int64] = np.zeros(shape[:-1], dtype=np.int64)
    for j in range(block):
        col = v[..., j]
        ok = ~np.isnan(col)
        np.add(total, col, out=total, where=ok)
        n += ok
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), np.nan)
