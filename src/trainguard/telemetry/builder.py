"""Collect whole per-series sample arrays from any source and align them on one time grid.

Every reader (OpenMetrics, Parquet, Prometheus) hands the builder one call per series with the
series' timestamps and values as arrays; `build()` does the rest with numpy only:

1. step: the given one, or the median spacing of samples within series rounded to whole seconds;
2. grid: epoch-aligned multiples of the step (`t % step == 0`), from the grid point of the first
   sample to that of the last;
3. each sample goes to the first grid point at or after it (`grid_index`): the value known at that
   time, as Prometheus reads a series at an evaluation time, so nothing is stamped before the
   sample that carries it; if two samples of one series land on one point the later one wins
   (for equal timestamps, the one added later); NaN samples are skipped so they never overwrite
   a reported value;
4. series with the same (metric key, entity) are merged (e.g. the same series in several files);
5. a label that never splits an entity into several series of one metric name (a kernel or driver
   version) is dropped from the key, so constant attributes do not fragment metrics.

Input is bounded (`limits.py`): samples whose timestamp is not finite unix seconds in
2000..2100 are dropped on arrival and counted by reason, and `build()` estimates the matrices
(series x time steps) before allocating them and raises `MemoryLimitError` above the limit.

    >>> import numpy as np
    >>> b = TelemetryBuilder()
    >>> b.add_series("temp", MetricKind.GAUGE, {"Hostname": "n1", "gpu": "0"},
    ...              np.array([1.8e9, 1.8e9 + 30, 1.8e9 + 59]), np.array([40.0, 41.0, 42.0]))
    >>> tel = b.build()
    >>> tel.step_s, (tel.times - tel.times[0]).tolist(), tel.metrics[0].values.tolist()
    (30, [0, 30, 60], [[40.0, 41.0, 42.0]])
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from trainguard.errors import TelemetryError
from trainguard.telemetry.frame import (
    Entity,
    FloatArray,
    IntArray,
    MetricKind,
    MetricSeries,
    Telemetry,
)
from trainguard.telemetry.identity import (
    Identified,
    IdentityConfig,
    identify,
    missing_node_label_message,
    pod_node_warning,
    render_key,
)
from trainguard.telemetry.limits import (
    DEFAULT_MAX_MEMORY_BYTES,
    EPOCH_MAX_S,
    EPOCH_MIN_S,
    check_memory,
    time_rejections,
)

__all__ = ["SourceStats", "TelemetryBuilder", "entity_sort_key", "grid_index"]

log = logging.getLogger(__name__)

_STEP_SAMPLE = 64
"""Per series, how many leading samples feed the step inference (cheap and plenty)."""


@dataclass(frozen=True, slots=True)
class SourceStats:
    """What the builder received and what it could not place; `warnings` are one-line summaries."""

    series: int
    samples: int
    series_without_node: int
    samples_outside_grid: int
    dropped_attribute_labels: tuple[str, ...]
    warnings: tuple[str, ...]
    samples_bad_time: int = 0
    """Samples dropped on arrival: timestamp not finite or outside the accepted epoch range."""


@dataclass(slots=True)
class _Series:
    dims: tuple[tuple[str, str], ...]
    entity: Entity
    job: str | None
    ts: FloatArray
    values: FloatArray


@dataclass(slots=True)
class _Family:
    kinds: set[MetricKind] = field(default_factory=set)
    series: list[_Series] = field(default_factory=list)


def entity_sort_key(e: Entity) -> tuple[str, int, int, str]:
    """Node, then node-level before GPUs, then GPUs in numeric order ("2" before "10")."""
    if e.gpu is None:
        return (e.node, 0, 0, "")
    if e.gpu.isdigit():
        return (e.node, 1, int(e.gpu), "")
    return (e.node, 2, 0, e.gpu)


class TelemetryBuilder:
    """Accumulates series from one or more sources; `build()` aligns them into a `Telemetry`.

    `step_s` fixes the grid step; None infers it from the data. `time_range_s` is the accepted
    [first, end) sample time (None: any finite time); `max_memory_bytes` bounds the matrices
    `build()` allocates (None: no bound).
    """

    def __init__(self, identity: IdentityConfig | None = None, step_s: int | None = None, *,
                 time_range_s: tuple[float, float] | None = (EPOCH_MIN_S, EPOCH_MAX_S),
                 max_memory_bytes: int | None = DEFAULT_MAX_MEMORY_BYTES) -> None:
        if step_s is not None and step_s <= 0:
            raise TelemetryError("telemetry step must be > 0 s")
        self.identity = identity or IdentityConfig()
        self.step_s = step_s
        self.time_range_s = time_range_s
        self.max_memory_bytes = max_memory_bytes
        self._bad_time: dict[str, int] = defaultdict(int)
        self._bad_example: dict[str, float] = {}
        self._families: dict[str, _Family] = defaultdict(_Family)
        self._no_node: dict[str, int] = defaultdict(int)
        self._no_node_labels: set[str] = set()
        self._any_node = False
        self._pod_nodes: set[str] = set()
        self._diffs: list[FloatArray] = []
        self._n_series = 0
        self._n_samples = 0
        self._t_min = np.inf
        self._t_max = -np.inf

    @property
    def n_samples(self) -> int:
        return self._n_samples

    @property
    def t_range(self) -> tuple[float, float] | None:
        """(first, last) sample time added so far, or None before any sample."""
        return None if self._n_samples == 0 else (float(self._t_min), float(self._t_max))

    def add_series(self, name: str, kind: MetricKind, labels: Mapping[str, str],
                   ts: np.ndarray, values: np.ndarray) -> None:
        """Add one series: `ts` in unix seconds and `values`, two 1-D arrays of equal length.

        Names ending `_total` are counters whatever `kind` says. A series without any node
        label is counted (see `stats`) and otherwise ignored.
        """
        ts_f = np.asarray(ts, dtype=np.float64)
        vals = np.asarray(values, dtype=np.float64)
        if ts_f.ndim != 1 or ts_f.shape != vals.shape:
            raise TelemetryError(
                f"series {name}: timestamps {ts_f.shape} and values {vals.shape} differ in shape")
        if ts_f.size == 0:
            return
        ident = _identify_cached(name, labels, self.identity)
        if ident.entity is None:
            self._no_node[name] += 1
            self._no_node_labels.update(labels)
            return
        self._any_node = True
        if ident.node_is_pod:
            self._pod_nodes.add(ident.entity.node)
        ts_f, vals = self._valid_times(ts_f, vals)
        if ts_f.size == 0:
            return
        if ts_f.size > 1:
            d = np.diff(ts_f)
            if not bool((d >= 0).all()):
                order = np.argsort(ts_f, kind="stable")
                ts_f, vals = ts_f[order], vals[order]
                d = np.diff(ts_f)
            self._diffs.append(d[:_STEP_SAMPLE])
        self._t_min = min(self._t_min, float(ts_f[0]))
        self._t_max = max(self._t_max, float(ts_f[-1]))
        fam = self._families[name]
        fam.kinds.add(MetricKind.COUNTER if name.endswith("_total") else kind)
        fam.series.append(_Series(ident.dims, ident.entity, ident.job, ts_f, vals))
        self._n_series += 1
        self._n_samples += int(ts_f.size)

    def _valid_times(self, ts: FloatArray, vals: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Drop (and count by reason) samples whose time is not finite or out of range."""
        lo, hi = self.time_range_s or (-np.inf, np.inf)
        if lo <= float(ts.min()) and float(ts.max()) < hi:  # NaN compares False: checked below
            return ts, vals
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(ts) & (ts >= lo) & (ts < hi)
        if bool(ok.all()):
            return ts, vals
        for reason, mask in time_rejections(ts[~ok], lo, hi).items():
            self._bad_time[reason] += int(np.count_nonzero(mask))
            if reason not in self._bad_example:
                self._bad_example[reason] = float(ts[~ok][mask][0])
        return ts[ok], vals[ok]

    def _time_warning(self) -> str | None:
        if not self._bad_time:
            return None
        parts = [f"{n} {reason} (e.g. {self._bad_example[reason]:.6g})"
                 for reason, n in sorted(self._bad_time.items())]
        return f"{sum(self._bad_time.values())} samples dropped: {'; '.join(parts)}"

    @property
    def spacing_known(self) -> bool:
        """Whether some series had two distinct sample times (else the step cannot be inferred)."""
        return any(bool((d > 0).any()) for d in self._diffs)

    def infer_step(self) -> int:
        """The given step, or the median positive spacing within series (whole seconds, >= 1)."""
        if self.step_s is not None:
            return self.step_s
        diffs = np.concatenate(self._diffs) if self._diffs else np.empty(0)
        diffs = diffs[diffs > 0]
        if diffs.size == 0:
            return 1
        return max(1, round(float(np.median(diffs))))

    def stats(self, samples_outside_grid: int = 0,
              dropped_labels: tuple[str, ...] = ()) -> SourceStats:
        warnings = [
            f"{n} series of {name} have no node label (looked for "
            f"{', '.join(self.identity.node_labels)}); skipped"
            for name, n in sorted(self._no_node.items())]
        if self._pod_nodes:
            warnings.append(pod_node_warning(self.identity, sorted(self._pod_nodes)))
        if samples_outside_grid:
            warnings.append(f"{samples_outside_grid} samples outside the requested time range")
        bad_time = self._time_warning()
        if bad_time is not None:
            warnings.append(bad_time)
        return SourceStats(self._n_series, self._n_samples, sum(self._no_node.values()),
                           samples_outside_grid, dropped_labels, tuple(warnings),
                           sum(self._bad_time.values()))

    @property
    def warnings(self) -> list[str]:
        return list(self.stats().warnings)

    def build(self, *, start_s: int | None = None, end_s: int | None = None) -> Telemetry:
        """Align everything added so far on one grid (see the module docstring).

        `start_s`/`end_s` clip the grid to multiples of the step in [start_s, end_s) (it never
        extends beyond the data); samples whose nearest grid point falls outside are dropped and
        counted in `last_stats`.
        """
        self.require_node_label()
        if self._n_samples == 0:
            why = self.stats().warnings
            extra = f" ({'; '.join(why)})" if why else ""
            raise TelemetryError(f"no samples to build telemetry from{extra}")
        step = self.infer_step()
        lo = int(grid_index(np.array([self._t_min]), step)[0])
        hi = int(grid_index(np.array([self._t_max]), step)[0])
        if start_s is not None:
            lo = max(lo, -(-start_s // step))
        if end_s is not None:
            hi = min(hi, -(-end_s // step) - 1)
        if hi < lo:
            raise TelemetryError(f"no samples between {start_s} and {end_s}")
        n_t = hi - lo + 1
        self._check_memory(n_t, step)
        times: IntArray = np.arange(lo, hi + 1, dtype=np.int64) * step
        metrics: list[MetricSeries] = []
        outside = 0
        dropped: list[str] = []
        job_masks: dict[tuple[str, str], np.ndarray] = {}
        for name in sorted(self._families):
            fam = self._families[name]
            kind = _family_kind(fam.kinds)
            attrs = _attribute_labels(fam.series)
            dropped.extend(f"{name}:{a}" for a in sorted(attrs))
            groups: dict[str, list[_Series]] = defaultdict(list)
            for s in fam.series:
                dims = tuple(kv for kv in s.dims if kv[0] not in attrs) if attrs else s.dims
                groups[render_key(name, dims)].append(s)
            for key in sorted(groups):
                series = groups[key]
                entities, values, n_out = _place(series, step, lo, n_t)
                outside += n_out
                metrics.append(MetricSeries(key, kind, tuple(entities), values))
            for s in fam.series:
                if s.job is not None:
                    cols = grid_index(s.ts, step) - lo
                    cols = cols[(cols >= 0) & (cols < n_t)]
                    mask = job_masks.get((s.entity.node, s.job))
                    if mask is None:
                        mask = job_masks[(s.entity.node, s.job)] = np.zeros(n_t, dtype=bool)
                    mask[cols] = True
        self._last_stats = self.stats(outside, tuple(dropped))
        for w in self._last_stats.warnings:
            log.warning("%s", w)
        return Telemetry(times, step, tuple(metrics), _jobs(job_masks, n_t))

    def require_node_label(self) -> None:
        """Raise `TelemetryError` naming the labels that exist when series were added but none
        carried a node label (e.g. a `--node-label` that no series has)."""
        if not self._any_node and self._no_node:
            raise TelemetryError(missing_node_label_message(
                self.identity, self._no_node_labels, sum(self._no_node.values())))

    def _check_memory(self, n_t: int, step: int) -> None:
        """Refuse before allocating when the [entity, time] matrices would exceed the limit."""
        rows = len({(name, s.dims, s.entity) for name, fam in self._families.items()
                    for s in fam.series})
        days = n_t * step / 86400
        check_memory(8.0 * rows * n_t, self.max_memory_bytes,
                     f"aligning {rows:,} series on {n_t:,} time steps "
                     f"({days:.1f} days at {step} s)",
                     "read a shorter time range or fewer nodes, or give a coarser --step; ")

    @property
    def last_stats(self) -> SourceStats:
        """Stats of the latest `build()` (before any build: what was added so far)."""
        found: SourceStats | None = getattr(self, "_last_stats", None)
        return found if found is not None else self.stats()


_IDENT_CACHE: dict[tuple[IdentityConfig, str, tuple[tuple[str, str], ...]], Identified] = {}
_IDENT_CACHE_MAX = 1 << 20


def _identify_cached(name: str, labels: Mapping[str, str], cfg: IdentityConfig) -> Identified:
    """`identify`, memoised: chunked readers resolve the same series once per chunk."""
    key = (cfg, name, tuple(labels.items()))
    found = _IDENT_CACHE.get(key)
    if found is None:
        if len(_IDENT_CACHE) >= _IDENT_CACHE_MAX:
            _IDENT_CACHE.clear()
        found = _IDENT_CACHE[key] = identify(name, labels, cfg)
    return found


def _family_kind(kinds: set[MetricKind]) -> MetricKind:
    for k in (MetricKind.COUNTER, MetricKind.MONOTONIC, MetricKind.RATE, MetricKind.GAUGE):
        if k in kinds:
            return k
    return MetricKind.UNKNOWN


def _attribute_labels(series: list[_Series]) -> set[str]:
    """Labels of one metric name that never take two values (or value and absence) per entity."""
    names = {k for s in series for k, _ in s.dims}
    if not names:
        return set()
    seen: dict[tuple[str, Entity], str | None] = {}
    splitting: set[str] = set()
    for s in series:
        present = dict(s.dims)
        for label in names - splitting:
            value = present.get(label)
            prev = seen.setdefault((label, s.entity), value)
            if prev != value:
                splitting.add(label)
    return names - splitting


GRID_TOLERANCE = 1e-6
"""A sample this close (in steps) after a grid point still belongs to it (float rounding of
millisecond timestamps)."""


def grid_index(ts: FloatArray, step: float) -> IntArray:
    """Index (time / step) of the first grid point at or after each timestamp.

    >>> grid_index(np.array([60.0, 61.0, 89.0, 90.0]), 30).tolist()
    [2, 3, 3, 3]
    """
    return np.ceil(np.asarray(ts, dtype=np.float64) / step - GRID_TOLERANCE).astype(np.int64)


def _place(series: list[_Series], step: int, lo: int,
           n_t: int) -> tuple[list[Entity], FloatArray, int]:
    """The [entity, time] matrix of one metric key, its entities, and the samples off the grid."""
    entities = sorted({s.entity for s in series}, key=entity_sort_key)
    row_of = {e: i for i, e in enumerate(entities)}
    out = np.full((len(entities), n_t), np.nan)
    rows = np.repeat(np.array([row_of[s.entity] for s in series], dtype=np.int64),
                     [s.ts.size for s in series])
    ts = np.concatenate([s.ts for s in series]) if len(series) > 1 else series[0].ts
    vals = np.concatenate([s.values for s in series]) if len(series) > 1 else series[0].values
    cols = grid_index(ts, step) - lo
    ok = (cols >= 0) & (cols < n_t)
    n_out = int(ts.size - np.count_nonzero(ok))
    ok &= ~np.isnan(vals)
    if not ok.all():
        rows, cols, ts, vals = rows[ok], cols[ok], ts[ok], vals[ok]
    flat = rows * n_t + cols
    if len(entities) < len(series):
        # Merged duplicates: order all samples of a cell by time; stable, so equal times keep
        # the order they were added in.
        order = np.lexsort((ts, flat))
        flat, vals = flat[order], vals[order]
    # Now flat is sorted within each series (series are time-sorted on add) and distinct across
    # rows, so samples sharing a cell are adjacent: keep the last of each run.
    if flat.size > 1:
        last = np.empty(flat.size, dtype=bool)
        np.not_equal(flat[1:], flat[:-1], out=last[:-1])
        last[-1] = True
        if not last.all():
            flat, vals = flat[last], vals[last]
    out.reshape(-1)[flat] = vals
    return entities, out, n_out


def _jobs(masks: dict[tuple[str, str], np.ndarray], n_t: int) -> dict[str, tuple[str, ...]]:
    """Per node, the job id at each grid point ("" = none); with several jobs the last by name."""
    by_node: dict[str, np.ndarray] = {}
    for (node, job) in sorted(masks):
        arr = by_node.get(node)
        if arr is None:
            arr = by_node[node] = np.full(n_t, "", dtype=object)
        arr[masks[(node, job)]] = job
    return {node: tuple(arr.tolist()) for node, arr in sorted(by_node.items())}
