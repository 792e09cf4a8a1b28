"""Baseline deviation: a series' peer residual against that same series' learned normal.

A GPU that always runs 4 C hotter than its siblings, or a node always a little busier than its
peers, is not flagged forever: each peer-standardised residual (from the peer unit) is scored
against its own learned level and spread per activity state (`baseline.Baseline`), at GPU level
and at node level. Learning is clipped (`adapt_clip`) so a slow precursor is not learned away,
restarts for a series back after a long absence, and runs fast on a node that changed job
(whose node-level deviations are not scored meanwhile).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.detect.baseline import Baseline
from trainguard.detect.config import DetectorConfig
from trainguard.detect.signals.common import learning_rates
from trainguard.detect.signals.regime import BlockContext
from trainguard.telemetry.frame import FloatArray

__all__ = ["SELF_FLOOR", "BaselineConfig", "BaselineDeviation"]

SELF_FLOOR = 0.5
"""Smallest spread of a peer-standardised residual: half the peers' own dispersion."""


@dataclass(frozen=True, slots=True)
class BaselineConfig:
    """The slice of `DetectorConfig` baseline deviation reads."""

    warm_n: float
    """Blocks a series is observed before its deviations count (`warmup_s` / `block_s`)."""
    alpha: float
    """Per-block learning weight (from `halflife_s`)."""
    adapt_clip: float

    @classmethod
    def of(cls, cfg: DetectorConfig) -> BaselineConfig:
        warm_n, alpha = learning_rates(cfg)
        return cls(warm_n, alpha, cfg.adapt_clip)


@dataclass(eq=False)
class BaselineDeviation:
    """Learned normals of the GPU-level and the node-level peer residuals."""

    cfg: BaselineConfig
    base1: Baseline
    """[GPU metric, node, gpu]."""
    base2: Baseline
    """[metric, node], GPU metrics (their node medians) first."""

    @classmethod
    def new(cls, cfg: BaselineConfig) -> BaselineDeviation:
        return cls(cfg, Baseline.empty((0, 0, 0)), Baseline.empty((0, 0)))

    def grow(self, mg: int, mn: int, n: int, g: int) -> None:
        """Make room (new metrics, nodes, GPUs start unlearned). Node metrics follow the GPU
        metrics in `base2`: its rows are re-placed when either list grows."""
        m = mg + mn
        old_mg = self.base1.mu.shape[1]
        self.base1.grow((mg, n, g))
        if self.base2.mu.shape[1:] != (m, n):
            new = Baseline.empty((m, n))
            om, on = self.base2.mu.shape[1:]
            for src, dst in ((self.base2.mu, new.mu), (self.base2.spread, new.spread),
                             (self.base2.n, new.n)):
                dst[:, :old_mg, :on] = src[:, :old_mg]
                dst[:, mg:mg + om - old_mg, :on] = src[:, old_mg:]
            self.base2 = new

    def reset_metric(self, i: int) -> None:
        """Learn metric `i` (GPU metrics first) afresh."""
        if i < self.base1.mu.shape[1]:
            row1 = np.zeros(self.base1.mu.shape[1:], dtype=bool)
            row1[i] = True
            self.base1.forget(row1)
        row2 = np.zeros(self.base2.mu.shape[1:], dtype=bool)
        row2[i] = True
        self.base2.forget(row2)

    def step(self, zp1: FloatArray, zp2: FloatArray, ctx: BlockContext
             ) -> tuple[FloatArray, FloatArray]:
        """(z1, z2): the peer residuals `zp1[metric, node, gpu]`, `zp2[metric, node]` against
        their learned normals (NaN until warm); then learn from them."""
        cfg = self.cfg
        # Series back after a long absence (reboot, repair, replaced GPU): learn them afresh.
        if ctx.back_gpu.any():
            self.base1.forget(np.broadcast_to(ctx.back_gpu, self.base1.mu.shape[1:]))
        if ctx.back_node.any():
            self.base2.forget(np.broadcast_to(ctx.back_node, self.base2.mu.shape[1:]))
        busy, relearn = ctx.busy, ctx.relearn
        floor = np.full(1, SELF_FLOOR)
        z1 = self.base1.score_update(zp1, busy[None, :, None], floor, cfg.warm_n, cfg.alpha,
                                     cfg.adapt_clip)
        z2 = self.base2.score_update(zp2, busy[None, :], floor, cfg.warm_n, cfg.alpha,
                                     cfg.adapt_clip,
                                     fast=np.broadcast_to(relearn[None, :], zp2.shape))
        z2[:, relearn] = np.nan
        return z1, z2
