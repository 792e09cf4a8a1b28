"""The block's context every signal unit reads: who reports, who is busy, who runs with whom.

Not a signal itself: per block it turns presence and activity into
1. the nodes that report, and the GPUs/nodes back after a long absence (to be learned afresh);
2. busy or idle per node, against the cluster's slowly tracked busy level;
3. peer groups (`groups.py`), and the nodes whose group changed (their baselines relearn fast
   for `regime_relearn_s`) or that started or stopped (their soft scores settle for `settle_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.groups import infer_groups
from trainguard.detect.hard import BoolArray
from trainguard.detect.numeric import busy_level, nanmedian_axis
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["BlockContext", "Regime", "RegimeConfig"]


@dataclass(frozen=True, slots=True)
class RegimeConfig:
    """The slice of `DetectorConfig` the regime reads (see its fields' documentation)."""

    idle_fraction: float
    peer_corr: float
    peer_window_blocks: int
    regime_relearn_s: float
    settle_s: float
    gone_reset_s: float

    @classmethod
    def of(cls, cfg: DetectorConfig) -> RegimeConfig:
        return cls(cfg.idle_fraction, cfg.peer_corr, cfg.peer_window_blocks,
                   cfg.regime_relearn_s, cfg.settle_s, cfg.gone_reset_s)


@dataclass(frozen=True, eq=False)
class BlockContext:
    """One block's regime (nodes x GPUs as the layout has them now)."""

    t: float
    node_pres: BoolArray
    """Per node: some GPU or node series reports in this block."""
    back_gpu: BoolArray
    """Per node x GPU: reporting again after more than `gone_reset_s` away."""
    back_node: BoolArray
    busy: BoolArray
    labels: IntArray
    """Peer group per node (`groups.IDLE_GROUP` idle, -1 unknown)."""
    relearn: BoolArray
    """Per node: baselines relearn fast (its group changed lately)."""
    settle: BoolArray
    """Per node: soft scores ignored (it started, stopped or changed group lately)."""


@dataclass(eq=False)
class Regime:
    """Mutable regime state across blocks; `new` for an empty one."""

    cfg: RegimeConfig
    level: float
    history: FloatArray
    members: BoolArray
    relearn_until: FloatArray
    settle_until: FloatArray
    prev_busy: BoolArray
    last_seen_gpu: FloatArray
    last_seen_node: FloatArray

    @classmethod
    def new(cls, cfg: RegimeConfig) -> Regime:
        return cls(cfg, np.nan, np.zeros((0, cfg.peer_window_blocks)),
                   np.zeros((0, 0), dtype=bool), np.zeros(0), np.zeros(0),
                   np.zeros(0, dtype=bool), np.zeros((0, 0)), np.zeros(0))

    def grow(self, n: int, g: int) -> None:
        """Make room for `n` nodes of up to `g` GPUs (new ones start unseen)."""
        self.settle_until = np.pad(self.settle_until, (0, n - self.settle_until.shape[0]))
        self.prev_busy = np.pad(self.prev_busy, (0, n - self.prev_busy.shape[0]))
        if self.history.shape[0] != n:
            self.history = np.pad(self.history, ((0, n - self.history.shape[0]), (0, 0)),
                                  constant_values=np.nan)
            self.members = np.pad(self.members, ((0, n - self.members.shape[0]),) * 2)
            self.relearn_until = np.pad(self.relearn_until, (0, n - self.relearn_until.shape[0]))
            self.last_seen_node = np.pad(self.last_seen_node,
                                         (0, n - self.last_seen_node.shape[0]))
        self.last_seen_gpu = np.pad(self.last_seen_gpu,
                                    ((0, n - self.last_seen_gpu.shape[0]),
                                     (0, g - self.last_seen_gpu.shape[1])))

    def step(self, t: float, x: FloatArray, xn: FloatArray, pres: BoolArray, act: int | None,
             jobs: list[str] | None) -> BlockContext:
        """The context of the block ending at `t`: `x[metric, node, gpu]` and `xn[metric, node]`
        block means, `pres[node, gpu]` GPUs that reported, `act` the activity metric's row (None:
        a node is busy when it reports), `jobs` a job id per node when known."""
        cfg = self.cfg
        node_pres: BoolArray = np.asarray(pres.any(axis=1) | (~np.isnan(xn)).any(axis=0))
        back_gpu = pres & (self.last_seen_gpu > 0) & (t - self.last_seen_gpu > cfg.gone_reset_s)
        back_node = node_pres & (self.last_seen_node > 0) & (
            t - self.last_seen_node > cfg.gone_reset_s)
        self.last_seen_gpu[pres] = t
        self.last_seen_node[node_pres] = t

        if act is not None:
            a, _ = nanmedian_axis(x[act], axis=1)
        else:
            a = np.where(node_pres, 1.0, np.nan)
        self.level, level = busy_level(self.level, a)
        busy = np.nan_to_num(a, nan=0.0) >= cfg.idle_fraction * level
        self.history = np.roll(self.history, -1, axis=1)
        self.history[:, -1] = a
        labels = infer_groups(self.history, busy, level, cfg.peer_corr, jobs)
        members = (labels[:, None] == labels[None, :]) & (labels[:, None] >= 0)
        inter = (members & self.members).sum(axis=1)
        union = (members | self.members).sum(axis=1)
        changed = (union > 0) & (inter < 0.5 * union)
        self.members = members
        self.relearn_until[changed] = t + cfg.regime_relearn_s
        flipped = busy != self.prev_busy
        self.prev_busy = busy
        self.settle_until[changed | flipped] = t + cfg.settle_s
        return BlockContext(t, node_pres, back_gpu, back_node, busy, labels,
                            self.relearn_until > t, self.settle_until > t)
