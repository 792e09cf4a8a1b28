"""Peer deviation: each GPU against its node's other GPUs, each node against its peer group.

Per block:
1. r1 = GPU minus the median of its node's GPUs (with at least `min_gpus` reporting);
2. r2 = node value (median of its GPUs, or the node metric) minus the median of its peer group
   (with at least `min_peers` members reporting);
3. each residual is divided by the peers' own dispersion (1.4826 x MAD), floored at half the
   metric's typical dispersion (tracked slowly: the state) and at the metric's resolution, so a
   quiet moment or a quantised gauge cannot turn one step into many sigmas.

The result is the peer-standardised residual (NaN where it is undefined), which the baseline
unit then compares with what that series usually shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.numeric import nanmedian_axis
from trainguard.detect.signals.common import ew_typical, pad_to, regrow
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["PeerConfig", "PeerDeviation", "or_quantum"]


@dataclass(frozen=True, slots=True)
class PeerConfig:
    """The slice of `DetectorConfig` peer deviation reads."""

    min_gpus: int
    min_peers: int

    @classmethod
    def of(cls, cfg: DetectorConfig) -> PeerConfig:
        return cls(cfg.min_gpus, cfg.min_peers)


@dataclass(eq=False)
class PeerDeviation:
    """Per metric, the typical dispersion between peers (GPU level, then node level)."""

    cfg: PeerConfig
    tdisp1: FloatArray
    """Per GPU metric: typical dispersion of a GPU's residual against its siblings."""
    tdisp2: FloatArray
    """Per metric (GPU metrics first): typical dispersion within a peer group."""

    @classmethod
    def new(cls, cfg: PeerConfig) -> PeerDeviation:
        return cls(cfg, np.zeros(0), np.zeros(0))

    def grow(self, mg: int, m: int) -> None:
        """`mg` GPU metrics of `m` metrics in all (node metrics follow the GPU metrics)."""
        old_mg = self.tdisp1.shape[0]
        if self.tdisp2.shape[0] != m or old_mg != mg:
            self.tdisp2 = regrow(self.tdisp2, old_mg, mg, m)
        self.tdisp1 = pad_to(self.tdisp1, mg)

    def reset_metric(self, i: int) -> None:
        """Learn metric `i` (GPU metrics first) afresh."""
        if i < self.tdisp1.shape[0]:
            self.tdisp1[i] = 0.0
        self.tdisp2[i] = 0.0

    def step(self, x: FloatArray, xn: FloatArray, labels: IntArray, unit_floor: FloatArray
             ) -> tuple[FloatArray, FloatArray]:
        """(zp1[metric, node, gpu], zp2[metric, node]) for block means `x[gpu metric, node,
        gpu]` and `xn[node metric, node]`; `labels` peer group per node; `unit_floor` per
        metric: its resolution (0: unknown)."""
        cfg = self.cfg
        mg = x.shape[0]
        med, cnt = nanmedian_axis(x, axis=2)
        r1 = x - med[..., None]
        mad1, _ = nanmedian_axis(np.abs(r1), axis=2)
        self.tdisp1 = ew_typical(self.tdisp1, 1.4826 * mad1)
        per_gpu = r1.reshape(mg, int(np.prod(r1.shape[1:])))
        scale1 = np.maximum(np.maximum(1.4826 * mad1, 0.5 * self.tdisp1[:, None]),
                            or_quantum(unit_floor[:mg], per_gpu)[:, None])
        scale1 = np.maximum(scale1, 1e-12)  # a never-changing metric: no zero scale
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            zp1 = np.where((cnt >= cfg.min_gpus)[..., None], r1 / scale1[..., None], np.nan)
        agg = np.concatenate([med, xn], axis=0)
        zp2 = np.full_like(agg, np.nan)
        disp2 = np.full_like(agg, np.nan)
        for lab in np.unique(labels[labels >= 0]).tolist():
            idx = np.flatnonzero(labels == lab)
            if idx.size < cfg.min_peers:
                continue
            sub = agg[:, idx]
            gmed, gcnt = nanmedian_axis(sub, axis=1)
            dev = sub - gmed[:, None]
            gmad, _ = nanmedian_axis(np.abs(dev), axis=1)
            disp2[:, idx] = 1.4826 * gmad[:, None]
            ok = (gcnt >= cfg.min_peers)[:, None]
            zp2[:, idx] = np.where(ok, dev, np.nan)
        self.tdisp2 = ew_typical(self.tdisp2, disp2)
        scale2 = np.maximum(np.maximum(np.nan_to_num(disp2), 0.5 * self.tdisp2[:, None]),
                            np.maximum(or_quantum(unit_floor, zp2)[:, None], 1e-12))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            zp2 = zp2 / scale2
        zp1 = np.where(np.isfinite(zp1), zp1, np.nan)
        zp2 = np.where(np.isfinite(zp2), zp2, np.nan)
        return zp1, zp2


def or_quantum(unit: FloatArray, dev: FloatArray) -> FloatArray:
    """Each metric's resolution: its unit (typical change over time) where one was seen, else
    the smallest non-zero deviation between series in this block (`dev`: metric x series).

    A gauge that never changed in time (a count of remapped rows) has no unit; without this
    floor, one GPU or node a single step away from identical peers (MAD 0) scores 1e12 sigma.
    One quantisation step is never a deviation by itself.

        >>> or_quantum(np.array([0.5, 0.0]), np.array([[0.0, 2.0], [0.0, 3.0]])).tolist()
        [0.5, 3.0]
    """
    mag = np.abs(dev)
    mag = np.where(np.isfinite(mag) & (mag > 0), mag, np.inf)
    quantum = mag.min(axis=1) if mag.shape[1] else np.full(mag.shape[0], np.inf)
    quantum = np.where(np.isfinite(quantum), quantum, 0.0)
    return np.asarray(np.where(unit > 0, unit, quantum), dtype=np.float64)
