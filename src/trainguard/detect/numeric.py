"""Small vectorised helpers: NaN-aware medians over short axes, forward fills, block means."""

from __future__ import annotations

import numpy as np

from trainguard.telemetry.frame import FloatArray

__all__ = ["block_means", "ffill", "nanmedian_axis", "previous_valid"]


def nanmedian_axis(x: FloatArray, axis: int) -> tuple[FloatArray, FloatArray]:
    """Median over `axis` ignoring NaN, and the count of valid values (both with `axis` removed).

    Much faster than `np.nanmedian` for short axes (8 GPUs, tens of nodes): sort puts NaN last, so
    the median of the k valid values sits at positions (k-1)//2 and k//2.
    """
    s = np.sort(x, axis=axis)
    k = np.sum(~np.isnan(x), axis=axis)
    lo = np.expand_dims(np.maximum(k - 1, 0) // 2, axis)
    hi = np.expand_dims(np.maximum(k, 1) // 2, axis)
    hi = np.minimum(hi, x.shape[axis] - 1)
    med = 0.5 * (np.take_along_axis(s, lo, axis) + np.take_along_axis(s, hi, axis))
    med = np.squeeze(med, axis)
    med = np.where(k > 0, med, np.nan)
    return med, k.astype(np.float64)


def ffill(x: FloatArray, carry: FloatArray) -> FloatArray:
    """Forward-fill NaN along the last axis, seeded with `carry` (the value before the chunk)."""
    full = np.concatenate([carry[..., None], x], axis=-1)
    valid = ~np.isnan(full)
    idx = np.where(valid, np.arange(full.shape[-1]), 0)
    np.maximum.accumulate(idx, axis=-1, out=idx)
    filled = np.take_along_axis(full, idx, axis=-1)
    return np.asarray(filled[..., 1:], dtype=np.float64)


def previous_valid(x: FloatArray, carry: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per sample, the last valid value before it (seeded with `carry`), and the carry for the
    next chunk (the last valid value of this one). One forward fill serves both."""
    filled = ffill(x, carry)
    prev = np.concatenate([carry[..., None], filled[..., :-1]], axis=-1)
    return prev, (filled[..., -1] if x.shape[-1] else carry)


def block_means(x: FloatArray, block: int) -> FloatArray:
    """Means over consecutive groups of `block` samples on the last axis (NaN-aware).

    The last axis length must be a multiple of `block`.
    """
    shape = (*x.shape[:-1], x.shape[-1] // block, block)
    v = x.reshape(shape)
    valid = ~np.isnan(v)
    n = valid.sum(axis=-1)
    total = np.where(valid, v, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.maximum(n, 1), np.nan)
