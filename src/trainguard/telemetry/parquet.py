"""Long-format Parquet telemetry: one row per sample, streamed by record batches.

Columns: `timestamp` (unix seconds as int/float, or an Arrow timestamp), `metric` (or `__name__`
/ `name`), `value`; every other column is a label (`Hostname`, `gpu`, `hpc_job`, ...; null or ""
means the label is absent). pyarrow is optional: `pip install 'trainguard[parquet]'`.

Each record batch is read with its string columns dictionary-encoded (as they are stored); its
rows are numbered by series (`seriesids.py`) and placed (`assemble.py`) with whole-column
operations: Python runs once per new series or label value, never per row or per series and
batch.
`iter_parquet_chunks` holds only the time chunks the current batch touches.

    >>> write_parquet(tel, Path("t.parquet"))                       # doctest: +SKIP
    >>> for chunk in iter_parquet_chunks([Path("t.parquet")], 3600):  # doctest: +SKIP
    ...     score(chunk)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainguard.errors import TelemetryError
from trainguard.telemetry.assemble import Assembler, ChunkRows
from trainguard.telemetry.builder import TelemetryBuilder, grid_index
from trainguard.telemetry.frame import FloatArray, MetricKind, Telemetry
from trainguard.telemetry.identity import IdentityConfig
from trainguard.telemetry.limits import EPOCH_MAX_S, EPOCH_MIN_S
from trainguard.telemetry.seriesids import SeriesIds

__all__ = ["ParquetStats", "ParquetWriter", "iter_parquet_chunks", "read_parquet",
           "write_parquet"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

_BATCH_ROWS = 1 << 20
_METRIC_COLUMNS = ("metric", "__name__", "name")
_TIME_COLUMNS = ("timestamp", "time")
_TS_DIVISOR = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _pyarrow() -> tuple[Any, Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise TelemetryError(
            "reading Parquet telemetry needs pyarrow: pip install 'trainguard[parquet]'") from exc
    return pa, pc, pq


@dataclass(frozen=True, slots=True)
class ParquetStats:
    files: int
    rows: int
    series: int


def _column(names: Sequence[str], wanted: Sequence[str], path: Path) -> str:
    for w in wanted:
        if w in names:
            return w
    raise TelemetryError(
        f"{path}: no {' / '.join(wanted)} column in long-format Parquet (columns: "
        f"{', '.join(names)})")


def _seconds(col: Any, pa: Any, pc: Any) -> FloatArray:
    if pa.types.is_timestamp(col.type):
        ints = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False)
        return np.asarray(ints, dtype=np.float64) / _TS_DIVISOR[col.type.unit]
    return np.asarray(pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False),
                      dtype=np.float64)


def _codes(col: Any, pa: Any, pc: Any) -> tuple[np.ndarray, list[str | None]]:
    """Dictionary codes of a label column (nulls get the last code) and the decoded values."""
    if not pa.types.is_dictionary(col.type):
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            col = pc.cast(col, pa.string())
        col = pc.dictionary_encode(col)
    dictionary: list[str | None] = col.dictionary.to_pylist()
    idx = col.indices.fill_null(len(dictionary)).to_numpy(zero_copy_only=False)
    return np.asarray(idx, dtype=np.int64), [*dictionary, None]


class _Schema:
    def __init__(self, names: Sequence[str], path: Path) -> None:
        self.time = _column(names, _TIME_COLUMNS, path)
        self.metric = _column(names, _METRIC_COLUMNS, path)
        self.value = _column(names, ("value",), path)
        self.labels = [n for n in names if n not in (self.time, self.metric, self.value)]


def read_parquet(paths: Sequence[str | Path], builder: TelemetryBuilder, *,
                 progress: Progress | None = None) -> ParquetStats:
    """Read long-format Parquet files into `builder`, one record batch at a time."""
    pa, pc, pq = _pyarrow()
    files = [Path(p) for p in paths]
    total = sum(_size(f) for f in files)
    found: dict[tuple[str, ...], tuple[SeriesIds, ChunkRows]] = {}
    rows = done = 0
    for path in files:
        pf = _open(pq, path, dictionary=True)
        schema = _Schema(pf.schema_arrow.names, path)
        series, kept = found.setdefault(tuple(schema.labels),
                                        (SeriesIds(schema.labels, builder.identity), ChunkRows()))
        n_groups = max(pf.num_row_groups, 1)
        for i, batch in enumerate(pf.iter_batches(batch_size=_BATCH_ROWS)):
            rows += batch.num_rows
            if batch.num_rows:
                kept.add(*_batch_rows(batch, schema, series, pa, pc))
            if progress is not None:
                progress(done + min(i + 1, n_groups) * _size(path) // n_groups, total)
        done += _size(path)
    n_series = sum(_add_series(builder, series, kept) for series, kept in found.values())
    if progress is not None:
        progress(total, total)
    return ParquetStats(len(files), rows, n_series)


def _add_series(builder: TelemetryBuilder, series: SeriesIds, kept: ChunkRows) -> int:
    """One `add_series` per series (rows in file order), in order of first appearance."""
    if not kept.sid:
        return 0
    sid, ts, vals = kept.arrays()
    order = np.argsort(sid, kind="stable")
    sid, ts, vals = sid[order], ts[order], vals[order]
    starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]]) if sid.size else np.zeros(0, int)
    ends = np.r_[starts[1:], sid.size]
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        s = int(sid[a])
        name = series.names[s]
        assert name is not None  # _batch_rows keeps named rows only
        builder.add_series(name, MetricKind.UNKNOWN, series.labels[s], ts[a:b], vals[a:b])
    return len(starts)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise TelemetryError(f"telemetry source not found: {path}") from exc


def _open(pq: Any, path: Path, *, dictionary: bool = False) -> Any:
    """`dictionary`: string columns other than the value arrive dictionary-encoded, as they
    are stored (2.5x faster to read than decoding every string)."""
    try:
        # memory_map: without it pyarrow's allocations grow with every batch of a long scan
        # (measured: +58 MB per 12 M rows); mapped, a 1-billion-row scan stays ~120 MB.
        if not dictionary:
            return pq.ParquetFile(path, memory_map=True)
        schema = pq.read_schema(path, memory_map=True)
        strings = [f.name for f in schema if str(f.type) in ("string", "large_string")]
        return pq.ParquetFile(path, memory_map=True, read_dictionary=strings)
    except OSError as exc:
        raise TelemetryError(f"cannot read Parquet file {path}: {exc}") from exc
    except Exception as exc:  # pyarrow raises ArrowInvalid (a ValueError) for non-Parquet input
        raise TelemetryError(f"{path} is not a Parquet file: {exc}") from exc


def iter_parquet_chunks(paths: Sequence[str | Path], chunk_s: int,
                        identity: IdentityConfig | None = None, *,
                        step_s: int | None = None) -> Iterator[Telemetry]:
    """Consecutive `chunk_s`-second time chunks of time-ordered long-format files.

    Memory stays bounded by the chunks that the current record batch touches. The step is
    `step_s` or inferred from the first batch; each sample belongs to the chunk of its
    grid point. A row whose chunk was already yielded means the files are not time-ordered:
    `TelemetryError`. Rows are numbered by series and placed with whole-column operations
    (`seriesids.py`, `assemble.py`): no Python loop per series or per row.
    """
    if chunk_s <= 0:
        raise TelemetryError("chunk_s must be > 0")
    pa, pc, pq = _pyarrow()
    open_chunks: dict[int, ChunkRows] = {}
    emitted = -(1 << 62)
    step = step_s
    series: SeriesIds | None = None
    assembler: Assembler | None = None

    def emit(upto: int) -> Iterator[Telemetry]:
        for k in sorted(c for c in open_chunks if c < upto):
            rows = open_chunks.pop(k)
            assert assembler is not None  # set with the first rows
            tel = assembler.assemble(rows, k * chunk_s, (k + 1) * chunk_s)
            if tel is not None:
                yield tel

    for path in map(Path, paths):
        pf = _open(pq, path, dictionary=True)
        schema = _Schema(pf.schema_arrow.names, path)
        if series is None:
            series = SeriesIds(schema.labels, identity)
        elif series.label_names != schema.labels:
            # Another set of label columns: a fresh numbering (placement is by key, not id).
            yield from emit(1 << 62)
            series = SeriesIds(schema.labels, identity)
        for batch in pf.iter_batches(batch_size=_BATCH_ROWS):
            if batch.num_rows == 0:
                continue
            sid, ts, vals = _batch_rows(batch, schema, series, pa, pc)
            if sid.size == 0:
                continue
            if step is None:
                step = _probe_step(series, sid, ts, vals, identity, path)
            if assembler is None or assembler.series is not series:
                assembler = Assembler(series, step)
            cells = _cells(ts, step)
            chunk = (cells * step) // chunk_s
            first_chunk = int(chunk.min())
            if first_chunk <= emitted:
                i = int(np.argmax(chunk <= emitted))
                raise TelemetryError(
                    f"{path} is not time-ordered: a {series.names[int(sid[i])]} sample at "
                    f"t={ts[i]:.0f} comes after the chunk starting {int(chunk[i]) * chunk_s} "
                    "was complete")
            last_chunk = int(chunk.max())
            if first_chunk == last_chunk:
                open_chunks.setdefault(first_chunk, ChunkRows()).add(sid, ts, vals, cells)
            else:
                for k in np.unique(chunk).tolist():
                    m = chunk == k
                    open_chunks.setdefault(k, ChunkRows()).add(sid[m], ts[m], vals[m], cells[m])
            # Rows are time-ordered: nothing before this batch's first chunk can follow.
            yield from emit(first_chunk)
            emitted = max(emitted, first_chunk - 1)
    yield from emit(1 << 62)


def _batch_rows(batch: Any, schema: _Schema, series: SeriesIds, pa: Any, pc: Any
                ) -> tuple[np.ndarray, FloatArray, FloatArray]:
    """Series id, time and value of each row of `batch` that has a metric name."""
    ts = _seconds(batch.column(schema.time), pa, pc)
    vals = np.asarray(pc.cast(batch.column(schema.value), pa.float64())
                      .to_numpy(zero_copy_only=False), dtype=np.float64)
    columns = [_codes(batch.column(name), pa, pc) for name in (schema.metric, *schema.labels)]
    sid = series.ids(columns)
    named = series.named[sid]
    if not named.all():  # a row without a metric name cannot be placed
        sid, ts, vals = sid[named], ts[named], vals[named]
    return sid, ts, vals


def _chunk_of(ts: FloatArray, *, step_s: int, chunk_s: int) -> np.ndarray:
    """The chunk index of each sample's grid point (`grid_index`)."""
    return (_cells(ts, step_s) * step_s) // chunk_s


def _cells(ts: FloatArray, step_s: int) -> np.ndarray:
    """Each sample's grid point (`grid_index`). A sample with an impossible time (NaN, 1e20)
    rides with the batch's first valid one: its chunk drops and counts it, instead of the cast
    to int64 inventing a chunk."""
    ok = np.isfinite(ts) & (ts >= EPOCH_MIN_S) & (ts < EPOCH_MAX_S)
    if not ok.all():
        ts = np.where(ok, ts, ts[ok][0] if ok.any() else EPOCH_MIN_S)
    return grid_index(ts, step_s)


def _probe_step(series: SeriesIds, sid: np.ndarray, ts: FloatArray, vals: FloatArray,
                identity: IdentityConfig | None, path: Path) -> int:
    """The grid step from the first batch: spacing within series, else between timestamps."""
    probe = TelemetryBuilder(identity)
    order = np.argsort(sid, kind="stable")
    sid_s = sid[order]
    starts = np.flatnonzero(np.r_[True, sid_s[1:] != sid_s[:-1]])
    for a, b in zip(starts.tolist(), np.r_[starts[1:], sid_s.size].tolist(), strict=True):
        s = int(sid_s[a])
        name = series.names[s]
        assert name is not None  # _batch_rows keeps named rows only
        probe.add_series(name, MetricKind.UNKNOWN, series.labels[s], ts[order[a:b]],
                         vals[order[a:b]])
    if probe.spacing_known:
        return probe.infer_step()
    distinct = np.unique(ts)
    if distinct.size < 2:
        raise TelemetryError(f"{path}: cannot infer the sample step from the first rows; "
                             "pass step_s")
    return max(1, round(float(np.median(np.diff(distinct)))))


class ParquetWriter:
    """Appends `Telemetry` chunks to one long-format file, each chunk's rows in time order.

        >>> with ParquetWriter(Path("t.parquet")) as w:   # doctest: +SKIP
        ...     for chunk in tel.chunks(3600):
        ...         w.write(chunk)
    """

    def __init__(self, path: Path, *, label_columns: Sequence[str] | None = None) -> None:
        self.path = Path(path)
        self._labels = list(label_columns) if label_columns is not None else None
        self._writer: Any = None
        self._pa, self._pc, self._pq = _pyarrow()

    def __enter__(self) -> ParquetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def write(self, tel: Telemetry) -> None:
        from trainguard.telemetry.openmetrics import parse_series_text

        pa = self._pa
        per_metric = []
        for m in tel.metrics:
            name, dims = parse_series_text(m.name)
            per_metric.append((m, name, dims))
        if self._labels is None:
            dims_names = sorted({k for _, _, d in per_metric for k in d})
            self._labels = ["node", "gpu", *(["hpc_job"] if tel.jobs else []), *dims_names]
        if self._writer is None:
            fields = [pa.field("timestamp", pa.int64()), pa.field("metric", pa.string()),
                      pa.field("value", pa.float64()),
                      *(pa.field(c, pa.string()) for c in self._labels)]
            self._writer = self._pq.ParquetWriter(self.path, pa.schema(fields))
        tables = []
        for m, name, dims in per_metric:
            rows, cols = np.nonzero(~np.isnan(m.values))
            # Time-major within the chunk: a reader sees time advance row group by row group.
            order = np.lexsort((rows, cols))
            rows, cols = rows[order], cols[order]
            take_rows = pa.array(rows)
            n = len(rows)
            columns: dict[str, Any] = {
                "timestamp": pa.array(tel.times[cols]),
                "metric": pa.array([name], pa.string()).take(pa.array(np.zeros(n, np.int64))),
                "value": pa.array(m.values[rows, cols]),
            }
            for c in self._labels:
                if c == "node":
                    columns[c] = pa.array([e.node for e in m.entities], pa.string()).take(take_rows)
                elif c == "gpu":
                    columns[c] = pa.array([e.gpu for e in m.entities], pa.string()).take(take_rows)
                elif c == "hpc_job":
                    jobs = np.array([tel.jobs.get(e.node, ("",) * tel.times.size)
                                     for e in m.entities], dtype=object).reshape(
                                         len(m.entities), tel.times.size)
                    job = jobs[rows, cols]
                    job[job == ""] = None
                    columns[c] = pa.array(job, pa.string())
                else:
                    columns[c] = pa.array([dims.get(c)], pa.string()).take(
                        pa.array(np.zeros(n, np.int64)))
            if set(dims) - set(self._labels):
                raise TelemetryError(
                    f"metric {m.name}: labels {sorted(set(dims) - set(self._labels))} are not "
                    f"columns of {self.path}")
            tables.append(pa.table(columns))
        if tables:
            table = pa.concat_tables(tables)
            order = np.argsort(table.column("timestamp").to_numpy(), kind="stable")
            self._writer.write_table(table.take(pa.array(order)))


def write_parquet(tel: Telemetry, path: Path, *, chunk_s: int | None = None) -> None:
    """Write `tel` as one long-format file, in time chunks (one row group per chunk) so that a
    reader can stream it; `chunk_s` defaults to about 64 grid points per chunk."""
    chunk = chunk_s or tel.step_s * 64
    with ParquetWriter(Path(path)) as writer:
        for part in tel.chunks(chunk):
            writer.write(part)
