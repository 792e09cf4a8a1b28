"""`detect`/`backtest` on real exporter quirks: saved scrapes without timestamps (`--at`),
Kubernetes node labels (`--node-label`) and syslog kernel logs without a year (`--year`)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner, Result

from trainguard.cli.main import app

runner = CliRunner()
T0 = 1_794_970_800  # 2026-11-18 03:00:00 UTC
XID_AT = 15  # the scrape from which GPU 0 reports XID 79


def invoke(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def _scrape(i: int) -> str:
    """What `curl node:9400/metrics` saves on Kubernetes at scrape i: no timestamps, Hostname =
    the exporter pod (restarted after scrape 9), the node in `k8s_node_name`."""
    pod = f"dcgm-exporter-{'x7k2p' if i < 10 else 'q9w4z'}"
    who = f'Hostname="{pod}",k8s_node_name="gpu-node-07",modelName="NVIDIA H100 80GB HBM3"'
    return (
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        + "".join(f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",UUID="GPU-{g}",{who}}} {40 + g}\n'
                  for g in range(2))
        + "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        + "".join(f'DCGM_FI_DEV_XID_ERRORS{{gpu="{g}",UUID="GPU-{g}",{who}}} '
                  f"{79 if g == 0 and i >= XID_AT else 0}\n" for g in range(2)))


def _scrapes(tmp_path: Path, n: int = 20) -> Path:
    d = tmp_path / "scrapes"
    d.mkdir()
    for i in range(n):
        f = d / f"scrape-{i:02d}.prom"
        f.write_text(_scrape(i))
        os.utime(f, (T0 + 30 * i, T0 + 30 * i))
    return d


def test_a_saved_scrape_says_timestamps_are_missing_and_exits_2(tmp_path: Path) -> None:
    d = _scrapes(tmp_path, 1)
    result = invoke("detect", str(d))
    assert result.exit_code == 2
    line = _error_line(result)
    assert "samples have no timestamp" in line
    assert "--prometheus" in line and "--at TIME" in line and "--at mtime" in line
    assert "no samples" not in line


def test_at_mtime_turns_saved_scrapes_into_a_series(tmp_path: Path) -> None:
    d = _scrapes(tmp_path)
    result = invoke("detect", str(d), "--at", "mtime", "--node-label", "k8s_node_name",
                    "--json")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    hard = [r for r in rows if r["kind"] == "hard"]
    assert [(r["node"], r["start"]) for r in hard] == [("gpu-node-07", T0 + 30 * XID_AT)]


def test_without_node_label_the_exporter_pod_is_taken_for_the_node(tmp_path: Path) -> None:
    d = _scrapes(tmp_path)
    result = invoke("detect", str(d), "--at", "mtime", "--json")
    assert result.exit_code == 0, result.output
    nodes = {json.loads(line)["node"] for line in result.stdout.splitlines()}
    assert nodes == {"dcgm-exporter-q9w4z"}  # why --node-label exists


def test_one_snapshot_is_read_with_a_warning(tmp_path: Path) -> None:
    d = _scrapes(tmp_path, 1)
    result = invoke("detect", str(d), "--at", "2026-11-18T03:00:00Z", "--json")
    assert result.exit_code == 0, result.output
    assert "one point in time (a single snapshot)" in result.stderr


def test_at_with_prometheus_or_a_bad_value_exits_2(tmp_path: Path) -> None:
    d = _scrapes(tmp_path, 1)
    line = _error_line(invoke("detect", str(d), "--at", "noon"))
    assert "--at" in line and "'noon'" in line
    line = _error_line(invoke("detect", str(d), str(d), "--at", "1", "--at", "2", "--at", "3"))
    assert "one value for all sources or one per source (2 sources, 3 values)" in line
    line = _error_line(invoke("detect", "--prometheus", "http://127.0.0.1:9", "--start", "0",
                              "--at", "mtime"))
    assert "--at stamps files" in line


def test_a_node_label_no_series_has_exits_2_naming_the_labels(tmp_path: Path) -> None:
    d = _scrapes(tmp_path, 2)
    result = invoke("detect", str(d), "--at", "mtime", "--node-label", "kubernetes_node")
    assert result.exit_code == 2
    line = _error_line(result)
    assert "no series carries the node label kubernetes_node" in line
    assert "Hostname, UUID, gpu, k8s_node_name, modelName" in line


# --- backtest --kernel-logs --year ----------------------------------------------------------


def _kernel_log(tmp_path: Path) -> Path:
    """The XID in syslog form, written (mtime) a year after the telemetry: a year-less line
    whose guessed year is wrong."""
    log = tmp_path / "kernel" / "gpu-node-07.log"
    log.parent.mkdir()
    t = datetime.fromtimestamp(T0 + 30 * XID_AT, UTC)
    log.write_text(f"{t:%b %d %H:%M:%S} gpu-node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, "
                   "pid=77, name=python3, GPU has fallen off the bus.\n")
    mtime = datetime(2027, 12, 1, tzinfo=UTC).timestamp()
    os.utime(log, (mtime, mtime))
    return log


def test_backtest_warns_about_a_guessed_year_and_failures_outside_the_span(
        tmp_path: Path) -> None:
    d, log = _scrapes(tmp_path), _kernel_log(tmp_path)
    result = invoke("backtest", str(d), "--at", "mtime", "--node-label", "k8s_node_name",
                    "--kernel-logs", str(log), "--baseline", "none", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["n_failures"], doc["n_failures_in_span"]) == (1, 0)
    assert doc["span_check"]["after"] == 1
    stderr = " ".join(result.stderr.split())
    assert "1 XID line(s) carry no year" in stderr and "guessed 2027" in stderr
    assert "1 of 1 failures fall outside the telemetry's time span" in stderr
    assert "gpu-node-07 2027-11-18 03:07:30 XID 79" in stderr
    assert "give --year YYYY" in stderr


def test_backtest_year_puts_the_failure_in_span(tmp_path: Path) -> None:
    d, log = _scrapes(tmp_path), _kernel_log(tmp_path)
    result = invoke("backtest", str(d), "--at", "mtime", "--node-label", "k8s_node_name",
                    "--kernel-logs", str(log), "--year", "2026", "--baseline", "none", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["n_failures"], doc["n_failures_in_span"]) == (1, 1)
    assert doc["cards"][0]["total"]["detected"] == 1
    assert "no year" not in result.stderr and "outside" not in result.stderr


def test_backtest_table_says_how_many_failures_were_in_span(tmp_path: Path) -> None:
    d, log = _scrapes(tmp_path), _kernel_log(tmp_path)
    result = invoke("backtest", str(d), "--at", "mtime", "--node-label", "k8s_node_name",
                    "--kernel-logs", str(log), "--baseline", "none")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "1 failures from kernel logs, 0 of them in the telemetry's time span (scored)" in text


def test_year_without_kernel_logs_exits_2(tmp_path: Path) -> None:
    d = _scrapes(tmp_path, 2)
    line = _error_line(invoke("backtest", str(d), "--at", "mtime", "--year", "2026"))
    assert "--year" in line and "--kernel-logs" in line


def test_backtest_says_when_failures_sit_on_nodes_the_telemetry_lacks(tmp_path: Path) -> None:
    # Without --node-label the telemetry names the exporter pods, the kernel log the host.
    d, log = _scrapes(tmp_path), _kernel_log(tmp_path)
    result = invoke("backtest", str(d), "--at", "mtime", "--kernel-logs", str(log),
                    "--year", "2026", "--baseline", "none", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["span_check"]["unknown_node"] == 1
    stderr = " ".join(result.stderr.split())
    assert "1 of the 1 failures in span are on nodes the telemetry does not name " \
           "(gpu-node-07)" in stderr
