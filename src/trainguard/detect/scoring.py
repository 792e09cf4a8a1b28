"""Per-block scoring: peer residuals -> learned baselines -> calibrated node scores.

One block, in order:
1. hard evidence of the block goes to the episode tracker first (it quiets predictive alerts);
2. activity -> busy/idle per node -> peer groups (`groups.py`);
3. residuals: r1 = GPU minus the median of its node's GPUs; r2 = node value (median of its GPUs,
   or the node metric) minus the median of its peer group;
4. z = residual against the series' own learned level and spread (`baseline.py`);
5. per-metric calibration: |z| is divided by the metric's typical cross-sectional tail, so a
   metric that is heavy-tailed everywhere cannot page on its own;
6. node score = strongest metric + half the second strongest (two metrics agreeing count more);
7. learn from this block (clipped), then hand the scores to the episode tracker.
"""

from __future__ import annotations

import warnings

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.baseline import Baseline
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import LEAD_ACTIVITY, LEAD_COUNTER, LEAD_GAUGE, EpisodeTracker
from trainguard.detect.groups import infer_groups
from trainguard.detect.hard import BoolArray, HardHit
from trainguard.detect.knowledge import ACTIVITY_FIELDS
from trainguard.detect.layout import Layout
from trainguard.detect.numeric import block_means, nanmedian_axis
from trainguard.detect.sparse import SparseCounters, step_rows
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["BlockScorer"]

CAL_REF = 2.5
"""Cross-sectional 99th percentile of |z| for a well-behaved metric (about Gaussian)."""
U_CAP = 50.0
RARE_EVENT_FRACTION = 0.05
"""A counter is error-like when at most this fraction of its series has events in a block."""
SELF_FLOOR = 0.5
"""Smallest spread of a peer-standardised residual: half the peers' own dispersion."""
HARD_SCORE = 100.0


class BlockScorer:
    """Mutable scoring state across blocks (baselines, calibration, activity history)."""

    def __init__(self, cfg: DetectorConfig, layout: Layout) -> None:
        self.cfg = cfg
        self.layout = layout
        self.base1 = Baseline.empty((0, 0, 0))
        self.base2 = Baseline.empty((0, 0))
        self.cal1 = np.zeros(0)
        self.cal2 = np.zeros(0)
        self.tdisp1 = np.zeros(0)
        self.busy_frac = np.zeros(0)
        self.tdisp2 = np.zeros(0)
        self.settle_until = np.zeros(0)
        self.prev_busy = np.zeros(0, dtype=bool)
        self.sparse1 = SparseCounters()
        self.sparse2 = SparseCounters()
        self.level = np.nan
        self.history = np.zeros((0, cfg.peer_window_blocks))
        self.members = np.zeros((0, 0), dtype=bool)
        self.relearn_until = np.zeros(0)
        self.last_seen_gpu = np.zeros((0, 0))
        self.last_seen_node = np.zeros(0)
        self.blocks = 0

    def _grow(self) -> None:
        mg, mn, n, g = self.layout.shape
        m = mg + mn
        self.base1.grow((mg, n, g))
        if self.base2.mu.shape[1:] != (m, n):
            # node metrics are appended after GPU metrics: re-place rows when either list grows
            old_mg = self.cal1.shape[0]
            new = Baseline.empty((m, n))
            om, on = self.base2.mu.shape[1:]
            for src, dst in ((self.base2.mu, new.mu), (self.base2.spread, new.spread),
                             (self.base2.n, new.n)):
                dst[:, :old_mg, :on] = src[:, :old_mg]
                dst[:, mg:mg + om - old_mg, :on] = src[:, old_mg:]
            self.base2 = new
            self.cal2 = _regrow(self.cal2, old_mg, mg, m)
            self.tdisp2 = _regrow(self.tdisp2, old_mg, mg, m)
        self.cal1 = np.pad(self.cal1, (0, mg - self.cal1.shape[0]))
        if self.busy_frac.shape[0] != m:
            self.busy_frac = np.full(m, np.nan)  # re-learnt quickly when metrics appear
        self.tdisp1 = np.pad(self.tdisp1, (0, mg - self.tdisp1.shape[0]))
        self.sparse1.grow((mg, n, g))
        self.sparse2.grow((mn, n))
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

    def reset_metrics(self, idx: list[int]) -> None:
        """Learn metrics `idx` (GPU metrics first, then node metrics) afresh: their values
        changed meaning (a series found to be cumulative is scored by its rate from then on)."""
        self._grow()
        mg = self.cal1.shape[0]
        for i in idx:
            if i < mg:
                row1 = np.zeros(self.base1.mu.shape[1:], dtype=bool)
                row1[i] = True
                self.base1.forget(row1)
                self.cal1[i] = self.tdisp1[i] = 0.0
                self.sparse1.reset_row(i)
            else:
                self.sparse2.reset_row(i - mg)
            row2 = np.zeros(self.base2.mu.shape[1:], dtype=bool)
            row2[i] = True
            self.base2.forget(row2)
            self.cal2[i] = self.tdisp2[i] = 0.0
            self.busy_frac[i] = np.nan

    def run(self, times: IntArray, gpu: FloatArray, node: FloatArray, present: np.ndarray,
            hits: list[HardHit], tracker: EpisodeTracker, soft: FloatArray, weights: FloatArray,
            act: int | None, jobs: list[list[str]] | None, s: int, unit_floor: FloatArray,
            cumulative: BoolArray) -> None:
        """Score the complete blocks of `s` samples in `times` (len(times) % s == 0)."""
        self._grow()
        lay = self.layout
        nb = times.size // s
        bg = block_means(gpu, s)
        bn = block_means(node, s)
        pb = np.asarray(present.reshape(*present.shape[:-1], nb, s).any(axis=-1), dtype=bool)
        by_block: dict[int, list[HardHit]] = {}
        for h in hits:
            by_block.setdefault(h.t_index // s, []).append(h)
        for b in range(nb):
            t_end = float(times[b * s + s - 1])
            for h in by_block.get(b, []):
                label = lay.gpu_label(h.node, h.gpu) if h.gpu is not None else None
                tracker.hard_event(h.node, float(times[h.t_index]),
                                   Signal(h.metric, label, h.value, h.detail), HARD_SCORE)
            self._block(t_end, bg[..., b], bn[..., b], pb[..., b], tracker, soft, weights, act,
                        jobs[b] if jobs else None, unit_floor[:, b], cumulative)
            tracker.expire_hard(t_end)

    def _block(self, t: float, x: FloatArray, xn: FloatArray, pres: np.ndarray,
               tracker: EpisodeTracker, soft: FloatArray, weights: FloatArray, act: int | None,
               jobs: list[str] | None, unit_floor: FloatArray, cumulative: BoolArray) -> None:
        cfg = self.cfg
        mg = x.shape[0]
        self.blocks += 1
        # Series back after a long absence (reboot, repair, replaced GPU): learn them afresh.
        node_pres: BoolArray = np.asarray(pres.any(axis=1) | (~np.isnan(xn)).any(axis=0))
        back_gpu = pres & (self.last_seen_gpu > 0) & (t - self.last_seen_gpu > cfg.gone_reset_s)
        back_node = node_pres & (self.last_seen_node > 0) & (
            t - self.last_seen_node > cfg.gone_reset_s)
        if back_gpu.any():
            self.base1.forget(np.broadcast_to(back_gpu, self.base1.mu.shape[1:]))
        if back_node.any():
            self.base2.forget(np.broadcast_to(back_node, self.base2.mu.shape[1:]))
        self.last_seen_gpu[pres] = t
        self.last_seen_node[node_pres] = t

        # Activity, busy/idle, peer groups.
        if act is not None:
            a, _ = nanmedian_axis(x[act], axis=1)
        else:
            a = np.where(node_pres, 1.0, np.nan)
        finite = a[np.isfinite(a)]
        if finite.size:
            p90 = float(np.percentile(finite, 90))
            self.level = p90 if np.isnan(self.level) else 0.98 * self.level + 0.02 * p90
        level = self.level if np.isfinite(self.level) and self.level > 0 else 1.0
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
        relearn = self.relearn_until > t

        settle = self.settle_until > t

        # Residuals against peers, in units of the peers' own dispersion (robust z).
        med, cnt = nanmedian_axis(x, axis=2)
        r1 = x - med[..., None]
        mad1, _ = nanmedian_axis(np.abs(r1), axis=2)
        self.tdisp1 = _ew_typical(self.tdisp1, 1.4826 * mad1)
        per_gpu = r1.reshape(mg, int(np.prod(r1.shape[1:])))
        scale1 = np.maximum(np.maximum(1.4826 * mad1, 0.5 * self.tdisp1[:, None]),
                            _or_quantum(unit_floor[:mg], per_gpu)[:, None])
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
        self.tdisp2 = _ew_typical(self.tdisp2, disp2)
        scale2 = np.maximum(np.maximum(np.nan_to_num(disp2), 0.5 * self.tdisp2[:, None]),
                            np.maximum(_or_quantum(unit_floor, zp2)[:, None], 1e-12))
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            zp2 = zp2 / scale2
        zp1 = np.where(np.isfinite(zp1), zp1, np.nan)
        zp2 = np.where(np.isfinite(zp2), zp2, np.nan)

        warm_n = cfg.warmup_s / cfg.block_s
        alpha = 1.0 - 0.5 ** (cfg.block_s / cfg.halflife_s)
        floor = np.full(1, SELF_FLOOR)
        z1 = self.base1.score_update(zp1, busy[None, :, None], floor, warm_n, alpha,
                                     cfg.adapt_clip)
        z2 = self.base2.score_update(zp2, busy[None, :], floor, warm_n, alpha, cfg.adapt_clip,
                                     fast=np.broadcast_to(relearn[None, :], zp2.shape))
        z2[:, relearn] = np.nan

        # Sparse counters (errors that are normally zero): recurrence, not level, is evidence.
        # Only counters (cumulative metrics) are looked at; for the others it is all NaN.
        cum_g, cum_n = np.flatnonzero(cumulative[:mg]), np.flatnonzero(cumulative[mg:])
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            k1 = x[cum_g] / np.maximum(unit_floor[:mg][cum_g], 1e-300)[:, None, None]
            k2 = xn[cum_n] / np.maximum(unit_floor[mg:][cum_n], 1e-300)[:, None]

        # Only error-like counters (events in few series at any time) take the sparse path;
        # byte and time counters that are merely quiet on an idle node do not.
        f1 = np.full(mg, np.nan)
        f2 = np.full(xn.shape[0], np.nan)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if cum_g.size and k1[0].size:
                f1[cum_g] = np.nanmean(_rows(np.where(np.isnan(k1), np.nan, k1 > 0.5)), axis=1)
            if cum_n.size and k2.shape[1]:
                f2[cum_n] = np.nanmean(np.where(np.isnan(k2), np.nan, k2 > 0.5), axis=1)
        self.busy_frac = _ew_frac(self.busy_frac, np.concatenate([f1, f2]))
        rare = self.busy_frac <= RARE_EVENT_FRACTION
        zs1, sp1 = step_rows(self.sparse1, cum_g, k1, alpha, warm_n)
        zs2, sp2 = step_rows(self.sparse2, cum_n, k2, alpha, warm_n)
        sp1 = sp1 & rare[:mg][cum_g, None, None]
        sp2 = sp2 & rare[mg:][cum_n, None]
        z1[cum_g] = np.where(sp1, zs1, z1[cum_g])
        z2[mg + cum_n] = np.where(sp2, zs2, z2[mg + cum_n])
        sparse_any = np.zeros(z2.shape, dtype=bool)  # (metric, node): a sparse series led
        sparse_any[cum_g] = sp1.any(axis=2)
        sparse_any[mg + cum_n] = sp2
        z1[:, settle, :] = np.nan
        z2[:, settle] = np.nan

        # Calibrate, weight, fuse.
        a1 = _rows(np.abs(z1))
        a2 = np.abs(z2)
        q = cfg.calib_quantile
        self.cal1 = _calibrate(self.cal1, a1, q)
        self.cal2 = _calibrate(self.cal2, a2, q)
        w = soft * weights
        u1 = np.minimum(np.abs(z1) * (CAL_REF / np.maximum(CAL_REF, self.cal1))[:, None, None]
                        * w[:mg, None, None], U_CAP)
        u2 = np.minimum(a2 * (CAL_REF / np.maximum(CAL_REF, self.cal2))[:, None] * w[:, None],
                        U_CAP)
        u1 = np.nan_to_num(u1, nan=0.0)
        u2 = np.nan_to_num(u2, nan=0.0)
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
        score = _fuse(per_metric, mg)
        quiet = tracker.quiet(t)
        wanted = np.flatnonzero(score >= cfg.score_on)
        signals = {int(i): self._signals(int(i), per_metric[:, i], s1[:, i], u2[:, i],
                                         gpu_best[:, i], z1, z2)
                   for i in wanted.tolist()}
        # Recurring error counts, and a GPU whose activity departs from its siblings', are
        # evidence sooner than a gauge excursion (thermal spikes and job-shaped wobbles last
        # minutes; precursors recur): tell the tracker what leads each node's score.
        top_metric = per_metric.argmax(axis=0) if per_metric.size else np.zeros(0, np.intp)
        lead = np.full(score.shape[0], LEAD_GAUGE, dtype=np.int8)
        if per_metric.size:
            counter_led = np.take_along_axis(sparse_any, top_metric[None, :], axis=0)[0]
            activity_led = self._activity_rows(act, per_metric.shape[0])[top_metric]
            lead[activity_led] = LEAD_ACTIVITY
            lead[counter_led] = LEAD_COUNTER
        tracker.soft_block(t, score, signals, quiet, lead)

    def _activity_rows(self, act: int | None, m: int) -> BoolArray:
        """Per metric (GPU metrics first): is it a GPU activity field (utilisation, engine or
        SM activity; not power, which also follows temperature and clocks)."""
        names = self.layout.gpu_metrics
        rows = np.zeros(m, dtype=bool)
        for i, name in enumerate(names[:m]):
            rows[i] = i == act or name in ACTIVITY_FIELDS
        return rows

    def _signals(self, i: int, per_metric: FloatArray, s1: FloatArray, u2: FloatArray,
                 gpu_best: np.ndarray, z1: FloatArray, z2: FloatArray) -> tuple[Signal, ...]:
        lay = self.layout
        names = [*lay.gpu_metrics, *lay.node_metrics]
        mg = len(lay.gpu_metrics)
        order = np.argsort(-per_metric)[: self.cfg.top_signals]
        out = []
        for m in order.tolist():
            if per_metric[m] <= 0:
                break
            if m < mg and s1[m] >= u2[m]:
                gi = int(gpu_best[m])
                out.append(Signal(names[m], lay.gpu_label(i, gi), float(z1[m, i, gi])))
            else:
                out.append(Signal(names[m], None, float(z2[m, i])))
        return tuple(out)


def _calibrate(cal: FloatArray, a: FloatArray, quantile: float) -> FloatArray:
    """Track each metric's cross-sectional quantile of |z| (slowly, NaN-aware)."""
    if a.shape[1] == 0:
        return cal
    k = a.shape[1] - np.count_nonzero(np.isnan(a), axis=1)
    pos = np.clip(np.floor(quantile * (k - 1)).astype(np.intp), 0, a.shape[1] - 1)
    q = np.full(a.shape[0], np.nan)
    rows = np.flatnonzero(k >= 20)  # the others are not updated
    positions = np.unique(pos[rows])
    if positions.size > 8:
        q[rows] = np.take_along_axis(np.sort(a[rows], axis=1), pos[rows, None], axis=1)[:, 0]
    else:
        for p in positions.tolist():
            # Rows sharing a position (the same count of valid values): one partial sort puts
            # the same order statistic there as a full sort (NaN last in both).
            sel = rows[pos[rows] == p]
            q[sel] = np.partition(a[sel], p, axis=1)[:, p]
    ok = (k >= 20) & np.isfinite(q)
    upd = np.where(cal == 0, q, 0.99 * cal + 0.01 * q)
    return np.where(ok, upd, cal)


def _regrow(v: FloatArray, old_mg: int, mg: int, m: int) -> FloatArray:
    out = np.zeros(m)
    out[:old_mg] = v[:old_mg]
    out[mg:mg + v.shape[0] - old_mg] = v[old_mg:]
    return out


def _rows(x: FloatArray) -> FloatArray:
    """`x` as a 2-D (first axis, everything else) array. Not `reshape(m, -1)`: that is an error
    for an empty array, e.g. no GPU metrics at all (node-exporter-only telemetry)."""
    return x.reshape(x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64)))


def _ew_typical(cur: FloatArray, disp: FloatArray) -> FloatArray:
    """Slowly track each metric's typical (median over entities) positive dispersion."""
    flat = _rows(np.where(disp > 0, disp, np.nan))
    med, k = nanmedian_axis(flat, axis=1)
    upd = np.where(cur == 0, med, 0.98 * cur + 0.02 * med)
    return np.where(k > 0, upd, cur)


def _ew_frac(cur: FloatArray, f: FloatArray) -> FloatArray:
    upd = np.where(np.isnan(cur), f, np.where(np.isnan(f), cur, 0.98 * cur + 0.02 * f))
    return np.asarray(upd, dtype=np.float64)


def _fuse(per_metric: FloatArray, mg: int) -> FloatArray:
    """Node score: the strongest metric plus half the second strongest.

    When the cluster has GPU metrics, a host-level metric (load, CPU, filesystem) may only be
    the supporting second signal: a host that is merely busier than its peers is not a GPU
    about to fail, and host counters swing with the job.
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


def _or_quantum(unit: FloatArray, dev: FloatArray) -> FloatArray:
    """Each metric's resolution: its unit (typical change over time) where one was seen, else
    the smallest non-zero deviation between series in this block (`dev`: metric x series).

    A gauge that never changed in time (a count of remapped rows) has no unit; without this
    floor, one GPU or node a single step away from identical peers (MAD 0) scores 1e12 sigma.
    One quantisation step is never a deviation by itself.

        >>> _or_quantum(np.array([0.5, 0.0]), np.array([[0.0, 2.0], [0.0, 3.0]])).tolist()
        [0.5, 3.0]
    """
    mag = np.abs(dev)
    mag = np.where(np.isfinite(mag) & (mag > 0), mag, np.inf)
    quantum = mag.min(axis=1) if mag.shape[1] else np.full(mag.shape[0], np.inf)
    quantum = np.where(np.isfinite(quantum), quantum, 0.0)
    return np.asarray(np.where(unit > 0, unit, quantum), dtype=np.float64)
