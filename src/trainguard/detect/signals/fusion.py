"""Fusion: the signal units' deviations -> one calibrated score per node, and what leads it.

1. per-metric calibration: |z| is divided by the metric's typical cross-sectional tail
   (`calib_quantile`, tracked slowly: the state), so a metric that is heavy-tailed everywhere
   cannot page on its own; then weighted (known precursors more, workload-shaped and host
   metrics less, hard-evidence metrics not at all) and capped;
2. per metric and node, the stronger of the node-level deviation and the node's worst GPU;
3. a metric deviating on several nodes at once is the workload, not a failing node: muted;
4. a supporting-only metric (a cooling control) is capped at the node's strongest other metric;
5. node score = the best of its GPUs' scores, each the GPU's strongest metric + half its
   second strongest, the node-level deviations counting for every GPU of the node
   (`fuse_gpus`; `fuse` where there are no GPU metrics).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import LEAD_ACTIVITY, LEAD_COUNTER, LEAD_GAUGE
from trainguard.detect.hard import BoolArray
from trainguard.detect.layout import Layout
from trainguard.detect.signals.common import pad_to, regrow, rows
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["CAL_REF", "U_CAP", "Fused", "Fusion", "FusionConfig", "calibrate", "cap_supporting",
           "fold_families", "fuse", "fuse_gpus", "lead_of"]

CAL_REF = 2.5
"""Cross-sectional 99th percentile of |z| for a well-behaved metric (about Gaussian)."""
U_CAP = 50.0


@dataclass(frozen=True, slots=True)
class FusionConfig:
    """The slice of `DetectorConfig` fusion reads."""

    calib_quantile: float
    score_on: float
    crowd_min_nodes: int
    crowd_fraction: float
    top_signals: int

    @classmethod
    def of(cls, cfg: DetectorConfig) -> FusionConfig:
        return cls(cfg.calib_quantile, cfg.score_on, cfg.crowd_min_nodes, cfg.crowd_fraction,
                   cfg.top_signals)


@dataclass(frozen=True, eq=False)
class Fused:
    """One block's fused result (metric rows: GPU metrics first, then node metrics)."""

    score: FloatArray
    """Per node."""
    per_metric: FloatArray
    """[metric, node]: calibrated, weighted, capped, crowd-muted deviation."""
    s1: FloatArray
    """[GPU metric, node]: the node's worst GPU."""
    u2: FloatArray
    """[metric, node]: the node-level deviation."""
    gpu_best: IntArray
    """[GPU metric, node]: which GPU is the worst."""


@dataclass(eq=False)
class Fusion:
    """Per metric, the tracked cross-sectional tail of |z| (GPU level, then node level)."""

    cfg: FusionConfig
    cal1: FloatArray
    cal2: FloatArray

    @classmethod
    def new(cls, cfg: FusionConfig) -> Fusion:
        return cls(cfg, np.zeros(0), np.zeros(0))

    def grow(self, mg: int, m: int) -> None:
        old_mg = self.cal1.shape[0]
        if self.cal2.shape[0] != m or old_mg != mg:
            self.cal2 = regrow(self.cal2, old_mg, mg, m)
        self.cal1 = pad_to(self.cal1, mg)

    def reset_metric(self, i: int) -> None:
        """Calibrate metric `i` (GPU metrics first) afresh."""
        if i < self.cal1.shape[0]:
            self.cal1[i] = 0.0
        self.cal2[i] = 0.0

    def step(self, z1: FloatArray, z2: FloatArray, soft: FloatArray, weights: FloatArray,
             node_pres: BoolArray, supporting: BoolArray | None = None,
             families: tuple[IntArray, ...] = ()) -> Fused:
        """Fuse `z1[gpu metric, node, gpu]` and `z2[metric, node]` (NaN: no evidence) with the
        per-metric `soft` (0 for hard-evidence metrics) and `weights`; a `supporting` metric
        (per metric) never scores above the node's strongest other metric: it can be the
        second signal, never the only one. `families` (GPU metric rows, `fold_families`):
        fields that report the same events count once on a GPU."""
        cfg = self.cfg
        mg = z1.shape[0]
        a1 = np.abs(z1)
        a2 = np.abs(z2)
        self.cal1 = calibrate(self.cal1, rows(a1), cfg.calib_quantile)
        self.cal2 = calibrate(self.cal2, a2, cfg.calib_quantile)
        w = soft * weights
        u1 = np.minimum(a1 * (CAL_REF / np.maximum(CAL_REF, self.cal1))[:, None, None]
                        * w[:mg, None, None], U_CAP)
        u2 = np.minimum(a2 * (CAL_REF / np.maximum(CAL_REF, self.cal2))[:, None] * w[:, None],
                        U_CAP)
        u1 = np.nan_to_num(u1, copy=False, nan=0.0)  # fresh arrays: no copy needed
        u2 = np.nan_to_num(u2, copy=False, nan=0.0)
        gpu_best = u1.argmax(axis=2) if u1.shape[2] else np.zeros(u1.shape[:2], dtype=np.intp)
        s1 = np.take_along_axis(u1, gpu_best[..., None], axis=2)[..., 0] if u1.size else \
            np.zeros(u1.shape[:2])
        per_metric = u2.copy()
        per_metric[:mg] = np.maximum(per_metric[:mg], s1)
        # A metric that deviates on several nodes at once is the workload (a job's checkpoint,
        # a data-loader stall, a shared filesystem), not a failing node: mute it this block.
        n_up = np.count_nonzero(node_pres)
        crowd = max(cfg.crowd_min_nodes, cfg.crowd_fraction * n_up)
        crowded = np.count_nonzero(per_metric >= 0.5 * cfg.score_on, axis=1) >= crowd
        per_metric[crowded] = 0.0
        cap_supporting(per_metric, supporting)
        if u1.size == 0 or mg == 0:
            score = fuse(per_metric, mg)
        else:
            u1[crowded[:mg]] = 0.0
            v = np.maximum(u1, np.where(crowded[:mg, None], 0.0, u2[:mg])[:, :, None])
            host = (per_metric[mg:].max(axis=0) if per_metric.shape[0] > mg
                    else np.zeros(per_metric.shape[1]))
            fold_families(v, families)  # v is this block's own array
            score = fuse_gpus(v, host, supporting[:mg] if supporting is not None else None)
        return Fused(score, per_metric, s1, u2, gpu_best)

    def signals(self, i: int, f: Fused, z1: FloatArray, z2: FloatArray, names: list[str],
                lay: Layout) -> tuple[Signal, ...]:
        """Node `i`'s strongest metrics (at most `top_signals`), each at the GPU that leads it
        or at node level; `names` all metric names (GPU metrics first)."""
        mg = z1.shape[0]
        per_metric = f.per_metric[:, i]
        order = np.argsort(-per_metric)[: self.cfg.top_signals]
        out = []
        for m in order.tolist():
            if per_metric[m] <= 0:
                break
            if m < mg and f.s1[m, i] >= f.u2[m, i]:
                gi = int(f.gpu_best[m, i])
                out.append(Signal(names[m], lay.gpu_label(i, gi), float(z1[m, i, gi])))
            else:
                out.append(Signal(names[m], None, float(z2[m, i])))
        return tuple(out)


def lead_of(per_metric: FloatArray, counter_rows: BoolArray, activity_rows: BoolArray
            ) -> np.ndarray:
    """Per node, what leads its score: `LEAD_COUNTER` when its top metric is a sparse counter
    that scored there (`counter_rows[metric, node]`), `LEAD_ACTIVITY` when it is an activity
    field (`activity_rows[metric]`), else `LEAD_GAUGE`."""
    lead = np.full(per_metric.shape[1], LEAD_GAUGE, dtype=np.int8)
    if per_metric.size:
        top_metric = per_metric.argmax(axis=0)
        counter_led = np.take_along_axis(counter_rows, top_metric[None, :], axis=0)[0]
        lead[activity_rows[top_metric]] = LEAD_ACTIVITY
        lead[counter_led] = LEAD_COUNTER
    return lead


def cap_supporting(a: FloatArray, supporting: BoolArray | None) -> None:
    """Cap (in place) each `supporting` row of `a[metric, ...]` at the strongest other row
    there: such a metric can be the second signal, never the only one. Nothing to cap when no
    row, or every row, is supporting.

        >>> a = np.array([[9.0, 1.0], [2.0, 3.0]]); cap_supporting(a, np.array([True, False]))
        >>> a.tolist()
        [[2.0, 1.0], [2.0, 3.0]]
    """
    if supporting is None or not supporting.any() or supporting.all():
        return
    others = a[~supporting].max(axis=0)
    a[supporting] = np.minimum(a[supporting], others)


def fuse_gpus(v: FloatArray, host: FloatArray, supporting: BoolArray | None) -> FloatArray:
    """Node score when GPU metrics exist: the best of its GPUs' scores, each the GPU's
    strongest metric plus half its second strongest (or the node's strongest host metric).
    `v[gpu metric, node, gpu]` holds each GPU's deviation or, where stronger, its node's.

    Corroboration comes from the same GPU (or its node as a whole): a replay burst on one GPU
    and a power wobble on another are two unrelated small things, not one failing GPU. A
    `supporting` metric is capped, per GPU, at that GPU's strongest other metric.

        >>> v = np.array([[[4.0, 0.0]], [[0.0, 4.0]]])   # two metrics, one node, two GPUs
        >>> fuse_gpus(v, np.zeros(1), None).tolist()     # the old per-node sum would be 6.0
        [4.0]
    """
    if supporting is not None:
        v = v.copy()
        cap_supporting(v, supporting)
    mg = v.shape[0]
    if mg >= 2:
        part = np.partition(v, mg - 2, axis=0)
        top, second = part[-1], np.maximum(part[-2], host[:, None])
    else:
        top, second = v[0], np.broadcast_to(host[:, None], v.shape[1:])
    return np.asarray((top + 0.5 * second).max(axis=1), dtype=np.float64)


def fold_families(v: FloatArray, families: tuple[IntArray, ...]) -> None:
    """In place: each family's first row of `v[metric, ...]` becomes the maximum of the
    family's rows, and its other rows 0, so that one event reported by several fields (a
    link's CRC errors and the replays they cause) cannot corroborate itself. `families`: the
    row indices of each family of two or more rows, its first row first.

        >>> v = np.array([[[4.0]], [[4.0]], [[2.0]]])    # CRC, replays, temperature: one GPU
        >>> fold_families(v, (np.array([0, 1]),)); v[:, 0, 0].tolist()
        [4.0, 0.0, 2.0]
        >>> fuse_gpus(v, np.zeros(1), None).tolist()      # 6.0 with the echo counted
        [5.0]
    """
    for members in families:
        v[members[0]] = v[members].max(axis=0)
        v[members[1:]] = 0.0


def calibrate(cal: FloatArray, a: FloatArray, quantile: float) -> FloatArray:
    """Track each metric's cross-sectional quantile of |z| (slowly, NaN-aware)."""
    if a.shape[1] == 0:
        return cal
    k = a.shape[1] - np.count_nonzero(np.isnan(a), axis=1)
    pos = np.clip(np.floor(quantile * (k - 1)).astype(np.intp), 0, a.shape[1] - 1)
    q = np.full(a.shape[0], np.nan)
    sel_rows = np.flatnonzero(k >= 20)  # the others are not updated
    positions = np.unique(pos[sel_rows])
    if positions.size > 8:
        q[sel_rows] = np.take_along_axis(np.sort(a[sel_rows], axis=1), pos[sel_rows, None],
                                         axis=1)[:, 0]
    else:
        for p in positions.tolist():
            # Rows sharing a position (the same count of valid values): one partial sort puts
            # the same order statistic there as a full sort (NaN last in both).
            sel = sel_rows[pos[sel_rows] == p]
            q[sel] = np.partition(a[sel], p, axis=1)[:, p]
    ok = (k >= 20) & np.isfinite(q)
    upd = np.where(cal == 0, q, 0.99 * cal + 0.01 * q)
    return np.where(ok, upd, cal)


def fuse(per_metric: FloatArray, mg: int) -> FloatArray:
    """Node score: the strongest metric plus half the second strongest.

    When the cluster has GPU metrics, a host-level metric (load, CPU, filesystem) may only be
    the supporting second signal: a host that is merely busier than its peers is not a GPU
    about to fail, and host counters swing with the job.

        >>> fuse(np.array([[4.0, 0.0], [2.0, 1.0], [9.0, 9.0]]), 2).tolist()
        [8.5, 5.5]
    """
    n = per_metric.shape[1]
    if per_metric.shape[0] == 0:
        return np.zeros(n)
    if mg == 0 or mg == per_metric.shape[0]:
        top = np.sort(per_metric, axis=0)
        second_all = top[-2] if per_metric.shape[0] >= 2 else np.zeros(n)
        return np.asarray(top[-1] + 0.5 * second_all, dtype=np.float64)
    gpu = np.sort(per_metric[:mg], axis=0)
    host = per_metric[mg:].max(axis=0)
    second = np.maximum(gpu[-2], host) if mg >= 2 else host
    return np.asarray(gpu[-1] + 0.5 * second, dtype=np.float64)
