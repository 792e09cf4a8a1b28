"""The Prometheus fixture: backfilled OpenMetrics comes back exactly through query_range."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_server import (
    PrometheusStartError,
    StartPrometheus,
    prometheus_factory_fixture,  # noqa: F401 - registers the prometheus_factory fixture
    start_prometheus,
)

pytestmark = pytest.mark.integration

T0 = 1_700_006_400  # a multiple of 2 h: every file below is one aligned block window
STEP = 60
NODES, GPUS = ("n1", "n2"), ("0", "1")


def temp(node: int, gpu: int, i: int) -> float:
    return 40.0 + 10 * node + gpu + (i % 7) * 0.25


def errors(node: int, gpu: int, i: int) -> float:
    return float((i // 30) * (node + 1) + gpu)  # steps up every 30 min


def write_window(path: Path, start: int, n: int) -> Path:
    """One 2-h OpenMetrics file: grouped by family, then series, timestamps in seconds."""
    lines = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    for a, node in enumerate(NODES):
        for b, gpu in enumerate(GPUS):
            for i in range(start, start + n):
                lines.append(f'DCGM_FI_DEV_GPU_TEMP{{Hostname="{node}",gpu="{gpu}"}} '
                             f"{temp(a, b, i)} {T0 + i * STEP}")
    lines.append("# TYPE trainguard_test_errors counter")
    for a, node in enumerate(NODES):
        for b, gpu in enumerate(GPUS):
            for i in range(start, start + n):
                lines.append(f'trainguard_test_errors_total{{Hostname="{node}",gpu="{gpu}"}} '
                             f"{errors(a, b, i)} {T0 + i * STEP}")
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_backfilled_values_come_back_exactly(tmp_path: Path,
                                             prometheus_factory: StartPrometheus) -> None:
    per_file = 2 * 3600 // STEP
    files = [write_window(tmp_path / f"w{k}.om", k * per_file, per_file) for k in range(2)]
    server = prometheus_factory(files)
    assert server.running
    n = 2 * per_file  # 4 h
    for metric, fn in (("DCGM_FI_DEV_GPU_TEMP", temp), ("trainguard_test_errors_total", errors)):
        data = server.api("query_range", {"query": metric, "start": str(T0),
                                          "end": str(T0 + (n - 1) * STEP), "step": str(STEP)})
        assert isinstance(data, dict)
        got = {(r["metric"]["Hostname"], r["metric"]["gpu"]): r["values"]
               for r in data["result"]}
        assert sorted(got) == [(node, gpu) for node in NODES for gpu in GPUS]
        for (node, gpu), values in got.items():
            a, b = NODES.index(node), GPUS.index(gpu)
            assert [(int(t), float(v)) for t, v in values] == [
                (T0 + i * STEP, fn(a, b, i)) for i in range(n)]


def test_stop_ends_the_process(tmp_path: Path, prometheus_factory: StartPrometheus) -> None:
    server = prometheus_factory([write_window(tmp_path / "w.om", 0, 10)])
    server.stop()
    assert not server.running
    with pytest.raises(ProcessLookupError):
        os.kill(server.pid, 0)
    server.stop()  # idempotent


def test_bad_openmetrics_reports_promtool_output(tmp_path: Path,
                                                 prometheus_factory: StartPrometheus) -> None:
    bad = tmp_path / "bad.om"
    bad.write_text("this is not openmetrics\n")  # no # EOF either
    with pytest.raises(PrometheusStartError, match="promtool backfill"):
        start_prometheus(tmp_path / "srv", [bad])
