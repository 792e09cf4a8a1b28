"""OpenMetrics / Prometheus text parsing: edge cases, malformed lines, gzip, chunking."""

from __future__ import annotations

import gzip
import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from trainguard.errors import ConfigError, TelemetryError
from trainguard.telemetry import (
    Entity,
    MetricKind,
    TelemetryBuilder,
    expand_paths,
    parse_series_text,
    read_openmetrics,
)
from trainguard.telemetry import openmetrics as om

T0 = 1_700_000_010  # a multiple of 10 and 30

_GPU = 'gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H100 80GB HBM3"'
_REQ = 'instance="n2:9100",path="a\\"b\\\\c\\nd",q="x,y}{z"'
OM_TEXT = f"""\
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
# UNIT DCGM_FI_DEV_GPU_TEMP celsius
DCGM_FI_DEV_GPU_TEMP{{{_GPU},Hostname="n1"}} 41 {T0}
DCGM_FI_DEV_GPU_TEMP{{{_GPU},Hostname="n1"}} 42.5 {T0 + 10}
DCGM_FI_DEV_GPU_TEMP{{Hostname="n1",{_GPU}}} 43 {T0 + 20}
# TYPE node_reqs counter
node_reqs_total{{{_REQ}}} 5 {T0} # {{trace_id="abc"}} 1.0 {T0}.5
node_reqs_total{{{_REQ}}} 7 {T0 + 10}
node_reqs_created{{{_REQ}}} {T0 - 100} {T0}
# TYPE special gauge
special{{instance="n3:1"}} NaN {T0}
special{{instance="n3:1"}} +Inf {T0 + 10}
special{{instance="n3:1"}} -Inf {T0 + 20}
# EOF
"""


def _read(tmp_path: Path, text: str | bytes, name: str = "m.om", **kw: object):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    b = TelemetryBuilder(step_s=10)
    stats = read_openmetrics([path], b, **kw)  # type: ignore[arg-type]
    return stats, b


def test_openmetrics_features(tmp_path: Path) -> None:
    stats, b = _read(tmp_path, OM_TEXT)
    assert stats.malformed == 0, stats.examples
    assert (stats.samples, stats.series, stats.skipped_created) == (8, 3, 1)
    assert stats.lines == OM_TEXT.count("\n")
    tel = b.build()
    assert tel.times.tolist() == [T0, T0 + 10, T0 + 20]

    temp = tel.metric("DCGM_FI_DEV_GPU_TEMP")
    assert temp is not None and temp.kind is MetricKind.GAUGE
    assert temp.entities == (Entity("n1", "0"),)
    assert temp.values.tolist() == [[41.0, 42.5, 43.0]]  # label order does not split series

    reqs = [m for m in tel.metrics if m.name.startswith("node_reqs_total")]
    assert len(reqs) == 1 and reqs[0].kind is MetricKind.COUNTER
    # single-valued labels are entity attributes, so dropped from the key
    assert reqs[0].name == "node_reqs_total"
    assert reqs[0].entities == (Entity("n2"),)
    assert reqs[0].values[0, :2].tolist() == [5.0, 7.0]  # exemplar ignored

    special = tel.metric("special")
    assert special is not None
    v = special.values[0]
    assert math.isnan(v[0]) and v[1] == math.inf and v[2] == -math.inf


def test_label_escapes_reach_the_builder(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []

    class Spy(TelemetryBuilder):
        def add_series(self, name, kind, labels, ts, values):  # type: ignore[no-untyped-def]
            seen.append(dict(labels))
            super().add_series(name, kind, labels, ts, values)

    read_openmetrics([_write(tmp_path, OM_TEXT)], Spy())
    req = next(s for s in seen if "path" in s)
    assert req["path"] == 'a"b\\c\nd'
    assert req["q"] == "x,y}{z"


def _write(tmp_path: Path, text: str, name: str = "m.om") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(("line", "reason"), [
    ('up{instance="a:1"} abc 1700000000', "invalid value"),
    ('up{instance="a:1"} 1 17e', "invalid timestamp"),
    ('up{instance="a:1" 1 1700000000', "cannot parse labels"),
    ('up{instance="a:1",instance="b"} 1 1700000000', "duplicate label"),
    ('up{instance="a:1"} 1 1700000000 extra', "unexpected text"),
    ("{} 1 1700000000", "metric name"),
    ("# TYPE up", "without a type"),
])
def test_malformed_lines_are_counted_with_file_and_line(tmp_path: Path, line: str,
                                                        reason: str) -> None:
    good = 'up{instance="a:1"} 1 1700000000\n'
    path = _write(tmp_path, good + line + "\n" + good.replace("1700000000", "1700000010"))
    b = TelemetryBuilder()
    stats = read_openmetrics([path], b)
    assert stats.malformed == 1
    assert stats.samples == 2
    assert stats.examples[0].startswith(f"{path}:2: ")
    assert reason in stats.examples[0]
    assert reason in stats.warnings[0]


def test_only_first_ten_examples_kept(tmp_path: Path) -> None:
    text = "".join(f"bad line {i}\n" for i in range(25)) + 'up{node="a"} 1 1700000000\n'
    stats, _ = _read(tmp_path, text)
    assert stats.malformed == 25 and len(stats.examples) == 10
    assert stats.examples[-1].startswith(f"{tmp_path / 'm.om'}:10:")


def test_cached_series_with_bad_value_is_still_malformed(tmp_path: Path) -> None:
    text = 'up{node="a"} 1 1700000000\nup{node="a"} x 1700000010\nup{node="a"} 3 1700000020\n'
    stats, b = _read(tmp_path, text)
    assert (stats.samples, stats.malformed) == (2, 1)
    assert ":2: invalid value" in stats.examples[0]
    vals = b.build().metrics[0].values[0]
    assert vals[0] == 1.0 and np.isnan(vals[1]) and vals[2] == 3.0


def test_gzip_detected_by_magic_bytes_and_suffix(tmp_path: Path) -> None:
    plain_stats, _ = _read(tmp_path, OM_TEXT, "plain.om")
    data = gzip.compress(OM_TEXT.encode())
    for name in ("disguised.om", "real.om.gz"):
        stats, b = _read(tmp_path, data, name)
        assert (stats.samples, stats.series, stats.malformed) == (
            plain_stats.samples, plain_stats.series, 0)
        assert b.build().metric("DCGM_FI_DEV_GPU_TEMP") is not None


def test_corrupt_gzip_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.om.gz"
    path.write_bytes(gzip.compress(OM_TEXT.encode())[:40])
    with pytest.raises(TelemetryError, match=r"cannot read .*bad\.om\.gz"):
        read_openmetrics([path], TelemetryBuilder())


def test_tiny_chunks_give_identical_results(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    text = OM_TEXT + "broken\n" + "".join(
        f'g{{node="n{i % 7}"}} {i} {T0 + 10 * (i // 7)}\n' for i in range(300))
    ref_stats, ref_b = _read(tmp_path, text, "a.om")
    monkeypatch.setattr(om, "_CHUNK", 7)
    stats, b = _read(tmp_path, text, "b.om")
    assert (stats.lines, stats.samples, stats.series, stats.malformed) == (
        ref_stats.lines, ref_stats.samples, ref_stats.series, ref_stats.malformed)
    assert stats.examples[0].split(":", 1)[1] == ref_stats.examples[0].split(":", 1)[1]
    a, c = ref_b.build(), b.build()
    for m1, m2 in zip(a.metrics, c.metrics, strict=True):
        np.testing.assert_array_equal(m1.values, m2.values)


def test_no_trailing_newline_and_crlf(tmp_path: Path) -> None:
    text = 'up{node="a"} 1 1700000000\r\nup{node="a"} 2 1700000010'
    stats, b = _read(tmp_path, text)
    assert (stats.samples, stats.malformed) == (2, 0)
    assert b.build().metrics[0].values.tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize(("unit", "ts", "expect"), [
    ("auto", "1700000000000", 1_700_000_000),
    ("auto", "1700000000", 1_700_000_000),
    ("ms", "1700000000000", 1_700_000_000),
    ("s", "1700000000.000", 1_700_000_000),
])
def test_timestamp_units(tmp_path: Path, unit: str, ts: str, expect: int) -> None:
    _, b = _read(tmp_path, f'up{{node="a"}} 1 {ts}\n', timestamp_unit=unit)
    assert b.build().times.tolist() == [expect]


def test_bad_timestamp_unit_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="timestamp_unit"):
        read_openmetrics([_write(tmp_path, "")], TelemetryBuilder(), timestamp_unit="us")  # type: ignore[arg-type]


def test_unicode_and_quoted_metric_names(tmp_path: Path) -> None:
    text = ('{"my.metric", node="ñode"} 1 1700000000\n'
            'temp{node="n1",model="H100 — SXM"} 2 1700000000\n')
    stats, b = _read(tmp_path, text)
    assert stats.malformed == 0, stats.examples
    tel = b.build()
    assert {m.name for m in tel.metrics} == {"my.metric", "temp"}
    assert tel.nodes == ("n1", "ñode")


def test_directory_expands_sorted_one_level_deep(tmp_path: Path) -> None:
    (tmp_path / "metrics").mkdir()
    for rel in ("b.om", "a.prom", "metrics/c.om.gz", "metrics/d.txt", "notes.md", "x.parquet"):
        (tmp_path / rel).write_text("")
    got = [p.relative_to(tmp_path).as_posix() for p in expand_paths([tmp_path])]
    assert got == ["a.prom", "b.om", "metrics/c.om.gz", "metrics/d.txt"]
    with pytest.raises(TelemetryError, match=r"not found: .*missing\.om"):
        expand_paths([tmp_path / "missing.om"])


def test_progress_reports_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(om, "_CHUNK", 64)
    path = _write(tmp_path, OM_TEXT)
    calls: list[tuple[int, int]] = []
    read_openmetrics([path], TelemetryBuilder(), progress=lambda d, t: calls.append((d, t)))
    size = path.stat().st_size
    assert len(calls) > 3
    assert calls[-1] == (size, size)
    assert all(d1 <= d2 for (d1, _), (d2, _) in itertools.pairwise(calls))


def test_parse_series_text_round_trip() -> None:
    assert parse_series_text('x{a="1\\"2",b="c\\\\"}') == ("x", {"a": '1"2', "b": "c\\"})
    assert parse_series_text("plain") == ("plain", {})
    with pytest.raises(TelemetryError, match="cannot parse series"):
        parse_series_text('x{a="1"} trailing')
