"""Input bounds on ingestion (issue #16): timestamps, line and label length, blank-line runs,
gzip expansion, and the size of the aligned matrices."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import numpy as np
import pytest
from bounded import deadline

from trainguard.errors import TelemetryError
from trainguard.telemetry import MemoryLimitError, MetricKind, TelemetryBuilder, read_openmetrics
from trainguard.telemetry import lines as lines_mod
from trainguard.telemetry import openmetrics as om
from trainguard.telemetry.limits import MAX_LABEL_VALUE_CHARS, MAX_LINE_BYTES
from trainguard.telemetry.lines import iter_line_batches

T0 = 1_700_000_010
N1 = {"Hostname": "n1", "gpu": "0"}


def _good(n: int = 4) -> np.ndarray:
    return T0 + 30.0 * np.arange(n)


@pytest.mark.parametrize(("bad", "reason"), [
    (1e20, "outside 2000..2100"),
    (-1e18, "outside 2000..2100"),
    (1e300, "outside 2000..2100"),
    (float("nan"), "not a finite number"),
    (float("inf"), "not a finite number"),
    (float("-inf"), "not a finite number"),
    (T0 * 1000.0, "look like milliseconds"),
    (T0 * 1e9, "look like nanoseconds"),
    (3600.0, "outside 2000..2100"),
])
def test_bad_timestamps_are_dropped_counted_and_named(bad: float, reason: str) -> None:
    b = TelemetryBuilder()
    ts = np.append(_good(), bad)
    with deadline(5):
        b.add_series("temp", MetricKind.GAUGE, N1, ts, np.arange(5.0))
        tel = b.build()
    assert tel.step_s == 30 and tel.times.tolist() == _good().astype(int).tolist()
    assert tel.metrics[0].values.tolist() == [[0.0, 1.0, 2.0, 3.0]]
    stats = b.last_stats
    assert stats.samples_bad_time == 1 and stats.samples == 4
    assert any(w.startswith("1 samples dropped: 1 ") and reason in w for w in stats.warnings)


def test_only_bad_timestamps_is_one_clear_error() -> None:
    b = TelemetryBuilder()
    b.add_series("temp", MetricKind.GAUGE, N1, _good() * 1000, np.ones(4))
    with pytest.raises(TelemetryError, match=r"no samples.*4 .*look like milliseconds"):
        b.build()


def test_time_range_can_be_widened_for_synthetic_data() -> None:
    b = TelemetryBuilder(time_range_s=None)
    b.add_series("temp", MetricKind.GAUGE, N1, np.array([0.0, 30.0, float("nan")]), np.ones(3))
    assert b.build().times.tolist() == [0, 30]
    assert b.last_stats.samples_bad_time == 1  # NaN is never a time


def test_aligned_matrices_are_estimated_before_allocating() -> None:
    # One sample per series gives no spacing: step 1 s over a day is 86,400 columns per row.
    b = TelemetryBuilder(max_memory_bytes=64 << 20)
    for i in range(200):
        b.add_series("temp", MetricKind.GAUGE, {"Hostname": f"h{i}", "gpu": "0"},
                     np.array([T0 + 431.0 * i]), np.ones(1))
    with deadline(10), pytest.raises(
            MemoryLimitError, match=r"200 series on 85,770 time steps \(1\.0 days at 1 s\).*"
            r"coarser --step.*--max-memory"):
        b.build()
    b.step_s = 60  # what --step 60 does
    tel = b.build()
    assert (tel.step_s, tel.times.size, tel.metrics[0].values.shape) == (60, 1430, (200, 1430))


def _write(tmp_path: Path, data: bytes, name: str = "m.om") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _line(t: int, value: int = 40, extra: str = "") -> bytes:
    return f'DCGM_FI_DEV_GPU_TEMP{{Hostname="n1",gpu="0"{extra}}} {value} {t}\n'.encode()


def test_long_label_value_is_malformed_not_memory(tmp_path: Path) -> None:
    big = ',x="' + "a" * (MAX_LABEL_VALUE_CHARS + 1) + '"'
    path = _write(tmp_path, _line(T0) + _line(T0 + 30, extra=big) + _line(T0 + 60))
    stats = read_openmetrics([path], TelemetryBuilder())
    assert (stats.samples, stats.malformed, stats.lines) == (2, 1, 3)
    assert stats.examples[0].startswith(f"{path}:2: label 'x' has a value longer than 4096")


@pytest.mark.parametrize("chunk", [7, 1000, 4 << 20])
def test_over_long_line_is_skipped_as_it_streams(tmp_path: Path, chunk: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(om, "_CHUNK", chunk)
    huge = _line(T0 + 30, extra=',x="' + "a" * (2 * MAX_LINE_BYTES) + '"')
    path = _write(tmp_path, _line(T0) + huge + _line(T0 + 60) + huge.rstrip(b"\n"))
    stats = read_openmetrics([path], TelemetryBuilder())
    assert (stats.samples, stats.malformed, stats.lines) == (2, 2, 4)
    assert [e.split(": ", 1) for e in stats.examples] == [
        [f"{path}:2", f"line longer than {MAX_LINE_BYTES} bytes"],
        [f"{path}:4", f"line longer than {MAX_LINE_BYTES} bytes"]]


@pytest.mark.parametrize("few_blanks", [0, 1024])  # collapse every run / leave them to parse
@pytest.mark.parametrize("chunk", [3, 64, 4 << 20])
def test_blank_line_runs_keep_true_line_numbers(tmp_path: Path, chunk: int, few_blanks: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(om, "_CHUNK", chunk)
    monkeypatch.setattr(lines_mod, "_FEW_BLANKS", few_blanks)
    text = _line(T0) + b"\n" * 5 + b"bad\n" + b"\n\n" + _line(T0 + 30) + b"\n" + b"bad2"
    stats = read_openmetrics([_write(tmp_path, text)], TelemetryBuilder())
    assert (stats.samples, stats.malformed, stats.lines) == (2, 2, 12)
    assert [e.split(": ")[0].rsplit(":", 1)[1] for e in stats.examples] == ["7", "12"]


def test_many_empty_lines_are_cheap(tmp_path: Path) -> None:
    # 64 MiB of newlines: a Python loop per line took over a minute (1 GB: many minutes).
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    blob = b"".join([comp.compress(b"\n" * (1 << 20)) for _ in range(63)] + [comp.flush()])
    path = _write(tmp_path, blob + _gzip(_line(T0) + _line(T0 + 30)), "blank.om.gz")
    with deadline(15):
        stats = read_openmetrics([path], TelemetryBuilder())
    assert (stats.samples, stats.malformed, stats.lines) == (2, 0, 63 * (1 << 20) + 2)


def _gzip(data: bytes) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    return comp.compress(data) + comp.flush()


def test_gzip_bomb_stops_at_the_expansion_limit(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(om, "GZIP_RATIO_FLOOR_BYTES", 1 << 20)
    path = _write(tmp_path, _gzip(_line(T0) * 200_000), "bomb.om.gz")  # ~11 MB, ~40 KB gz
    with deadline(10), pytest.raises(TelemetryError,
                                     match=r"bomb\.om\.gz: decompresses to more than .*250x"):
        read_openmetrics([path], TelemetryBuilder())


def test_line_batches_map_collapsed_lines_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines_mod, "_FEW_BLANKS", 0)
    data = b"a\n\n\nb\nc\n\n\n\n\nd\n\ne"
    batches = list(iter_line_batches(io.BytesIO(data), "f", 100))
    got = [(line, b.lineno(i)) for b in batches for i, line in enumerate(b.lines)]
    assert got == [(b"a", 1), (b"b", 4), (b"c", 5), (b"d", 10), (b"e", 12)]
    assert sum(b.n_lines for b in batches) == 12


@pytest.mark.parametrize("bad", [float("nan"), 1e20, -1e18, 1e300])
def test_parquet_with_an_impossible_time(tmp_path: Path, bad: float) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from trainguard.telemetry import iter_parquet_chunks, load_sources

    ts = [T0, T0 + 30.0, bad, T0 + 60.0]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"timestamp": ts, "metric": ["temp"] * 4, "value": [1.0, 2, 3, 4],
                             "Hostname": ["n1"] * 4, "gpu": ["0"] * 4}), path)
    with deadline(10):
        tel, warnings = load_sources([path])
        chunks = list(iter_parquet_chunks([path], 3600))
    assert tel.metrics[0].values.tolist() == [[1.0, 2.0, 4.0]]
    assert any(w.startswith("1 samples dropped") for w in warnings), warnings
    assert [c.metrics[0].values.tolist() for c in chunks] == [[[1.0, 2.0, 4.0]]]
    # milliseconds written as plain numbers are named as such
    pq.write_table(pa.table({"timestamp": [t * 1000 for t in ts], "metric": ["temp"] * 4,
                             "value": [1.0, 2, 3, 4], "Hostname": ["n1"] * 4}), path)
    with pytest.raises(TelemetryError, match=r"4 samples dropped.*look like milliseconds"):
        load_sources([path])
