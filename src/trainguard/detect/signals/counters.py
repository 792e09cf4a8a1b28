"""Counter deviation: error counters that are normally zero score by recurrence, not level.

For a cumulative metric (a counter, scored by its rate) this unit turns each block's rate into
events per block (rate / the counter's typical increment) and, for the counters that are
error-like (events in at most `RARE_EVENT_FRACTION` of their series, tracked slowly: byte and
time counters merely quiet on an idle node are not), replaces the baseline deviation of each
sparse, warm series by its recurrence score (`sparse.SparseCounters`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.hard import BoolArray
from trainguard.detect.signals.common import learning_rates, rows
from trainguard.detect.sparse import SparseCounters, recur_chance, step_rows
from trainguard.telemetry.frame import FloatArray

__all__ = ["RARE_EVENT_FRACTION", "CounterConfig", "CounterDeviation", "events"]

RARE_EVENT_FRACTION = 0.05
"""A counter is error-like when at most this fraction of its series has events in a block."""


@dataclass(frozen=True, slots=True)
class CounterConfig:
    """The slice of `DetectorConfig` counter deviation reads."""

    warm_n: float
    alpha: float
    chance: float
    """Per look, how unlikely a recurrence must be at the series' own rate (`recur_chance`)."""

    @classmethod
    def of(cls, cfg: DetectorConfig) -> CounterConfig:
        return cls(*learning_rates(cfg), recur_chance(cfg.block_s))


@dataclass(eq=False)
class CounterDeviation:
    """Per-series recurrence state, and per metric the fraction of series with events."""

    cfg: CounterConfig
    sparse1: SparseCounters = field(default_factory=SparseCounters)
    """[GPU metric, node, gpu]."""
    sparse2: SparseCounters = field(default_factory=SparseCounters)
    """[node metric, node]."""
    busy_frac: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per metric (GPU metrics first): slowly tracked fraction of series with events."""

    def grow(self, mg: int, mn: int, n: int, g: int) -> None:
        if self.busy_frac.shape[0] != mg + mn:
            self.busy_frac = np.full(mg + mn, np.nan)  # re-learnt quickly when metrics appear
        self.sparse1.grow((mg, n, g))
        self.sparse2.grow((mn, n))

    def reset_metric(self, i: int) -> None:
        """Learn metric `i` (GPU metrics first) afresh."""
        mg = self.sparse1.mask.shape[0]
        if i < mg:
            self.sparse1.reset_row(i)
        else:
            self.sparse2.reset_row(i - mg)
        self.busy_frac[i] = np.nan

    def step(self, x: FloatArray, xn: FloatArray, unit_floor: FloatArray, cumulative: BoolArray,
             z1: FloatArray, z2: FloatArray, volume: BoolArray,
             repair: BoolArray | None = None) -> BoolArray:
        """Score the counters among `x[gpu metric, node, gpu]`, `xn[node metric, node]` (rates;
        `cumulative` per metric, `unit_floor` per metric: a counter's typical increment per
        block as a rate) and write the sparse series' scores into the baseline deviations
        `z1`, `z2` (in place). Returns, per (metric, node), whether a sparse series scored.

        `volume` (per metric) marks counters of work done (energy, bytes): never error-like,
        even when a long idle spell has made their events look rare. `repair` (per metric)
        marks counters of repairs made for good: their recurrence is scored whatever the
        series' rate before (`sparse.py`, "beyond chance")."""
        cfg = self.cfg
        mg = x.shape[0]
        cum_g, cum_n = np.flatnonzero(cumulative[:mg]), np.flatnonzero(cumulative[mg:])
        k1 = events(x[cum_g], unit_floor[:mg][cum_g][:, None, None])
        k2 = events(xn[cum_n], unit_floor[mg:][cum_n][:, None])

        f1 = np.full(mg, np.nan)
        f2 = np.full(xn.shape[0], np.nan)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if cum_g.size and k1[0].size:
                f1[cum_g] = np.nanmean(rows(np.where(np.isnan(k1), np.nan, k1 > 0.5)), axis=1)
            if cum_n.size and k2.shape[1]:
                f2[cum_n] = np.nanmean(np.where(np.isnan(k2), np.nan, k2 > 0.5), axis=1)
        self.busy_frac = _ew_frac(self.busy_frac, np.concatenate([f1, f2]))
        rare = self.busy_frac <= RARE_EVENT_FRACTION
        rare &= ~volume[: rare.size]
        gated = ~repair if repair is not None else np.ones(mg + xn.shape[0], dtype=bool)
        zs1, sp1 = step_rows(self.sparse1, cum_g, k1, cfg.alpha, cfg.warm_n, gated[:mg][cum_g],
                             cfg.chance)
        zs2, sp2 = step_rows(self.sparse2, cum_n, k2, cfg.alpha, cfg.warm_n, gated[mg:][cum_n],
                             cfg.chance)
        sp1 = sp1 & rare[:mg][cum_g, None, None]
        sp2 = sp2 & rare[mg:][cum_n, None]
        z1[cum_g] = np.where(sp1, zs1, z1[cum_g])
        z2[mg + cum_n] = np.where(sp2, zs2, z2[mg + cum_n])
        sparse_any = np.zeros(z2.shape, dtype=bool)
        sparse_any[cum_g] = sp1.any(axis=2)
        sparse_any[mg + cum_n] = sp2
        return sparse_any


def events(rate: FloatArray, unit: FloatArray) -> FloatArray:
    """Events per block: `rate` / the counter's typical increment `unit` (broadcast). Where the
    increment is not known yet (no increase seen in the sampled series: a counter that never
    moved on the cluster before), each block with an increase is one event: dividing by a
    vanishing unit would turn a healthy GPU's first, isolated burst into an astronomic
    deviation that pages on its own."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        per_unit = rate / np.where(unit > 0, unit, 1.0)
        out = np.where(unit > 0, per_unit, np.where(rate > 0, 1.0, 0.0))
    return np.asarray(np.where(np.isnan(rate), np.nan, out), dtype=np.float64)


def _ew_frac(cur: FloatArray, f: FloatArray) -> FloatArray:
    upd = np.where(np.isnan(cur), f, np.where(np.isnan(f), cur, 0.98 * cur + 0.02 * f))
    return np.asarray(upd, dtype=np.float64)
