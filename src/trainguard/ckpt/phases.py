"""Transfer phases in per-node byte rates: contiguous bursts well above each node's baseline.

Input is one rate matrix `rates[node, t]` in bytes per second on a regular grid (the rate at
grid point t is the average over (t - step, t], as `telemetry.to_rates` computes it), NaN where
nothing was reported. `find_phases` returns the bursts:

1. gaps: a run of NaN of at most `max_fill_s` between two reported rates takes the later rate
   (after a missed scrape a counter's next rate is the average over the whole gap, so the bytes
   add up);
2. baseline: per node, the rolling median of the rate over `baseline_window_s` (centred; NaN
   ignored), evaluated every window/24 samples and held in between, so it follows a level that
   changes with the workload (a job's steady dataset reads) but not a burst shorter than half
   the window; where fewer than a quarter of the window's samples were reported (a node back
   from an outage), the node's median over the whole range;
3. noise: per node, sigma = 1.4826 * the rolling median of |rate - baseline| over the same
   window (a local MAD, scaled to a normal standard deviation);
4. active: rate - baseline > max(k_mad * sigma, min_rate_bps, (min_ratio - 1) * baseline),
   i.e. a robust outlier that is also large in absolute terms and relative to the baseline;
5. per node, inactive runs of at most `max_gap_s` between two active samples become active (a
   save that stalls for one scrape is still one save);
6. phases: the runs of "some node is active" (gaps of at most `max_gap_s` merged again), kept
   when they last at least `min_duration_s`; a phase covers (first - step, last] in time.

    >>> import numpy as np
    >>> r = np.full((2, 40), 1e5); r[:, 20:24] = 2e9
    >>> [(p.first, p.last, p.nodes) for p in find_phases(r, 30, PhaseConfig())]
    [(20, 23, (0, 1))]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trainguard.errors import ConfigError
from trainguard.telemetry.frame import FloatArray

__all__ = [
    "MAD_TO_SIGMA",
    "BoolArray",
    "PhaseConfig",
    "RawPhase",
    "active_mask",
    "close_gaps",
    "fill_gaps",
    "find_phases",
    "rolling_median",
    "runs",
]

BoolArray = npt.NDArray[np.bool_]

MAD_TO_SIGMA = 1.4826
"""Median absolute deviation -> standard deviation of a normal distribution."""

_BASELINE_EVALS = 24
"""The rolling baseline is evaluated this many times per window (then held)."""


@dataclass(frozen=True, slots=True)
class PhaseConfig:
    """How a burst is told from the baseline; the defaults are `trainguard ckpt analyze`'s.

        >>> PhaseConfig(min_duration_s=120).min_duration_s
        120
    """

    k_mad: float = 6.0
    """A sample is active when it exceeds the baseline by this many robust sigmas (and ...)."""
    min_rate_bps: float = 50e6
    """... by at least this many bytes/s per node (0.4 Gbit/s): the absolute floor ..."""
    min_ratio: float = 2.0
    """... and reaches at least this multiple of the baseline (a busy node's noise is large)."""
    baseline_window_s: float = 7200.0
    """Rolling-median window of the baseline; bursts up to about half of it are found."""
    max_gap_s: float = 60.0
    """Inactive stretches of at most this long inside a burst are merged into it."""
    min_duration_s: float = 60.0
    """Shorter phases are dropped."""
    max_fill_s: float = 600.0
    """Missing samples (scrape gaps) up to this long take the rate that follows them."""

    def __post_init__(self) -> None:
        for name in ("k_mad", "min_rate_bps", "max_gap_s", "min_duration_s", "max_fill_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"ckpt.analyze.{name} must be a finite number >= 0 "
                                  f"(got {value})")
        if not math.isfinite(self.min_ratio) or self.min_ratio < 1:
            raise ConfigError(f"ckpt.analyze.min_ratio must be >= 1 (got {self.min_ratio})")
        if not math.isfinite(self.baseline_window_s) or self.baseline_window_s <= 0:
            raise ConfigError("ckpt.analyze.baseline_window_s must be > 0")
        if self.k_mad == 0 and self.min_rate_bps == 0 and self.min_ratio == 1:
            raise ConfigError("ckpt.analyze: k_mad, min_rate_bps and min_ratio - 1 cannot all "
                              "be 0 (every sample above the baseline would be a burst)")


@dataclass(frozen=True, slots=True, eq=False)
class RawPhase:
    """One burst in grid indices: samples `first..last` (inclusive) of the rate matrix."""

    first: int
    last: int
    nodes: tuple[int, ...]
    """Rows with at least one active sample in the phase, ascending."""
    active: BoolArray
    """`active[k, j]`: node `nodes[k]` active at sample `first + j` (after gap closing)."""


def fill_gaps(rates: FloatArray, max_fill: int) -> FloatArray:
    """Step 1: NaN runs of at most `max_fill` samples between two values take the later one."""
    out = rates.copy()
    if max_fill <= 0 or out.size == 0:
        return out
    n_t = out.shape[1]
    valid = ~np.isnan(out)
    cols = np.arange(n_t, dtype=np.int64)
    # Index of the next reported sample at or after each column (n_t: none).
    nxt = np.where(valid, cols, n_t)
    nxt = np.minimum.accumulate(nxt[:, ::-1], axis=1)[:, ::-1]
    # Index of the previous reported sample at or before each column (-1: none).
    prev = np.maximum.accumulate(np.where(valid, cols, -1), axis=1)
    # Leading NaN stays: the first rate after it covers only the step before it.
    fill = ~valid & (prev >= 0) & (nxt < n_t) & (nxt - prev - 1 <= max_fill)
    rows, where = np.nonzero(fill)
    out[rows, where] = out[rows, nxt[rows, where]]
    return out


def rolling_median(x: FloatArray, window: int, min_count: int = 1) -> FloatArray:
    """Step 2: per row, the NaN-ignoring median of the `window` samples centred on each
    sample, evaluated every max(1, window // 24) samples and held for the samples nearest;
    NaN where fewer than `min_count` of those samples are reported."""
    n_rows, n_t = x.shape
    out = np.full_like(x, np.nan)
    if n_t == 0:
        return out
    half = max(window, 1) // 2
    stride = max(1, window // _BASELINE_EVALS)
    centres = np.arange(0, n_t, stride)
    nearest = np.minimum((np.arange(n_t) + stride // 2) // stride, centres.size - 1)
    for i in range(n_rows):  # one row at a time: the windows of all rows may not fit in memory
        padded = np.pad(x[i], half, constant_values=np.nan)
        win = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1)[centres]
        srt = np.sort(win, axis=1)  # NaN sorts last
        count = np.count_nonzero(~np.isnan(win), axis=1)
        lo = np.take_along_axis(srt, np.maximum((count - 1) // 2, 0)[:, None], axis=1)[:, 0]
        hi = np.take_along_axis(srt, (count // 2)[:, None], axis=1)[:, 0]
        med = np.where(count >= max(min_count, 1), (lo + hi) / 2, np.nan)
        out[i] = med[nearest]
    return out


def _local_median(x: FloatArray, window: int) -> FloatArray:
    """`rolling_median`, falling back to the row's median over everything where fewer than a
    quarter of the window was reported (a node back from an outage, the edges of a short range:
    the window would hold mostly the burst itself)."""
    local = rolling_median(x, window, min_count=window // 4)
    whole = np.full(x.shape[0], np.nan)
    for i in range(x.shape[0]):
        finite = x[i][~np.isnan(x[i])]
        if finite.size:
            whole[i] = float(np.median(finite))
    return np.where(np.isnan(local), whole[:, None], local)


def active_mask(rates: FloatArray, step_s: int, cfg: PhaseConfig) -> BoolArray:
    """Steps 2-4 on gap-filled rates: which samples of which node are a burst."""
    window = max(3, round(cfg.baseline_window_s / step_s))
    excess = rates - _local_median(rates, window)
    with np.errstate(invalid="ignore"):
        # Local like the baseline: a node that idles part of the range and streams data the
        # rest is quiet in one regime and noisy in the other.
        sigma = MAD_TO_SIGMA * _local_median(np.abs(excess), window)
        threshold = np.maximum(cfg.k_mad * np.nan_to_num(sigma), cfg.min_rate_bps)
        threshold = np.maximum(threshold, (cfg.min_ratio - 1.0) * (rates - excess))
        return np.asarray(excess > threshold, dtype=np.bool_)  # NaN compares False


def close_gaps(mask: BoolArray, max_gap: int) -> BoolArray:
    """Step 5 (per row): False runs of at most `max_gap` between two True become True."""
    out = mask.copy()
    if max_gap <= 0 or out.size == 0:
        return out
    n_t = out.shape[-1]
    cols = np.arange(n_t, dtype=np.int64)
    prev = np.maximum.accumulate(np.where(out, cols, -1), axis=-1)
    nxt = np.where(out, cols, n_t)
    nxt = np.flip(np.minimum.accumulate(np.flip(nxt, axis=-1), axis=-1), axis=-1)
    out |= (prev >= 0) & (nxt < n_t) & (nxt - prev - 1 <= max_gap)
    return out


def runs(mask: BoolArray) -> list[tuple[int, int]]:
    """(first, last) index of each run of True in a 1-D mask, inclusive."""
    edges = np.diff(np.concatenate(([0], mask.astype(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    return [(int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def find_phases(rates: FloatArray, step_s: int, cfg: PhaseConfig) -> list[RawPhase]:
    """Steps 1-6: the bursts of a `rates[node, t]` matrix (bytes/s), in time order.

    `rates` should already be gap-filled (`fill_gaps`) when its byte totals are to be read off
    it; filling here again is harmless.
    """
    if step_s <= 0:
        raise ConfigError("ckpt.analyze: the telemetry step must be > 0 s")
    if rates.ndim != 2:
        raise ConfigError(f"ckpt.analyze: rates must be [node, time], got shape {rates.shape}")
    filled = fill_gaps(rates, int(cfg.max_fill_s // step_s))
    max_gap = int(cfg.max_gap_s // step_s)
    active = close_gaps(active_mask(filled, step_s, cfg), max_gap)
    phases: list[RawPhase] = []
    anyone = np.asarray(active.any(axis=0), dtype=np.bool_)
    for first, last in runs(close_gaps(anyone, max_gap)):
        if (last - first + 1) * step_s < cfg.min_duration_s:
            continue
        window = active[:, first:last + 1]
        rows = tuple(int(i) for i in np.flatnonzero(window.any(axis=1)))
        phases.append(RawPhase(first, last, rows, window[list(rows)]))
    return phases
