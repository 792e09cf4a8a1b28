"""Per-block scoring: the signal units (`detect/signals/`), composed.

One block, in order:
1. hard evidence of the block goes to the episode tracker first (it quiets predictive alerts;
   `signals.hard_evidence`);
2. the regime: who reports, busy/idle, peer groups, who settles or relearns (`signals.regime`);
3. peer deviation: each GPU against its node's GPUs, each node against its peer group, in units
   of the peers' own dispersion (`signals.peer`);
4. baseline deviation: those residuals against each series' own learned normal, then learn from
   this block, clipped (`signals.baseline`);
5. counter deviation: error counters that are normally zero score by recurrence instead
   (`signals.counters`);
6. fusion: per-metric calibration, weights, crowd muting, node score = strongest metric + half
   the second strongest, and what leads it (`signals.fusion`);
7. early warnings completed in this block are folded in (`signals.precursor`), and the block
   goes to the episode tracker.

Each unit keeps its own slice of `DetectorConfig` and its own state; this module only passes one
unit's output to the next. A new signal is a new unit and a line here.
"""

from __future__ import annotations

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import EpisodeTracker
from trainguard.detect.hard import BoolArray, HardHit
from trainguard.detect.knowledge import ACTIVITY_FIELDS
from trainguard.detect.layout import Layout
from trainguard.detect.precursors import PrecursorHits
from trainguard.detect.signals import hard_evidence, precursor
from trainguard.detect.signals.baseline import BaselineConfig, BaselineDeviation
from trainguard.detect.signals.counters import CounterConfig, CounterDeviation
from trainguard.detect.signals.explained import (
    MetricRoles,
    mute_app_explained,
    mute_cooling_explained,
    mute_more_work,
)
from trainguard.detect.signals.fusion import Fusion, FusionConfig, lead_of
from trainguard.detect.signals.peer import PeerConfig, PeerDeviation
from trainguard.detect.signals.precursor import PrecursorConfig
from trainguard.detect.signals.regime import Regime, RegimeConfig
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["BlockScorer", "mute_node_activity"]


class BlockScorer:
    """The signal units' state across blocks, and their composition per block."""

    def __init__(self, cfg: DetectorConfig, layout: Layout) -> None:
        self.cfg = cfg
        self.layout = layout
        self.regime = Regime.new(RegimeConfig.of(cfg))
        self.peer = PeerDeviation.new(PeerConfig.of(cfg))
        self.baseline = BaselineDeviation.new(BaselineConfig.of(cfg))
        self.counters = CounterDeviation(CounterConfig.of(cfg))
        self.fusion = Fusion.new(FusionConfig.of(cfg))
        self.precursor = PrecursorConfig.of(cfg)
        self.blocks = 0
        self._roles: tuple[tuple[int, int], MetricRoles] | None = None

    def _grow(self) -> None:
        mg, mn, n, g = self.layout.shape
        self.baseline.grow(mg, mn, n, g)
        self.peer.grow(mg, mg + mn)
        self.fusion.grow(mg, mg + mn)
        self.counters.grow(mg, mn, n, g)
        self.regime.grow(n, g)

    def reset_metrics(self, idx: list[int]) -> None:
        """Learn metrics `idx` (GPU metrics first, then node metrics) afresh: their values
        changed meaning (a series found to be cumulative is scored by its rate from then on)."""
        self._grow()
        for i in idx:
            for unit in (self.baseline, self.peer, self.fusion, self.counters):
                unit.reset_metric(i)

    def run(self, times: IntArray, bg: FloatArray, bn: FloatArray, present: np.ndarray,
            hits: list[HardHit], tracker: EpisodeTracker, soft: FloatArray, weights: FloatArray,
            act: int | None, jobs: list[list[str]] | None, s: int, unit_floor: FloatArray,
            cumulative: BoolArray, early: PrecursorHits | None = None,
            app_recent: BoolArray | None = None, warnings: list[HardHit] | None = None
            ) -> None:
        """Score the complete blocks of `s` samples in `times` (len(times) % s == 0) from
        their means `bg[gpu metric, node, gpu, block]` and `bn[node metric, node, block]`
        (counters as rates); `hits` the chunk's hard evidence, `early` its early warnings per
        block, `app_recent[node, block]` where an application XID began recently, `warnings`
        the chunk's non-fatal hardware events (early warnings, or part of an open hard
        alert)."""
        self._grow()
        nb = times.size // s
        pb = np.asarray(present.reshape(*present.shape[:-1], nb, s).any(axis=-1), dtype=bool)
        by_block: dict[int, list[HardHit]] = {}
        for h in hits:
            by_block.setdefault(h.t_index // s, []).append(h)
        warn_block: dict[int, list[HardHit]] = {}
        for h in warnings or ():
            warn_block.setdefault(h.t_index // s, []).append(h)
        activity = self._activity_rows(act)
        roles = self._roles_of()
        # Block by block, each block's means contiguous (every unit reads them several times).
        bg_b = np.ascontiguousarray(np.moveaxis(bg, -1, 0))
        bn_b = np.ascontiguousarray(np.moveaxis(bn, -1, 0))
        for b in range(nb):
            t_end = float(times[b * s + s - 1])
            hard_evidence.emit(tracker, by_block.get(b, []), times, self.layout)
            found = early.get(b) if early else None
            if b in warn_block:
                found = [*(found or ()), *hard_evidence.warn(tracker, warn_block[b], times,
                                                             self.layout)]
            self._block(t_end, bg_b[b], bn_b[b], pb[..., b], tracker, soft, weights, act,
                        jobs[b] if jobs else None, unit_floor[:, b], cumulative, activity,
                        found, roles,
                        app_recent[:, b] if app_recent is not None else None)
            tracker.expire_hard(t_end)

    def _block(self, t: float, x: FloatArray, xn: FloatArray, pres: BoolArray,
               tracker: EpisodeTracker, soft: FloatArray, weights: FloatArray, act: int | None,
               jobs: list[str] | None, unit_floor: FloatArray, cumulative: BoolArray,
               activity: BoolArray, early: list[tuple[int, Signal]] | None,
               roles: MetricRoles, app_recent: BoolArray | None = None) -> None:
        self.blocks += 1
        ctx = self.regime.step(t, x, xn, pres, act, jobs)
        zp1, zp2 = self.peer.step(x, xn, ctx.labels, unit_floor)
        z1, z2 = self.baseline.step(zp1, zp2, ctx)
        counter_led = self.counters.step(x, xn, unit_floor, cumulative, z1, z2, roles.volume,
                                         roles.repair)
        z1[:, ctx.settle, :] = np.nan
        z2[:, ctx.settle] = np.nan
        # What the job, the cooling or an application crash explains is not evidence.
        mute_node_activity(z2, activity | roles.node_workload[: activity.size])
        mute_cooling_explained(z1, z2, roles)
        mute_more_work(z1, roles)
        if app_recent is not None:
            mute_app_explained(z1, z2, roles, app_recent)
        fused = self.fusion.step(z1, z2, soft, weights, ctx.node_pres, roles.supporting,
                                 roles.families)
        quiet = tracker.quiet(t)
        names = [*self.layout.gpu_metrics, *self.layout.node_metrics]
        signals = {i: self.fusion.signals(i, fused, z1, z2, names, self.layout)
                   for i in np.flatnonzero(fused.score >= self.cfg.score_on).tolist()}
        # Recurring error counts, and a GPU whose activity departs from its siblings', are
        # evidence sooner than a gauge excursion (thermal spikes and job-shaped wobbles last
        # minutes; precursors recur): tell the tracker what leads each node's score.
        lead = lead_of(fused.per_metric, counter_led, activity[: fused.per_metric.shape[0]])
        score, signals, lead = precursor.fold(self.precursor, early, fused.score, signals,
                                              quiet, lead)
        tracker.soft_block(t, score, signals, quiet, lead)

    def _roles_of(self) -> MetricRoles:
        """Per metric (GPU metrics first): may it only support another signal, and what it may
        explain (knowledge). Metric names only ever grow, so their counts identify the layout."""
        lay = self.layout
        key = (len(lay.gpu_metrics), len(lay.node_metrics))
        if self._roles is None or self._roles[0] != key:
            self._roles = (key, MetricRoles.of(lay.gpu_metrics, lay.node_metrics))
        return self._roles[1]

    def _activity_rows(self, act: int | None) -> BoolArray:
        """Per metric (GPU metrics first, then node metrics, never activity): is it a GPU
        activity field (utilisation, engine or SM activity; not power, which also follows
        temperature and clocks)."""
        lay = self.layout
        rows = np.zeros(len(lay.gpu_metrics) + len(lay.node_metrics), dtype=bool)
        for i, name in enumerate(lay.gpu_metrics):
            rows[i] = i == act or name in ACTIVITY_FIELDS
        return rows


def mute_node_activity(z2: FloatArray, activity: BoolArray) -> None:
    """Drop (in place) the node-level deviation of the GPU activity fields (`activity` per
    metric, GPU metrics first) from `z2[metric, node]`. A whole node's GPUs changing activity
    together is its job starting, stopping or changing phase, not a failing GPU: a GPU that
    fails departs from its siblings (the GPU-level deviation, kept), and a node that collapses
    is the host-collapse rule's.

        >>> z2 = np.ones((3, 2)); mute_node_activity(z2, np.array([True, False, False]))
        >>> z2[:, 0].tolist()
        [nan, 1.0, 1.0]
    """
    z2[activity[: z2.shape[0]]] = np.nan
