"""The rows of one time chunk (series id, time, value) -> `Telemetry`, vectorised.

`Assembler.assemble` builds the same `Telemetry` that `TelemetryBuilder` builds from the same
samples (grid, last sample per grid point wins, NaN never overwrites, series of one entity
merged, attribute labels dropped, job ids, bad times and series without a node counted and
logged), with one scatter into one matrix instead of one call per series. The per-series part
(keys, entities, row placement) is cached while the set of series stays the same.
`tests/unit/telemetry/test_tel_assemble.py` checks it against `TelemetryBuilder`.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trainguard.errors import TelemetryError
from trainguard.telemetry.builder import entity_sort_key, grid_index
from trainguard.telemetry.frame import (
    Entity,
    FloatArray,
    IntArray,
    MetricKind,
    MetricSeries,
    Telemetry,
)
from trainguard.telemetry.identity import render_key
from trainguard.telemetry.limits import (
    DEFAULT_MAX_MEMORY_BYTES,
    EPOCH_MAX_S,
    EPOCH_MIN_S,
    check_memory,
    time_rejections,
)
from trainguard.telemetry.seriesids import SeriesIds

__all__ = ["Assembler", "ChunkRows"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class _Placement:
    """Where the series of one chunk's set go: row per series id, and the metrics' row ranges."""

    row_of: IntArray
    metrics: tuple[tuple[str, MetricKind, tuple[Entity, ...], int, int], ...]
    n_rows: int
    distinct: int
    pairs: tuple[tuple[str, str], ...]
    pair_of: IntArray


class ChunkRows:
    """Rows of one time chunk, appended batch by batch: series id, time, value, and optionally
    the grid point of each time (`grid_index`, when the reader computed it already)."""

    def __init__(self) -> None:
        self.sid: list[IntArray] = []
        self.ts: list[FloatArray] = []
        self.vals: list[FloatArray] = []
        self.cells: list[IntArray] = []

    def add(self, sid: IntArray, ts: FloatArray, vals: FloatArray,
            cells: IntArray | None = None) -> None:
        self.sid.append(sid)
        self.ts.append(ts)
        self.vals.append(vals)
        if cells is not None:
            self.cells.append(cells)

    def arrays(self) -> tuple[IntArray, FloatArray, FloatArray]:
        """The rows as three arrays (the batch pieces are released: one copy at a time)."""
        for parts in (self.sid, self.ts, self.vals, self.cells):
            if len(parts) > 1:
                parts[:] = [np.concatenate(parts)]
        return self.sid[0], self.ts[0], self.vals[0]

    def grid(self, step: int) -> IntArray:
        """Each row's grid point (after `arrays`): as added when every batch gave them."""
        if len(self.cells) == 1 and self.cells[0].size == self.ts[0].size:
            return self.cells[0]
        return grid_index(self.ts[0], step)


class Assembler:
    """`assemble` with the placement of the last set of series cached."""

    def __init__(self, series: SeriesIds, step_s: int, *,
                 max_memory_bytes: int | None = DEFAULT_MAX_MEMORY_BYTES) -> None:
        self.series = series
        self.step_s = step_s
        self.max_memory_bytes = max_memory_bytes
        self._cache: tuple[bytes, _Placement] | None = None

    def assemble(self, rows: ChunkRows, start_s: int, end_s: int) -> Telemetry | None:
        """The chunk's `Telemetry` on the grid points in [start_s, end_s), or None when no row
        can be placed (no node, or no valid time)."""
        sid, ts, vals = rows.arrays()
        cells = rows.grid(self.step_s)
        reg = self.series
        step = self.step_s
        placed = reg.has_node[sid]
        if not placed.any():
            return None
        with np.errstate(invalid="ignore"):
            ok_t = np.isfinite(ts) & (ts >= EPOCH_MIN_S) & (ts < EPOCH_MAX_S)
        warnings = self._no_node_warnings(sid[~placed]) if not placed.all() else []
        bad = placed & ~ok_t
        if bad.any():
            warnings.append(_time_warning(ts[bad]))
        good = placed & ok_t
        if not good.any():
            return None
        if not good.all():
            sid, ts, vals, cells = sid[good], ts[good], vals[good], cells[good]
        lo, hi = int(cells.min()), int(cells.max())  # grid_index is monotonic
        lo = max(lo, -(-start_s // step))
        hi = min(hi, -(-end_s // step) - 1)
        if hi < lo:
            raise TelemetryError(f"no samples between {start_s} and {end_s}")
        n_t = hi - lo + 1
        present = np.zeros(len(reg), dtype=bool)
        present[sid] = True
        place = self._placement(present)
        check_memory(8.0 * place.distinct * n_t, self.max_memory_bytes,
                     f"aligning {place.distinct:,} series on {n_t:,} time steps "
                     f"({n_t * step / 86400:.1f} days at {step} s)",
                     "read a shorter time range or fewer nodes, or give a coarser --step; ")
        cols = cells - lo
        in_grid = (cols >= 0) & (cols < n_t)
        outside = int(in_grid.size - np.count_nonzero(in_grid))
        jobs = _job_ids(place, sid[in_grid], cols[in_grid], n_t) if place.pairs else {}
        values = _scatter(place.row_of[sid], cols, ts, vals, in_grid, place.n_rows, n_t)
        if outside:
            warnings.insert(len(warnings) - (1 if bad.any() else 0),
                            f"{outside} samples outside the requested time range")
        for w in warnings:
            log.warning("%s", w)
        times: IntArray = np.arange(lo, hi + 1, dtype=np.int64) * step
        metrics = tuple(MetricSeries(key, kind, ents, values[a:b])
                        for key, kind, ents, a, b in place.metrics)
        return Telemetry(times, step, metrics, jobs)

    def _no_node_warnings(self, sids: IntArray) -> list[str]:
        reg = self.series
        counts: dict[str, int] = defaultdict(int)
        for s in np.unique(sids).tolist():
            name = reg.names[s]
            if name is not None:
                counts[name] += 1
        return [f"{n} series of {name} have no node label (looked for "
                f"{', '.join(reg.identity.node_labels)}); skipped"
                for name, n in sorted(counts.items())]

    def _placement(self, present: npt.NDArray[np.bool_]) -> _Placement:
        key = np.packbits(present).tobytes()
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        place = _place_series(self.series, np.flatnonzero(present).tolist())
        self._cache = (key, place)
        return place


def _place_series(reg: SeriesIds, sids: list[int]) -> _Placement:
    """Metric keys (attribute labels dropped), sorted entities and one row per key and entity,
    as `TelemetryBuilder.build` lays them out."""
    families: dict[str, list[int]] = defaultdict(list)
    for s in sids:
        name = reg.names[s]
        assert name is not None  # only placed series come here
        families[name].append(s)
    row_of = np.full(len(reg), -1, dtype=np.int64)
    metrics = []
    row = 0
    distinct: set[tuple[str, tuple[tuple[str, str], ...], Entity | None]] = set()
    for name in sorted(families):
        members = families[name]
        attrs = _attribute_labels([(reg.dims[s], reg.entities[s]) for s in members])
        groups: dict[str, list[int]] = defaultdict(list)
        for s in members:
            distinct.add((name, reg.dims[s], reg.entities[s]))
            dims = tuple(kv for kv in reg.dims[s] if kv[0] not in attrs) if attrs else reg.dims[s]
            groups[render_key(name, dims)].append(s)
        kind = MetricKind.COUNTER if name.endswith("_total") else MetricKind.UNKNOWN
        for key in sorted(groups):
            ents = sorted({e for s in groups[key] if (e := reg.entities[s]) is not None},
                          key=entity_sort_key)
            index = {e: i for i, e in enumerate(ents)}
            for s in groups[key]:
                ent = reg.entities[s]
                assert ent is not None
                row_of[s] = row + index[ent]
            metrics.append((key, kind, tuple(ents), row, row + len(ents)))
            row += len(ents)
    pairs = sorted({(e.node, j) for s in sids
                    if (j := reg.jobs[s]) is not None and (e := reg.entities[s]) is not None})
    pair_index = {p: i for i, p in enumerate(pairs)}
    pair_of = np.full(len(reg), -1, dtype=np.int64)
    for s in sids:
        j, e = reg.jobs[s], reg.entities[s]
        if j is not None and e is not None:
            pair_of[s] = pair_index[(e.node, j)]
    return _Placement(row_of, tuple(metrics), row, len(distinct), tuple(pairs), pair_of)


def _attribute_labels(series: list[tuple[tuple[tuple[str, str], ...], Entity | None]]
                      ) -> set[str]:
    """Labels of one metric name that never take two values (or value and absence) per entity
    (the builder's rule)."""
    names = {k for dims, _ in series for k, _ in dims}
    if not names:
        return set()
    seen: dict[tuple[str, Entity | None], str | None] = {}
    splitting: set[str] = set()
    for dims, ent in series:
        present = dict(dims)
        for label in names - splitting:
            value = present.get(label)
            if seen.setdefault((label, ent), value) != value:
                splitting.add(label)
    return names - splitting


def _scatter(rows: IntArray, cols: IntArray, ts: FloatArray, vals: FloatArray,
             in_grid: npt.NDArray[np.bool_], n_rows: int, n_t: int) -> FloatArray:
    """The [row, time] matrix: per cell the latest sample (by time, then by arrival), never a
    NaN sample. Filled time-major and transposed once: rows arrive time by time (a time-ordered
    file), so the writes stay close together (2x faster than scattering row-major)."""
    out = np.full((n_t, n_rows), np.nan)
    sel = in_grid & ~np.isnan(vals)
    if not sel.all():
        rows, cols, ts, vals = rows[sel], cols[sel], ts[sel], vals[sel]
    flat = cols * n_rows + rows
    filled = np.zeros(n_rows * n_t, dtype=bool)
    filled[flat] = True
    flat_out = out.reshape(-1)
    if int(np.count_nonzero(filled)) == flat.size:
        flat_out[flat] = vals
        return np.ascontiguousarray(out.T)
    # Several samples for some cells: order those by (cell, time, arrival), keep the last.
    counts = np.bincount(flat, minlength=n_rows * n_t)
    multi = counts[flat] > 1
    single = ~multi
    flat_out[flat[single]] = vals[single]
    idx = np.flatnonzero(multi)
    order = idx[np.lexsort((idx, ts[idx], flat[idx]))]
    f = flat[order]
    last = np.r_[f[1:] != f[:-1], True]
    flat_out[f[last]] = vals[order[last]]
    return np.ascontiguousarray(out.T)


def _job_ids(place: _Placement, sid: IntArray, cols: IntArray, n_t: int
             ) -> dict[str, tuple[str, ...]]:
    """Per node, the job id at each grid point ("" = none); with several the last by name."""
    pair = place.pair_of[sid]
    has = pair >= 0
    mask = np.zeros((len(place.pairs), n_t), dtype=bool)
    mask[pair[has], cols[has]] = True
    by_node: dict[str, np.ndarray] = {}
    for i, (node, job) in enumerate(place.pairs):
        arr = by_node.get(node)
        if arr is None:
            arr = by_node[node] = np.full(n_t, "", dtype=object)
        arr[mask[i]] = job
    return {node: tuple(arr.tolist()) for node, arr in sorted(by_node.items())}


def _time_warning(bad: FloatArray) -> str:
    """The builder's summary of samples dropped for their timestamp."""
    parts = []
    counts = time_rejections(bad, EPOCH_MIN_S, EPOCH_MAX_S)
    for reason, mask in sorted(counts.items()):
        parts.append(f"{int(np.count_nonzero(mask))} {reason} (e.g. {float(bad[mask][0]):.6g})")
    total = sum(int(np.count_nonzero(m)) for m in counts.values())
    return f"{total} samples dropped: {'; '.join(parts)}"
