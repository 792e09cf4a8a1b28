"""Per-series state of the early-warning rules (`precursors.py`), and how it grows.

Each rule keeps, per series, small arrays over [node, GPU] (or [node]); the layout only grows,
so the state is padded to the new shape as nodes and GPU slots appear. The state format
(`watch/statecodec.py`) writes these classes by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.detect.numeric import learn
from trainguard.telemetry.frame import FloatArray

__all__ = ["LONG_HALFLIFE_BLOCKS", "HostState", "JitterState", "RecurState", "grow_host",
           "grow_jitter", "grow_recur", "learn_before", "pad", "popcount", "recur_state"]

LONG_HALFLIFE_BLOCKS = 360.0
"""Own history, as every rule learns it: 12 h of 2-min blocks."""


@dataclass
class RecurState:
    """Per series: the recent blocks with events (bit mask; cleared when a rule fires), the
    same blocks never cleared (`seen`), and the usual event rate, learnt from the blocks that
    leave the window."""

    mask: np.ndarray
    rate: FloatArray
    blocks: FloatArray
    prev: FloatArray
    seen: np.ndarray


@dataclass
class JitterState:
    short: FloatArray
    long: FloatArray
    blocks: FloatArray
    run: FloatArray
    prev: FloatArray
    mask: np.ndarray
    """Clock series: the window's blocks in which the GPU's clock jittered (bit mask)."""


@dataclass
class HostState:
    level: FloatArray
    run: FloatArray
    prev: FloatArray


_POP = np.array([bin(i).count("1") for i in range(1 << 8)], dtype=np.int64)


_BITWISE_COUNT = getattr(np, "bitwise_count", None)
"""numpy 2's popcount ufunc: one pass instead of one per byte (called per rule and block)."""


def popcount(mask: np.ndarray) -> np.ndarray:
    """Set bits per element of a non-negative int64 `mask`."""
    if _BITWISE_COUNT is not None:
        return np.asarray(_BITWISE_COUNT(mask), dtype=np.int64)
    out = np.zeros(mask.shape, dtype=np.int64)
    m = mask.copy()
    while m.any():
        out += _POP[m & 0xFF]
        m >>= 8
    return out


def pad(x: np.ndarray, shape: tuple[int, ...], fill: float) -> np.ndarray:
    """`x` cut or padded with `fill` to `shape` (the layout only grows)."""
    out = np.full(shape, fill, dtype=x.dtype)
    out[tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape, strict=True))] = \
        x[tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape, strict=True))]
    return out


def grow_recur(st: RecurState | None, shape: tuple[int, int]) -> RecurState:
    if st is None:
        return RecurState(np.zeros(shape, dtype=np.int64), np.zeros(shape), np.zeros(shape),
                      np.full(shape, np.nan), np.zeros(shape, dtype=np.int64))
    return RecurState(pad(st.mask, shape, 0), pad(st.rate, shape, 0.0),
                  pad(st.blocks, shape, 0.0), pad(st.prev, shape, np.nan),
                  pad(st.seen, shape, 0))


def recur_state(states: dict[str, RecurState], name: str, shape: tuple[int, int]
                ) -> RecurState:
    """`states[name]`, made or grown to `shape` [node, GPU] first."""
    st = states.get(name)
    if st is None or st.rate.shape != shape:
        st = states[name] = grow_recur(st, shape)
    return st


def grow_jitter(st: JitterState | None, shape: tuple[int, int]) -> JitterState:
    if st is None:
        z = np.zeros(shape)
        return JitterState(z.copy(), z.copy(), z.copy(), z.copy(), np.full(shape, np.nan),
                       np.zeros(shape, dtype=np.int64))
    return JitterState(pad(st.short, shape, 0.0), pad(st.long, shape, 0.0),
                   pad(st.blocks, shape, 0.0), pad(st.run, shape, 0.0),
                   pad(st.prev, shape, np.nan), pad(st.mask, shape, 0))


def grow_host(st: HostState | None, n: int) -> HostState:
    if st is None:
        return HostState(np.zeros(n), np.zeros(n), np.full(n, np.nan))
    return HostState(pad(st.level, (n,), 0.0), pad(st.run, (n,), 0.0),
                 pad(st.prev, (n,), np.nan))


def learn_before(st: RecurState, now: np.ndarray, ok: np.ndarray, alpha: float, w: int) -> None:
    """Shift this block's events `now` into `st.seen` and learn `st.rate` from the block that
    leaves the window (observed blocks only; a plain mean at first, `numeric.learn`): the rate a
    burst is judged against never holds that burst, and a burst a rule fired on (and cleared
    from `st.mask`) still counts in it once it is history."""
    left = ((st.seen >> (w - 1)) & 1).astype(np.float64)
    st.rate = learn(st.rate, left, st.blocks - w, alpha, ok & (st.blocks >= w))
    st.seen = ((st.seen << 1) | now.astype(np.int64)) & ((1 << w) - 1)
