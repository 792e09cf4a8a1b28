"""Saved scrapes without timestamps: a clear message by default, `--at` / mtime as an opt-in."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from trainguard.errors import ConfigError, TelemetryError
from trainguard.telemetry import (
    MissingTimestamps,
    SnapshotTime,
    TelemetryBuilder,
    load_sources,
    parse_at,
    read_openmetrics,
    snapshot_times,
)

T0 = 1_794_970_800  # 2026-11-18 03:00:00 UTC, a multiple of 30

# As `curl gpu-node-07:9400/metrics` saves it: no timestamps, label values with spaces.
SCRAPE = """\
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",Hostname="n7"} 41
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3",Hostname="n7"} 43
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",Hostname="n7"} 300.5
"""


def _scrape(path: Path, temp: int = 41, *, gz: bool = False) -> Path:
    text = SCRAPE.replace("} 41\n", f"}} {temp}\n")
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_a_scrape_without_timestamps_says_what_is_missing(tmp_path: Path, gz: bool) -> None:
    path = _scrape(tmp_path / ("n7.prom.gz" if gz else "n7.prom"), gz=gz)
    with pytest.raises(MissingTimestamps) as info:
        load_sources([path])
    msg = str(info.value)
    assert msg.startswith(f"{path}: 3 samples have no timestamp")
    for hint in ("--prometheus", "--at TIME", "--at mtime", "/federate", "time series"):
        assert hint in msg
    assert "no samples" not in msg
    assert isinstance(info.value, TelemetryError)  # exit 2 at the CLI


def test_several_untimestamped_files_are_named_once(tmp_path: Path) -> None:
    files = [_scrape(tmp_path / f"s{i}.prom") for i in range(3)]
    with pytest.raises(MissingTimestamps, match=r"^3 files \(e\.g\. .*s0\.prom\): 9 samples"):
        read_openmetrics(files, TelemetryBuilder())


def test_at_time_stamps_every_sample_of_the_file(tmp_path: Path) -> None:
    path = _scrape(tmp_path / "n7.prom")
    tel, warnings = load_sources([path], stamp=snapshot_times([path], [SnapshotTime(T0)]))
    assert warnings == []
    assert tel.times.tolist() == [T0]
    temp = tel.metric("DCGM_FI_DEV_GPU_TEMP")
    assert temp is not None
    assert temp.values[:, 0].tolist() == [41.0, 43.0]


def test_mtimes_of_several_scrapes_form_a_series(tmp_path: Path) -> None:
    files = []
    for i in range(4):
        f = _scrape(tmp_path / f"scrape-{i}.prom", temp=40 + i)
        os.utime(f, (T0 + 30 * i, T0 + 30 * i))
        files.append(f)
    tel, _ = load_sources([tmp_path], stamp=snapshot_times([tmp_path], [parse_at("mtime")]))
    assert tel.step_s == 30
    assert tel.times.tolist() == [T0 + 30 * i for i in range(4)]
    temp = tel.metric("DCGM_FI_DEV_GPU_TEMP")
    assert temp is not None
    assert temp.values[0].tolist() == [40.0, 41.0, 42.0, 43.0]


def test_one_at_per_source_in_order(tmp_path: Path) -> None:
    a = _scrape(tmp_path / "a.prom", temp=50)
    sub = tmp_path / "later"
    sub.mkdir()
    _scrape(sub / "b.prom", temp=60)
    stamp = snapshot_times([a, sub], [parse_at(str(T0)), parse_at("2026-11-18T03:01:00Z")])
    assert stamp is not None
    assert (stamp(a), stamp(sub / "b.prom")) == (T0, T0 + 60)
    tel, _ = load_sources([a, sub], stamp=stamp)
    temp = tel.metric("DCGM_FI_DEV_GPU_TEMP")
    assert temp is not None
    assert tel.times.tolist() == [T0, T0 + 60]
    assert temp.values[0].tolist() == [50.0, 60.0]


def test_at_count_must_match_the_sources(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"one value for all sources or one per source "
                       r"\(2 sources, 3 values\)"):
        snapshot_times(["a", "b"], [SnapshotTime(1.0)] * 3)
    assert snapshot_times(["a"], []) is None


@pytest.mark.parametrize(("text", "expect"), [
    ("mtime", None), (" MTIME ", None), (str(T0), float(T0)),
    ("2026-11-18T03:00:00Z", float(T0)), ("2026-11-18 03:00:00", float(T0))])
def test_parse_at(text: str, expect: float | None) -> None:
    assert parse_at(text).at_s == expect


def test_parse_at_rejects_other_words() -> None:
    with pytest.raises(ConfigError, match=r"--at .*'yesterday' is not unix seconds or ISO-8601"):
        parse_at("yesterday")


def test_samples_with_a_timestamp_keep_it_when_at_is_given(tmp_path: Path) -> None:
    path = tmp_path / "mixed.prom"
    path.write_text(f'temp{{Hostname="n1"}} 1 {T0 - 60}\ntemp{{Hostname="n1"}} 2\n')
    b = TelemetryBuilder()
    stats = read_openmetrics([path], b, stamp=lambda _p: float(T0))
    assert (stats.samples, stats.stamped, stats.untimestamped) == (2, 1, 0)
    assert b.build().metric("temp").values[0].tolist() == [1.0, 2.0]  # type: ignore[union-attr]


def test_a_sample_without_labels_or_timestamp_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "bare.prom"
    path.write_text("up 1\n")
    with pytest.raises(MissingTimestamps, match="1 samples have no timestamp"):
        read_openmetrics([path], TelemetryBuilder())


def test_stamp_is_seconds_whatever_the_timestamp_unit(tmp_path: Path) -> None:
    path = _scrape(tmp_path / "n7.prom")
    b = TelemetryBuilder()
    read_openmetrics([path], b, timestamp_unit="ms", stamp=lambda _p: float(T0))
    assert b.build().times.tolist() == [T0]


def test_untimestamped_samples_beside_a_series_are_warned_about(tmp_path: Path) -> None:
    series = tmp_path / "dump.om"
    series.write_text(f'temp{{Hostname="n1"}} 1 {T0}\ntemp{{Hostname="n1"}} 2 {T0 + 30}\n')
    scrape = _scrape(tmp_path / "scrape.prom")
    tel, warnings = load_sources([series, scrape])
    assert tel.times.tolist() == [T0, T0 + 30]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"3 samples without a timestamp skipped in 1 files "
                                  f"(e.g. {scrape})")
    assert "--at" in warnings[0]


def test_mtime_of_a_vanished_file_is_a_telemetry_error(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match="--at mtime: cannot stat"):
        SnapshotTime(None).time_for(tmp_path / "gone.prom")


def test_a_scrape_beside_parquet_history_is_a_warning(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    import numpy as np

    from trainguard.telemetry import MetricKind, write_parquet

    b = TelemetryBuilder()
    ts = np.array([T0, T0 + 30.0])
    b.add_series("temp", MetricKind.GAUGE, {"Hostname": "n1"}, ts, ts * 0 + 40)
    history = tmp_path / "history.parquet"
    write_parquet(b.build(), history)
    scrape = _scrape(tmp_path / "scrape.prom")
    tel, warnings = load_sources([history, scrape])
    assert tel.times.tolist() == [T0, T0 + 30]
    assert [w for w in warnings if "without a timestamp" in w]
    assert not [w for w in warnings if "no samples" in w]


def _matrix(tel: object) -> dict[str, list[list[float]]]:
    return {m.name: m.values.tolist() for m in tel.metrics}  # type: ignore[attr-defined]


@pytest.mark.parametrize("unit", ["auto", "s", "ms"])
def test_stamped_scrapes_read_as_the_same_samples_with_timestamps(tmp_path: Path,
                                                                  unit: str) -> None:
    # The stamped lines after the first file take the parser's fast path (series cached by
    # the text before the value): the result must equal that of timestamped lines.
    scale = 1000 if unit == "ms" else 1
    files, stamped = [], {}
    lines = [line for line in SCRAPE.splitlines() if not line.startswith("#")]
    with_ts = tmp_path / "with-ts.om"
    text = ""
    for k in range(5):
        f = tmp_path / f"s{k}.prom"
        body = "".join(f"{line[:line.rfind(' ')]} {k * 10 + i}\n" for i, line in enumerate(lines))
        f.write_text(body)
        files.append(f)
        stamped[f] = float(T0 + 30 * k)
        text += "".join(f"{row} {(T0 + 30 * k) * scale}\n" for row in body.splitlines())
    with_ts.write_text(text)
    a, b = TelemetryBuilder(), TelemetryBuilder()
    stats = read_openmetrics(files, a, timestamp_unit=unit,  # type: ignore[arg-type]
                             stamp=stamped.__getitem__)
    read_openmetrics([with_ts], b, timestamp_unit=unit)  # type: ignore[arg-type]
    assert (stats.samples, stats.stamped, stats.malformed) == (15, 15, 0)
    ta, tb = a.build(), b.build()
    assert ta.times.tolist() == tb.times.tolist() == [T0 + 30 * k for k in range(5)]
    assert _matrix(ta) == _matrix(tb)


def test_a_bad_value_in_a_stamped_scrape_is_malformed(tmp_path: Path) -> None:
    first, second = _scrape(tmp_path / "a.prom"), tmp_path / "b.prom"
    second.write_text(SCRAPE.replace("} 41\n", "} x41\n"))
    stamps = {first: float(T0), second: float(T0 + 30)}
    b = TelemetryBuilder()
    stats = read_openmetrics([first, second], b, stamp=stamps.__getitem__)
    assert (stats.samples, stats.stamped, stats.malformed) == (5, 5, 1)
    assert f"{second}:3: invalid value" in stats.examples[0]
