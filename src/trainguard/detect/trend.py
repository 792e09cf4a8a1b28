"""Slow degradation: an error counter that keeps growing over hours (a trend test).

HBM wear shows as correctable-error row remaps (and SBE counts) that arrive one by one, hours
apart, faster and faster, a day or more before the uncorrectable error. The recurring-count rule
(`precursors.py`, a 30-minute window) never sees enough of them at once. This rule counts, per
wear counter (`knowledge.is_wear_counter`: correctable ECC, correctable remapped rows; a link's
CRC or replay count that creeps up is common on healthy GPUs), the blocks with an increase over
the last `trend_window_s`:

* at least `trend_min_events` of them, spread over at least `trend_min_span_s`;
* unlikely under the series' own usual rate (at least `trend_warmup_s` of its history before
  the first of those events, and never less than one event per `trend_floor_s`): the
  confidence is 1 - P(at least that many | usual rate), Poisson, and it must reach
  `trend_confidence`. A series that has always counted like this has no quiet history. When
  that history holds events, the rate they give is uncertain as well: the confidence is also
  at most the negative-binomial one (`predictive_confidence`), so 2-3 events in the first 7 h
  do not make 17 in the next 24 h a degradation (a GPU whose correctable errors come in uneven
  spells does that all its life).

It fires once per degradation, again only when the count has doubled. The finding says how long
the degradation has been seen (the alert's lead over a failure is measured afterwards, from the
XID's time) and how sure it is that this is more than the series' usual rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.telemetry.frame import FloatArray

__all__ = ["TrendRule", "poisson_confidence", "predictive_confidence"]

SLOTS = 32
"""Event times kept per series (the most recent ones)."""


def poisson_confidence(count: int, expected: float) -> float:
    """1 - P(X >= count) for X ~ Poisson(expected): how sure `count` is more than usual."""
    if count <= 0:
        return 0.0
    lam = max(expected, 1e-12)
    term = math.exp(-lam)
    below = term
    for k in range(1, count):
        term *= lam / k
        below += term
    return min(1.0, max(0.0, below))


def predictive_confidence(count: int, events: float, p: float) -> float:
    """1 - P(X >= count) for X ~ NegativeBinomial(`events`, `p`): the number of events in the
    next stretch of time, for a series that logged `events` in its history, where `p` is the
    history's share of history and stretch together (a Poisson rate known only from those
    events, with a scale-free prior). A few events in a short history prove no low rate.

        >>> round(poisson_confidence(17, 2.5 / 210 * 720), 3), round(
        ...     predictive_confidence(17, 2.5, 210 / (210 + 720)), 3)
        (0.993, 0.894)
    """
    if count <= 0:
        return 0.0
    term = math.pow(p, events)
    below = term
    for k in range(count - 1):
        term *= (k + events) / (k + 1) * (1.0 - p)
        below += term
    return min(1.0, max(0.0, below))


@dataclass
class _Series:
    times: FloatArray  # node, gpu, SLOTS: block numbers of the last event blocks (-inf: none)
    fired: FloatArray  # count at the last firing
    events: FloatArray  # event blocks ever seen
    blocks: FloatArray  # blocks observed


@dataclass
class TrendRule:
    """Per-series state of the trend test (see the module docstring)."""

    cfg: DetectorConfig
    series: dict[str, _Series] = field(default_factory=dict)

    def _state(self, name: str, shape: tuple[int, int]) -> _Series:
        st = self.series.get(name)
        if st is not None and st.fired.shape == shape:
            return st
        new = _Series(np.full((*shape, SLOTS), -np.inf), np.zeros(shape), np.zeros(shape),
                      np.zeros(shape))
        if st is not None:
            a, b = min(shape[0], st.fired.shape[0]), min(shape[1], st.fired.shape[1])
            new.times[:a, :b] = st.times[:a, :b]
            for old, dst in ((st.fired, new.fired), (st.events, new.events),
                             (st.blocks, new.blocks)):
                dst[:a, :b] = old[:a, :b]
        self.series[name] = new
        return new

    def step(self, name: str, now: float, event: np.ndarray, seen: np.ndarray
             ) -> list[tuple[int, int, float, str]]:
        """One block (`now` = its number since the start): (node, gpu, count, detail) of the
        series that fired."""
        cfg = self.cfg
        st = self._state(name, event.shape)
        w = cfg.trend_window_s / cfg.block_s
        e = event & seen & (st.blocks > 0)  # not the first sample: no previous value
        if e.any():
            shifted = np.concatenate([st.times[..., 1:], np.full((*e.shape, 1), now)], axis=-1)
            st.times = np.where(e[..., None], shifted, st.times)
        inside = st.times > now - w
        count = inside.sum(axis=-1)
        st.fired = np.where(count == 0, 0.0, st.fired)
        out: list[tuple[int, int, float, str]] = []
        cand = e & (count >= cfg.trend_min_events) & (count >= 2 * st.fired)
        for ni, gi in zip(*np.nonzero(cand), strict=True):
            t = st.times[ni, gi]
            first = float(t[np.isfinite(t) & (t > now - w)].min())
            span_s = (now - first) * cfg.block_s
            if span_s < cfg.trend_min_span_s:
                continue
            c = int(count[ni, gi])
            # the usual rate: the history before this degradation began. An error counter that
            # has never moved may not be handed to the rule yet (nothing marks it cumulative),
            # so that history starts when the detector did: a counter that stayed put was quiet.
            hist = first
            if hist * cfg.block_s < cfg.trend_warmup_s:
                continue
            before = max(float(st.events[ni, gi]) - (c - 1), 0.0)
            rate = max(before / hist, cfg.block_s / cfg.trend_floor_s)
            conf = poisson_confidence(c, rate * w)
            if before > 0:
                # The usual rate is known only as well as its history tells it: a few events in
                # a few hours fit a rate several times higher (the predictive count is
                # negative binomial, not Poisson at the point estimate).
                conf = min(conf, predictive_confidence(c, before, hist / (hist + w)))
            if conf < cfg.trend_confidence:
                continue
            st.fired[ni, gi] = c
            out.append((int(ni), int(gi), float(c),
                f"degradation seen for {span_s / 3600:.1f} h: {c} blocks with new errors "
                f"(usually {rate * w:.1f} per {cfg.trend_window_s / 3600:.0f} h), confidence "
                f"{conf:.3f}; wear like this precedes an uncorrectable error by hours to days"))
        st.events = st.events + e
        st.blocks = st.blocks + seen
        return out
