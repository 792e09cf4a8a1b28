"""The multi-signal node failure detector.

It combines, per scoring block (default 2 min):

1. peer comparison: each GPU against its node's other GPUs, each node against the nodes that run
   the same job right now (groups inferred from activity, idle nodes together);
2. each series' own history: the residual's learned level and spread per activity state, so a
   node that is always different is not flagged forever, with drift and counter rates scored
   against that baseline;
3. hard evidence: hardware XIDs, uncorrectable-error counters, a GPU that stops reporting while
   its siblings continue.

Deviations are calibrated per metric (a metric that is heavy-tailed across the whole cluster is
discounted), fused into one node score (strongest metric plus half the second), and turned into
alert episodes with persistence and cool-down (`episodes.py`). It works on whatever metrics are
present; `knowledge.py` only adds a bonus for known precursors.

    >>> det = Detector(DetectorConfig())          # doctest: +SKIP
    >>> for chunk in telemetry.chunks(7200):       # doctest: +SKIP
    ...     det.feed(chunk)
    >>> alerts = det.finish()                      # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trainguard.detect.alerts import AlertEpisode
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import EpisodeTracker
from trainguard.detect.hard import BoolArray
from trainguard.detect.knowledge import (
    ACTIVITY_METRICS,
    is_hard_counter,
    is_known_precursor,
    is_workload_shaped,
    is_xid_metric,
)
from trainguard.detect.layout import DenseChunk, Layout
from trainguard.detect.memory import check_detector_memory
from trainguard.detect.numeric import (
    block_means,
    carried,
    last_valid,
    nanmedian_axis,
    previous_valid_and_time,
)
from trainguard.detect.precursors import PrecursorRules
from trainguard.detect.scoring import BlockScorer
from trainguard.detect.signals.hard_evidence import HardEvidence, repairs
from trainguard.detect.throttle import board_share, is_reasons
from trainguard.detect.verdicts import VERDICT_EVERY_S, CumulativeVerdicts
from trainguard.errors import TelemetryError
from trainguard.telemetry.frame import FloatArray, Telemetry

__all__ = ["Detector", "detect", "run_detector"]


log = logging.getLogger(__name__)


class Detector:
    """Streaming detector: `feed` time-ordered chunks, then `finish` for the episodes."""

    def __init__(self, cfg: DetectorConfig | None = None,
                 cumulative: frozenset[str] = frozenset()) -> None:
        """`cumulative`: metric names always scored by their rate; every other metric is
        cumulative when its name and its behaviour so far say so (`cumulative_verdict`),
        decided causally, never from the whole input in hindsight: the live service and a
        batch run over the same samples score alike."""
        self.cfg = cfg or DetectorConfig()
        self.layout = Layout()
        self.tracker = EpisodeTracker(self.cfg, self.layout.nodes)
        self.scorer = BlockScorer(self.cfg, self.layout)
        self.precursors = PrecursorRules(self.cfg)
        self.hard = HardEvidence()
        self.step_s = 0
        self.steps_per_block = 1
        self._next_t: int | None = None
        self._pending: DenseChunk | None = None
        self._carry: dict[str, FloatArray] = {}
        self.samples = 0
        self._steps: dict[str, FloatArray] = {}
        self._flags_cache: tuple[tuple[int, int, int], _MetricFlags] | None = None
        self.verdicts = CumulativeVerdicts(cumulative)

    # --- input ---------------------------------------------------------------------------------

    def feed(self, tel: Telemetry) -> None:
        """Add the next chunk (must continue the previous one in time, same step)."""
        if tel.times.size == 0:
            return
        if self.step_s == 0:
            self.step_s = tel.step_s
            self.steps_per_block = max(1, round(self.cfg.block_s / tel.step_s))
            period = self.steps_per_block * tel.step_s
            self._next_t = int(tel.times[0]) // period * period
        elif tel.step_s != self.step_s:
            raise TelemetryError(f"chunk step {tel.step_s}s differs from {self.step_s}s")
        dense, n_samples = self.layout.densify_counted(tel)
        self.samples += n_samples
        dense = self._align(dense)
        if self._pending is not None:
            dense = _concat(self._pending, dense, self.layout)
        s = self.steps_per_block
        nb = dense.times.shape[0] // s
        if nb:
            cut = nb * s
            self._process_aligned(DenseChunk(dense.times[:cut], dense.gpu[..., :cut],
                                             dense.node[..., :cut]), tel)
        rest = dense.times.shape[0] - nb * s
        self._pending = None if rest == 0 else DenseChunk(
            dense.times[-rest:], dense.gpu[..., -rest:], dense.node[..., -rest:])

    def finish(self) -> list[AlertEpisode]:
        """Score what is left (a partial last block is padded) and close every episode."""
        if self._pending is not None:
            p = self._pending
            s = self.steps_per_block
            pad = s - p.times.shape[0]
            times = np.concatenate(
                [p.times, p.times[-1] + self.step_s * np.arange(1, pad + 1, dtype=np.int64)])
            gpu = np.concatenate([p.gpu, np.full((*p.gpu.shape[:-1], pad), np.nan)], axis=-1)
            node = np.concatenate([p.node, np.full((*p.node.shape[:-1], pad), np.nan)], axis=-1)
            self._pending = None
            self._process_aligned(DenseChunk(times, gpu, node), None)
        return self.tracker.finish()

    def _align(self, dense: DenseChunk) -> DenseChunk:
        """Pad the chunk with missing samples so it starts exactly at the expected grid time."""
        assert self._next_t is not None  # set on the first feed
        t0 = int(dense.times[0])
        if (t0 - self._next_t) % self.step_s:
            raise TelemetryError("chunk is not on the same time grid as the previous one")
        gap = (t0 - self._next_t) // self.step_s
        if gap < 0:
            raise TelemetryError(
                f"chunk starts at {t0}, before the end of the previous one ({self._next_t})")
        self._next_t = int(dense.times[-1]) + self.step_s
        if gap == 0:
            return dense
        times = np.concatenate(
            [t0 - self.step_s * np.arange(gap, 0, -1, dtype=np.int64), dense.times])
        gpu = np.concatenate([np.full((*dense.gpu.shape[:-1], gap), np.nan), dense.gpu], axis=-1)
        node = np.concatenate([np.full((*dense.node.shape[:-1], gap), np.nan), dense.node],
                              axis=-1)
        return DenseChunk(times, gpu, node)

    # --- per chunk -----------------------------------------------------------------------------

    def _carry_for(self, key: str, shape: tuple[int, ...], fill: float) -> FloatArray:
        return carried(self._carry, key, shape, fill)

    def _process_aligned(self, d: DenseChunk, tel: Telemetry | None) -> None:
        """Score whole blocks, cut at multiples of the verdict period: at each, which metrics
        are cumulative is decided again from what came before (`VERDICT_EVERY_S`)."""
        period = self.steps_per_block * self.step_s
        every = period * max(1, round(VERDICT_EVERY_S / period))
        t = d.times
        cuts = np.flatnonzero(t % every == 0).tolist()
        bounds = sorted({0, *cuts, int(t.size)})
        for a, b in itertools.pairwise(bounds):
            piece = DenseChunk(t[a:b], d.gpu[..., a:b], d.node[..., a:b])
            if not self.verdicts.decided_once or int(t[a]) % every == 0:
                self._decide()
            self._process(piece, tel)
            self.verdicts.observe(piece, self.layout)

    def _decide(self) -> None:
        """Re-decide which metrics are cumulative; a metric that changes side is learned
        afresh (its values changed meaning)."""
        lay = self.layout
        names = [*lay.gpu_metrics, *lay.node_metrics]
        flipped = self.verdicts.decide(names)
        if not flipped:
            return
        log.debug("detector: cumulative verdict changed for %s", [names[i] for i in flipped])
        self.scorer.reset_metrics(flipped)
        mg = len(lay.gpu_metrics)
        # The next rate of a flipped metric starts from its next sample, as for a new series.
        rows = {"unit": flipped, "rate_gpu": [i for i in flipped if i < mg],
                "rate_node": [i - mg for i in flipped if i >= mg]}
        for key in ("rate_gpu:v", "rate_gpu:t", "rate_node:v", "rate_node:t", "unit"):
            arr = self._carry.get(key)
            if arr is not None:
                for r in rows[key.split(":")[0]]:
                    if r < arr.shape[0]:
                        arr[r] = np.nan

    def _process(self, d: DenseChunk, tel: Telemetry | None) -> None:
        lay = self.layout
        mg, _mn, n, g = lay.shape
        present: BoolArray = (np.asarray(~np.isnan(d.gpu).all(axis=0)) if mg
                              else np.zeros((n, g, d.times.size), dtype=bool))
        # Hard evidence on raw values, before any transformation.
        hits = self.hard.scan(d, lay, present, self.step_s)
        warnings = [h for h in hits if not h.fatal]
        hits = [h for h in hits if h.fatal]

        flags = self._flags()
        mg_ = len(lay.gpu_metrics)
        s = self.steps_per_block
        bg = self._block_means(d.gpu, flags.cumulative[:mg_], "rate_gpu", d.times)
        for mi in flags.reasons:  # a bit mask: scored by what its bits say (throttle.py)
            bg[mi] = board_share(d.gpu[mi], s)
        bn = self._block_means(d.node, flags.cumulative[mg_:], "rate_node", d.times)
        jobs = _jobs_per_block(tel, lay.nodes, d.times, self.steps_per_block) if tel else None
        early, app_recent = self.precursors.scan(d, lay, flags.cumulative, s,
                                                 repairs(warnings, lay, s))
        self.scorer.run(d.times, bg, bn, present, hits, self.tracker,
                        flags.soft, flags.weights, flags.activity, jobs,
                        self.steps_per_block,
                        self._unit_blocks(d.gpu, d.node, d.times.size // self.steps_per_block),
                        flags.cumulative, early, app_recent, warnings)

    def _block_means(self, x: FloatArray, cumulative: BoolArray, key: str, times: np.ndarray
                     ) -> FloatArray:
        """What scoring reads of a chunk: its block means, the cumulative rows' taken of their
        rates (`_rates`; no copy of the whole chunk with the rates in it)."""
        s = self.steps_per_block
        out = block_means(x, s)
        rows, rates = self._rates(x, cumulative, key, times)
        if rates is not None:
            out[rows] = block_means(rates, s)
        return out

    def _rates(self, x: FloatArray, cumulative: BoolArray, key: str, times: np.ndarray
               ) -> tuple[list[int], FloatArray | None]:
        """Per-second rates of the cumulative rows of `x` (resets: the increase is the new
        value): (those rows, their rates, None when there is none)."""
        idx = np.flatnonzero(cumulative).tolist()
        self._steps.pop(key, None)
        if not idx:
            return idx, None
        sub = x[idx]
        vkey, tkey = f"{key}:v", f"{key}:t"
        cv = self._carry_for(vkey, (len(cumulative), *x.shape[1:-1]), np.nan)[idx]
        ct = self._carry_for(tkey, (len(cumulative), *x.shape[1:-1]), np.nan)[idx]
        prev_v, last_v, prev_t, last_t = previous_valid_and_time(
            sub, cv, times.astype(np.float64), ct)
        # In place where a value is not needed again: fewer chunk-sized temporaries.
        inc = sub - prev_v
        reset = sub >= prev_v
        np.logical_not(reset, out=reset)  # a decrease (or no previous value): the value itself
        np.copyto(inc, sub, where=reset)
        elapsed = np.subtract(times.astype(np.float64), prev_t, out=prev_t)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = inc / elapsed
        too_old = elapsed > self.cfg.gone_reset_s
        rate[too_old] = np.nan
        inc[too_old] = np.nan
        self._steps[key] = inc
        self._carry[vkey][idx] = last_v
        self._carry[tkey][idx] = last_t
        return idx, rate

    def _unit_blocks(self, raw_gpu: FloatArray, raw_node: FloatArray, nb: int) -> FloatArray:
        """Per metric and block: a counter's typical increment per block (as a rate) or a
        gauge's resolution (its typical non-zero change: 1 C, 1 %...). It floors every scale:
        one event per block, or one quantisation step, is never a deviation by itself.

        Estimated per block from a fixed sample of rows and smoothed block by block, so the
        result does not depend on how the input was chunked. Vectorised over metrics.
        """
        lay = self.layout
        names = [*lay.gpu_metrics, *lay.node_metrics]
        cum = self._flags().cumulative
        mg = len(lay.gpu_metrics)
        est = np.full((len(names), nb), np.nan)
        for part, raw, key, lo in (("gpu", raw_gpu, "rate_gpu", 0),
                                   ("node", raw_node, "rate_node", mg)):
            m = raw.shape[0]
            if m == 0:
                continue
            t = raw.shape[-1]
            rows = raw.reshape(m, -1, t)
            rows = rows[:, :: max(1, rows.shape[1] // 64)]
            prev = self._carry_for(f"res:{part}", rows.shape[:2], np.nan)
            steps = np.abs(np.diff(np.concatenate([prev[..., None], rows], axis=-1), axis=-1))
            self._carry[f"res:{part}"] = last_valid(rows, prev)
            cm = cum[lo:lo + m]
            inc = self._steps.get(key)
            if inc is not None and cm.any():
                inc_rows = inc.reshape(inc.shape[0], -1, t)
                steps[cm] = inc_rows[:, :: max(1, inc_rows.shape[1] // 64)][:, : steps.shape[1]]
            s = self.steps_per_block
            per_block = steps.reshape(m, steps.shape[1], nb, s).transpose(0, 2, 1, 3)
            blocks: FloatArray = per_block.reshape(m, nb, -1)
            blocks = np.where(np.isfinite(blocks) & (blocks > 0), blocks, np.nan)
            med, _ = nanmedian_axis(blocks, axis=2)
            est[lo:lo + m] = med
        cur = self._carry_for("unit", (len(names),), np.nan)
        out = np.empty((len(names), nb))
        for b in range(nb):
            e = est[:, b]
            cur = np.where(np.isnan(cur), e, np.where(np.isnan(e), cur, 0.95 * cur + 0.05 * e))
            out[:, b] = cur
        self._carry["unit"] = cur
        block_s = self.steps_per_block * self.step_s
        div = np.where(cum, float(block_s), 1.0)
        return np.asarray(np.nan_to_num(out, nan=0.0) / div[:, None], dtype=np.float64)

    def _flags(self) -> _MetricFlags:
        """Per-metric facts, recomputed only when metrics are added (names only ever grow, so
        their counts identify the layout) or a cumulative verdict changes."""
        lay = self.layout
        key = (len(lay.gpu_metrics), len(lay.node_metrics), self.verdicts.version)
        if self._flags_cache is not None and self._flags_cache[0] == key:
            return self._flags_cache[1]
        names = [*lay.gpu_metrics, *lay.node_metrics]
        w = self.cfg.known_precursor_weight
        wl = self.cfg.workload_metric_weight
        # Known precursors count more; job-shaped GPU fields and host-level metrics (network,
        # filesystem, CPU) less: they mostly tell which job a node runs, rarely that it fails.
        gpu_w = [w if is_known_precursor(m) else wl if is_workload_shaped(m) else 1.0
                 for m in lay.gpu_metrics]
        # Without any GPU series (node-exporter only) host metrics are all the evidence there
        # is: no discount, or nothing could ever page.
        host_w = self.cfg.host_metric_weight if lay.gpu_metrics else 1.0
        node_w = [w if is_known_precursor(m) else host_w for m in lay.node_metrics]
        flags = _MetricFlags(
            cumulative=np.array([self.verdicts.is_cumulative(m) for m in names], dtype=bool),
            # 0 for metrics handled as hard evidence only
            soft=np.array([0.0 if is_xid_metric(m) or is_hard_counter(m) else 1.0
                           for m in names]),
            weights=np.array([*gpu_w, *node_w]),
            activity=_activity_index(lay),
            reasons=tuple(mi for mi, m in enumerate(lay.gpu_metrics) if is_reasons(m)))
        self._flags_cache = (key, flags)
        return flags


@dataclass(frozen=True, eq=False)
class _MetricFlags:
    """Per metric, GPU metrics first then node metrics."""

    cumulative: BoolArray
    soft: FloatArray
    weights: FloatArray
    activity: int | None
    reasons: tuple[int, ...]
    """GPU clock-event reasons gauges (bit masks)."""


def _activity_index(lay: Layout) -> int | None:
    for name in ACTIVITY_METRICS:
        if name in lay.gpu_metrics:
            return lay.gpu_metrics.index(name)
    for i, name in enumerate(lay.gpu_metrics):
        if "UTIL" in name.upper() or "ACTIVE" in name.upper():
            return i
    return None


def _jobs_per_block(tel: Telemetry | None, nodes: list[str], times: np.ndarray, s: int
                    ) -> list[list[str]] | None:
    if tel is None or not tel.jobs:
        return None
    ends = times[s - 1::s]
    out: list[list[str]] = []
    for t in ends.tolist():
        i = int(np.searchsorted(tel.times, t))
        row = []
        for nd in nodes:
            j = tel.jobs.get(nd)
            row.append(j[i] if j is not None and i < len(j) else "")
        out.append(row)
    return out


def _concat(a: DenseChunk, b: DenseChunk, lay: Layout) -> DenseChunk:
    """Join a pending partial block with the next chunk (the layout may have grown)."""
    def fit(x: FloatArray, shape: tuple[int, ...]) -> FloatArray:
        if x.shape[:-1] == shape:
            return x
        out = np.full((*shape, x.shape[-1]), np.nan)
        out[tuple(slice(0, k) for k in x.shape)] = x
        return out
    return DenseChunk(np.concatenate([a.times, b.times]),
                      np.concatenate([fit(a.gpu, b.gpu.shape[:-1]), b.gpu], axis=-1),
                      np.concatenate([fit(a.node, b.node.shape[:-1]), b.node], axis=-1))


def detect(tel: Telemetry, cfg: DetectorConfig | None = None, *,
           progress: Callable[[int, int], None] | None = None) -> list[AlertEpisode]:
    """Run the detector over a whole `Telemetry` (batch mode) and return its alert episodes."""
    return run_detector(Detector(cfg), tel, progress=progress)


def run_detector(det: Detector, tel: Telemetry, *,
                 progress: Callable[[int, int], None] | None = None) -> list[AlertEpisode]:
    """Feed all of `tel` to `det` in the batch chunk size and return its episodes (`detect`,
    and `trainguard tune`'s recording run with its own tracker in `det`)."""
    chunk_s = det.cfg.block_s * 60
    check_detector_memory(tel, det.cfg, chunk_s)
    total = int(tel.times.size)
    done = 0
    for chunk in tel.chunks(chunk_s):
        det.feed(chunk)
        done += int(chunk.times.size)
        if progress is not None:
            progress(done, total)
    return det.finish()
