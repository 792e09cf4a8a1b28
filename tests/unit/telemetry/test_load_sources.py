"""load_sources dispatch, warnings, and the package's exports."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import trainguard.telemetry as telemetry
from trainguard.errors import TelemetryError
from trainguard.telemetry import (
    Entity,
    MetricKind,
    MetricSeries,
    Telemetry,
    load_sources,
    to_rates,
    write_parquet,
)

T0 = 1_700_000_010


def _om(node: str, start: int = T0, n: int = 4) -> str:
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    lines += [f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",Hostname="{node}",hpc_job="7"}} {40 + i} '
              f"{(start + 30 * i) * 1000}" for i in range(n)]  # Prometheus text: ms
    return "\n".join(lines) + "\n"


def test_directory_with_text_gzip_and_parquet(tmp_path: Path) -> None:
    import numpy as np

    (tmp_path / "sub").mkdir()
    (tmp_path / "a.prom").write_text(_om("n1") + "garbage here\n" + 'orphan{gpu="1"} 1 1\n')
    (tmp_path / "sub" / "b.om.gz").write_bytes(gzip.compress(_om("n2").encode()))
    pq_tel = Telemetry(np.arange(4, dtype=np.int64) * 30 + T0, 30, (
        MetricSeries("pq_metric", MetricKind.GAUGE, (Entity("n3", "0"),),
                     np.arange(4, dtype=np.float64)[None, :]),))
    write_parquet(pq_tel, tmp_path / "sub" / "c.parquet")
    (tmp_path / "README.md").write_text("ignored")
    seen: list[tuple[int, int]] = []
    tel, warnings = load_sources([tmp_path], progress=lambda d, t: seen.append((d, t)))
    assert tel.step_s == 30 and tel.times[0] == T0
    assert tel.nodes == ("n1", "n2", "n3")
    temp = tel.metric("DCGM_FI_DEV_GPU_TEMP")
    assert temp is not None and temp.values.tolist() == [[40, 41, 42, 43]] * 2
    assert tel.metric("pq_metric") is not None
    assert tel.jobs["n1"] == ("7",) * 4
    assert any("1 malformed" in w and "a.prom:6" in w for w in warnings), warnings
    assert any("orphan" in w and "no node label" in w for w in warnings), warnings
    assert seen[-1][0] == seen[-1][1]


def test_single_files_and_content_sniffing(tmp_path: Path) -> None:
    (tmp_path / "x.dump").write_text(_om("n1"))
    import numpy as np

    tel = Telemetry(np.array([T0], dtype=np.int64), 30, (
        MetricSeries("m", MetricKind.GAUGE, (Entity("n9"),), np.ones((1, 1))),))
    write_parquet(tel, tmp_path / "noext")
    got, warnings = load_sources([tmp_path / "x.dump", str(tmp_path / "noext")], step_s=30)
    assert got.nodes == ("n1", "n9") and warnings == []


def test_missing_and_empty_sources(tmp_path: Path) -> None:
    with pytest.raises(TelemetryError, match=r"not found: .*nope\.om"):
        load_sources([tmp_path / "nope.om"])
    with pytest.raises(TelemetryError, match="no metrics files"):
        load_sources([tmp_path])
    (tmp_path / "empty.om").write_text("# EOF\n")
    with pytest.raises(TelemetryError, match="no samples"):
        load_sources([tmp_path / "empty.om"])
    with pytest.raises(TelemetryError, match="no telemetry sources"):
        load_sources([])


def test_rates_after_loading(tmp_path: Path) -> None:
    text = "".join(f'x_total{{node="a"}} {v} {T0 + 10 * i}\n'
                   for i, v in enumerate([0, 10, 20, 5]))
    (tmp_path / "c.om").write_text(text)
    tel, _ = load_sources([tmp_path / "c.om"])
    (r,) = to_rates(tel).metrics
    assert r.kind is MetricKind.RATE and r.values.tolist()[0][1:] == [1.0, 1.0, 0.5]


def test_exports_import() -> None:
    assert len(set(telemetry.__all__)) == len(telemetry.__all__)
    for name in telemetry.__all__:
        assert hasattr(telemetry, name), name
