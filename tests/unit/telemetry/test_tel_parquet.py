"""Long-format Parquet: round trip, Arrow timestamps, chunked streaming, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainguard.errors import TelemetryError
from trainguard.telemetry import (
    Entity,
    MetricKind,
    MetricSeries,
    ParquetWriter,
    Telemetry,
    TelemetryBuilder,
    iter_parquet_chunks,
    read_parquet,
    write_parquet,
)

STEP = 30
T0 = 1_700_000_010


def _telemetry(n_t: int = 200, jobs: bool = True) -> Telemetry:
    rng = np.random.default_rng(1)
    times = T0 + np.arange(n_t, dtype=np.int64) * STEP
    gpus = tuple(Entity(f"n{n}", str(g)) for n in range(3) for g in range(2))
    temp = rng.normal(40, 2, (len(gpus), n_t))
    temp[0, 5:9] = np.nan
    nodes = (Entity("n0"), Entity("n1"), Entity("n2"))
    cpu0 = np.cumsum(rng.uniform(0, 5, (3, n_t)), axis=1)
    cpu1 = np.cumsum(rng.uniform(0, 5, (3, n_t)), axis=1)
    metrics = (
        MetricSeries("DCGM_FI_DEV_GPU_TEMP", MetricKind.UNKNOWN, gpus, temp),
        MetricSeries('node_cpu_seconds_total{cpu="0"}', MetricKind.COUNTER, nodes, cpu0),
        MetricSeries('node_cpu_seconds_total{cpu="1"}', MetricKind.COUNTER, nodes, cpu1),
    )
    job_map = {"n0": tuple("j1" if t < n_t // 2 else "" for t in range(n_t))} if jobs else {}
    return Telemetry(times, STEP, metrics, job_map)


def _assert_same(a: Telemetry, b: Telemetry) -> None:
    assert a.step_s == b.step_s
    np.testing.assert_array_equal(a.times, b.times)
    assert [m.name for m in a.metrics] == [m.name for m in b.metrics]
    for ma, mb in zip(a.metrics, b.metrics, strict=True):
        assert ma.entities == mb.entities and ma.kind == mb.kind, ma.name
        np.testing.assert_array_equal(ma.values, mb.values)


def test_round_trip(tmp_path: Path) -> None:
    tel = _telemetry()
    path = tmp_path / "t.parquet"
    write_parquet(tel, path)
    assert pq.ParquetFile(path).num_row_groups > 1
    b = TelemetryBuilder()
    stats = read_parquet([path], b)
    assert stats.rows == tel.n_samples
    assert stats.series == 6 + 3 + 3 + 4  # n0's rows with and without hpc_job differ
    back = b.build()
    _assert_same(tel, back)
    assert back.jobs == tel.jobs


def test_arrow_timestamps_name_column_and_null_labels(tmp_path: Path) -> None:
    ts = pa.array(np.array([T0, T0 + 30, T0 + 60], dtype="datetime64[s]").astype(
        "datetime64[ms]"), pa.timestamp("ms", tz="UTC"))
    table = pa.table({
        "timestamp": ts,
        "__name__": ["up", "up", "up"],
        "value": pa.array([1, 0, 1], pa.int64()),
        "Hostname": ["a", "a", "a"],
        "gpu": pa.array([None, None, None], pa.string()),
    })
    path = tmp_path / "x.parquet"
    pq.write_table(table, path)
    b = TelemetryBuilder()
    read_parquet([path], b)
    tel = b.build()
    assert tel.times.tolist() == [T0, T0 + 30, T0 + 60]
    assert tel.metrics[0].entities == (Entity("a"),)
    assert tel.metrics[0].values.tolist() == [[1.0, 0.0, 1.0]]


def test_chunked_streaming_matches_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.telemetry import parquet as tp

    monkeypatch.setattr(tp, "_BATCH_ROWS", 500)  # many batches, chunks spanning batches
    tel = _telemetry(jobs=False)
    path = tmp_path / "t.parquet"
    write_parquet(tel, path, chunk_s=STEP * 16)
    chunk_s = STEP * 50
    chunks = list(iter_parquet_chunks([path], chunk_s))
    expected = [c for c in tel.chunks(chunk_s) if c.times.size]
    assert len(chunks) == len(expected) == 5
    for got, want in zip(chunks, expected, strict=True):
        assert int(got.times[-1]) // chunk_s == int(got.times[0]) // chunk_s
        _assert_same(want, got)


def test_unordered_file_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.telemetry import parquet as tp

    monkeypatch.setattr(tp, "_BATCH_ROWS", 100)
    tel = _telemetry(n_t=100, jobs=False)
    path = tmp_path / "u.parquet"
    with ParquetWriter(path) as w:
        w.write(tel.slice_time(T0 + 50 * STEP, T0 + 100 * STEP))
        w.write(tel.slice_time(T0, T0 + 50 * STEP))
    with pytest.raises(TelemetryError, match="not time-ordered"):
        list(iter_parquet_chunks([path], STEP * 10, step_s=STEP))


def test_missing_columns_and_non_parquet(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"ts": [1.0], "metric": ["x"], "value": [1.0]}), path)
    with pytest.raises(TelemetryError, match="no timestamp / time column"):
        read_parquet([path], TelemetryBuilder())
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(TelemetryError, match=r"junk\.parquet"):
        read_parquet([junk], TelemetryBuilder())
