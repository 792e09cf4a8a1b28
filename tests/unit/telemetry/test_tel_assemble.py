"""The vectorised Parquet chunk reader builds exactly what `TelemetryBuilder` builds from the same
rows, on messy random tables: duplicates, NaN values, off-grid and impossible times, rows
without a node or a metric name, attribute labels, a label that splits series, job ids."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from trainguard.telemetry import Telemetry, TelemetryBuilder, iter_parquet_chunks, read_parquet
from trainguard.telemetry.frame import MetricKind
from trainguard.telemetry.parquet import _chunk_of
from trainguard.telemetry.seriesids import _combine

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

T0 = 1_731_888_000
STEP = 30
GROUP = 997
"""Rows per row group of the test files."""
LABELS = ("Hostname", "gpu", "driver", "device", "hpc_job")


def _table(seed: int, n_t: int = 80) -> dict[str, list[object]]:
    rng = np.random.default_rng(seed)
    metrics = ["temp", "util", "xid_total", "node_load"]
    rows: dict[str, list[object]] = {k: [] for k in ("timestamp", "metric", "value", *LABELS)}
    for t in range(n_t):
        for node in ("n1", "n2", "n10"):
            job = None if t < n_t // 3 else ("jobA" if t < 2 * n_t // 3 or node != "n2" else "jb")
            for m in metrics:
                gpus = [None] if m == "node_load" else ["0", "1", "2"]
                for g in gpus:
                    if rng.random() < 0.05:
                        continue  # a missing sample
                    jitter = float(rng.choice([0.0, 0.0, 0.0, 7.5, -11.0, 14.9, 15.0]))
                    ts = T0 + t * STEP + jitter
                    value = float(rng.normal()) if rng.random() > 0.05 else float("nan")
                    reps = 2 if rng.random() < 0.05 else 1  # the same sample written twice
                    for _ in range(reps):
                        rows["timestamp"].append(ts)
                        rows["metric"].append(m if rng.random() > 0.01 else None)
                        rows["value"].append(value + rng.normal() if reps > 1 else value)
                        rows["Hostname"].append(node if rng.random() > 0.01 else None)
                        rows["gpu"].append(g)
                        rows["driver"].append("535.1")
                        rows["device"].append("eth0" if m == "node_load" and t % 7 else
                                              ("eth1" if m == "node_load" else None))
                        rows["hpc_job"].append(job)
    order = np.argsort(np.asarray(rows["timestamp"], dtype=float), kind="stable")
    out = {k: [v[i] for i in order] for k, v in rows.items()}
    for i in rng.choice(len(order), 3, replace=False).tolist():  # impossible times
        out["timestamp"][i] = 1e20
    return out


def _reference(table: dict[str, list[object]], chunk_s: int) -> list[Telemetry]:
    """One TelemetryBuilder per chunk, fed series by series in file order (the old reader)."""
    ts = np.asarray(table["timestamp"], dtype=np.float64)
    # A row with an impossible time rides with its record batch (one per row group).
    chunk = np.concatenate([_chunk_of(ts[i:i + GROUP], step_s=STEP, chunk_s=chunk_s)
                            for i in range(0, ts.size, GROUP)])
    per_chunk: dict[int, dict[tuple[object, ...], list[int]]] = defaultdict(dict)
    for i, m in enumerate(table["metric"]):
        if m is None:
            continue
        key = (m, *(table[k][i] for k in LABELS))
        per_chunk[int(chunk[i])].setdefault(key, []).append(i)
    out = []
    for k in sorted(per_chunk):
        b = TelemetryBuilder(step_s=STEP)
        for key, idx in per_chunk[k].items():
            labels = {n: str(v) for n, v in zip(LABELS, key[1:], strict=True) if v}
            b.add_series(str(key[0]), MetricKind.UNKNOWN, labels, ts[idx],
                         np.asarray(table["value"], dtype=np.float64)[idx])
        if b.n_samples:
            out.append(b.build(start_s=k * chunk_s, end_s=(k + 1) * chunk_s))
    return out


def _same(a: Telemetry, b: Telemetry) -> None:
    assert a.times.tolist() == b.times.tolist()
    assert a.step_s == b.step_s
    assert [(m.name, m.kind, m.entities) for m in a.metrics] == \
        [(m.name, m.kind, m.entities) for m in b.metrics]
    for ma, mb in zip(a.metrics, b.metrics, strict=True):
        np.testing.assert_array_equal(ma.values, mb.values, err_msg=ma.name)
    assert a.jobs == b.jobs


@pytest.mark.parametrize(("seed", "chunk_s"), [(0, 600), (1, 900), (2, 1200), (3, 330)])
def test_chunks_equal_the_builders(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                   seed: int, chunk_s: int) -> None:
    table = _table(seed)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(table), path, row_group_size=GROUP)
    with caplog.at_level(logging.WARNING):
        got = list(iter_parquet_chunks([path], chunk_s, step_s=STEP))
        said = [r.getMessage() for r in caplog.records]
        caplog.clear()
        want = _reference(table, chunk_s)
        assert said == [r.getMessage() for r in caplog.records] != []
    assert len(got) == len(want) > 2
    for a, b in zip(got, want, strict=True):
        _same(a, b)
    assert any(a.jobs for a in got)
    assert any("device=" in m.name for a in got for m in a.metrics)  # a splitting label kept
    assert not any("driver" in m.name for a in got for m in a.metrics)  # an attribute dropped


def test_combine_many_columns_beyond_the_lookup_table() -> None:
    rng = np.random.default_rng(5)
    cols = [rng.integers(0, 60, 5000) for _ in range(8)]  # 60**8 combinations: > 2**47
    codes, combos = _combine(cols, [60] * 8)
    assert (combos[codes] == np.column_stack(cols)).all()
    assert len(np.unique(codes)) == len({tuple(r) for r in np.column_stack(cols).tolist()})


@pytest.mark.parametrize("seed", [0, 4])
def test_read_parquet_equals_the_builder_fed_series_by_series(tmp_path: Path, seed: int) -> None:
    table = _table(seed)
    good = [i for i, t in enumerate(table["timestamp"]) if t < 1e19]
    table = {k: [v[i] for i in good] for k, v in table.items()}
    half = len(good) // 2
    paths = [tmp_path / "a.parquet", tmp_path / "b.parquet"]  # the same series in two files
    for path, rows in zip(paths, (slice(0, half), slice(half, None)), strict=True):
        pq.write_table(pa.table({k: v[rows] for k, v in table.items()}), path,
                       row_group_size=GROUP)
    got_builder = TelemetryBuilder(step_s=STEP)
    stats = read_parquet(paths, got_builder)
    want_builder = TelemetryBuilder(step_s=STEP)
    per_key: dict[tuple[object, ...], list[int]] = {}
    for i, m in enumerate(table["metric"]):
        if m is not None:
            per_key.setdefault((m, *(table[k][i] for k in LABELS)), []).append(i)
    ts = np.asarray(table["timestamp"], dtype=np.float64)
    vals = np.asarray(table["value"], dtype=np.float64)
    for key, idx in per_key.items():
        labels = {n: str(v) for n, v in zip(LABELS, key[1:], strict=True) if v}
        want_builder.add_series(str(key[0]), MetricKind.UNKNOWN, labels, ts[idx], vals[idx])
    assert stats.series == len(per_key)
    assert stats.rows == len(good)
    _same(got_builder.build(), want_builder.build())
