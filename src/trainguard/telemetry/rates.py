"""Cumulative series -> per-second rates, with Prometheus-style reset handling.

Counters (declared, or named `*_total`) and gauges that are cumulative in fact (dcgm-exporter
exports PCIe replay and ECC totals as gauges) say little as levels; their rate is the signal.

The rate at grid point t of an entity is computed against that entity's previous *reported*
sample (gaps of NaN are skipped, so a 3-step gap gives the average rate over those 3 steps):

1. increase = v_t - v_prev, or v_t when v_t < v_prev (a decrease means the counter reset to zero
   and counted up to v_t since, as Prometheus' `rate()` assumes);
2. rate = increase / (t - t_prev) in per-second units;
3. NaN where v_t is NaN and at each entity's first reported sample.

The metric name (key) is kept unchanged; only `kind` becomes `MetricKind.RATE`.

    >>> import numpy as np
    >>> from trainguard.telemetry.frame import Entity, MetricSeries, Telemetry
    >>> c = MetricSeries("x_total", MetricKind.COUNTER, (Entity("n1"),),
    ...                  np.array([[0.0, 30.0, np.nan, 90.0, 10.0]]))
    >>> to_rates(Telemetry(np.arange(5) * 10, 10, (c,))).metrics[0].values.tolist()
    [[nan, 3.0, nan, 3.0, 1.0]]
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from trainguard.telemetry.frame import FloatArray, MetricKind, MetricSeries, Telemetry

__all__ = ["MAX_RESET_FRACTION", "cumulative_verdict", "detect_monotonic", "monotone_counts",
           "to_rates"]

MAX_RESET_FRACTION = 0.02
"""A cumulative gauge may decrease (reset) in at most this fraction of its increases."""


def _previous_valid(values: FloatArray) -> tuple[FloatArray, np.ndarray]:
    """Per cell, the previous reported value of its row and that value's column (-1: none)."""
    n_t = values.shape[1]
    # Most rows miss nothing: their previous value is the one just before.
    prev = np.empty_like(values)
    prev[:, :1] = np.nan
    prev[:, 1:] = values[:, :-1]
    prev_idx = np.empty(values.shape, dtype=np.int64)
    prev_idx[...] = np.arange(-1, n_t - 1, dtype=np.int64)
    gaps = np.flatnonzero(np.isnan(values[:, :-1]).any(axis=1))
    if gaps.size:
        sub = values[gaps]
        idx = np.where(np.isnan(sub), -1, np.arange(n_t, dtype=np.int64))
        np.maximum.accumulate(idx, axis=1, out=idx)
        sub_idx = np.full_like(idx, -1)
        sub_idx[:, 1:] = idx[:, :-1]
        sub_prev = np.take_along_axis(sub, np.maximum(sub_idx, 0), axis=1)
        sub_prev[sub_idx < 0] = np.nan
        prev[gaps] = sub_prev
        prev_idx[gaps] = sub_idx
    return prev, prev_idx


_COUNTER_NAME = re.compile(r"counter|_total$|_count$|_sum$|ENERGY_CONSUMPTION", re.IGNORECASE)
RESET_DROP = 0.1
"""A decrease to below this fraction of the previous value is a reset (reboot, driver reload)."""


def detect_monotonic(series: MetricSeries) -> bool:
    """True when a series is cumulative in fact (dcgm-exporter types some counters as gauges).

    No negative values, it increases somewhere, and every decrease is a reset (a drop to below
    10% of the previous value) except in at most 2% as many steps as it increases. Rare-event
    counters reset by reboots would fail a plain "decreases are rare" test, and level gauges
    that step up and back down (the XID gauge, memory in use) would pass it; so resets must also
    be much rarer than increases (1 in 3), unless the name says counter/_total.
    """
    v = series.values
    if v.size == 0 or not np.isfinite(v).any() or bool((v < 0).any()):
        return False  # a negative value: never cumulative (`cumulative_verdict`)
    prev, _ = _previous_valid(v)
    n_pos, n_reset, n_other, negative = monotone_counts(v.reshape(1, -1),
                                                        prev.reshape(1, -1))[0].tolist()
    return n_pos > 0 and cumulative_verdict(series.name, n_pos, n_reset, n_other,
                                            bool(negative))


def monotone_counts(values: FloatArray, prev: FloatArray) -> npt.NDArray[np.int64]:
    """Per row of `values` [row, samples] (`prev`: each sample's previous reported value):
    increases, resets (a drop below `RESET_DROP` of the previous value), other decreases, and
    1 if any value is negative; shape [row, 4]. What `cumulative_verdict` is decided from.

    >>> v = np.array([[0.0, 5.0, 7.0, 0.0, 2.0, 1.0]])
    >>> monotone_counts(v, np.array([[np.nan, 0.0, 5.0, 7.0, 0.0, 2.0]])).tolist()
    [[3, 1, 1, 0]]
    """
    with np.errstate(invalid="ignore"):
        diff = values - prev
        n_pos = np.count_nonzero(diff > 0, axis=1)
        dec = diff < 0
        drop = np.multiply(prev, RESET_DROP, out=diff)  # the difference is not needed again
        resets = np.less(values, drop)
        resets &= dec
        n_reset = np.count_nonzero(resets, axis=1)
        return np.stack([n_pos, n_reset, np.count_nonzero(dec, axis=1) - n_reset,
                         (values < 0).any(axis=1).astype(np.int64)], axis=1)


def cumulative_verdict(name: str, n_pos: int, n_reset: int, n_other: int,
                       negative: bool) -> bool:
    """Whether a series is cumulative from what is known of it so far: its name, and how often
    it rose (`n_pos`), dropped to a reset (`n_reset`) or dropped otherwise (`n_other`).

    A counter-like name (``*_total``, ``counter``, ...) is cumulative until its behaviour says
    otherwise, even before its first increase; any other name needs increases, resets much
    rarer than increases and almost no other decrease (see `detect_monotonic`).

    >>> cumulative_verdict("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0, 0, 0, False)
    True
    >>> cumulative_verdict("DCGM_FI_DEV_GPU_TEMP", 5, 0, 4, False)
    False
    """
    if negative or n_other > MAX_RESET_FRACTION * n_pos:
        return False
    if _COUNTER_NAME.search(name.split("{", 1)[0]):
        return True
    return n_pos > 0 and n_reset * 3 <= n_pos


def _rate(series: MetricSeries, step_s: int) -> MetricSeries:
    cur = series.values
    prev, prev_idx = _previous_valid(cur)
    n_t = cur.shape[1]
    gap = (np.arange(n_t, dtype=np.int64)[None, :] - prev_idx).astype(np.float64) * step_s
    with np.errstate(invalid="ignore"):
        increase = np.where(cur < prev, cur, cur - prev)
        rate = increase / gap
    rate[prev_idx < 0] = np.nan
    return MetricSeries(series.name, MetricKind.RATE, series.entities, rate)


def to_rates(tel: Telemetry) -> Telemetry:
    """COUNTER and cumulative-in-fact (MONOTONIC, or GAUGE/UNKNOWN detected as such) series
    become per-second RATE series; all other series are returned unchanged."""
    out: list[MetricSeries] = []
    for m in tel.metrics:
        cumulative = m.kind in (MetricKind.COUNTER, MetricKind.MONOTONIC) or (
            m.kind in (MetricKind.GAUGE, MetricKind.UNKNOWN) and detect_monotonic(m))
        out.append(_rate(m, tel.step_s) if cumulative else m)
    return Telemetry(tel.times, tel.step_s, tuple(out), tel.jobs)
