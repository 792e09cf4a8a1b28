"""A real Prometheus scrapes the live simulated exporter: every node's DCGM series arrive, with
the simulator's labels, and move with the simulated clock; the CLI stops cleanly on Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_server import PromServer, scraping_prometheus

from trainguard.simulate import SimConfig
from trainguard.simulate.serve import ExporterServer, LiveExporter

CFG = SimConfig(nodes=4, gpus_per_node=2, days=1, seed=2, interval_s=30,
                failures_per_day=0, maintenances_per_day=0, scrape_gaps_per_day=0,
                missing_sample_prob=0)
SPEED = 600.0
"""One 30 s simulated sample every 0.05 wall seconds: each 1 s scrape sees a new one."""
DEADLINE_S = 20.0
"""Prometheus 2.42 discovers targets every 5 s: the first scrape lands ~5-6 s after start."""


@pytest.fixture
def exporter() -> Iterator[ExporterServer]:
    with LiveExporter.from_config(CFG, SPEED).serve("127.0.0.1", 0) as server:
        yield server


@pytest.fixture
def prometheus(exporter: ExporterServer, tmp_path: Path) -> Iterator[PromServer]:
    with scraping_prometheus(tmp_path, [f"{exporter.host}:{exporter.port}"],
                             scrape_interval="1s") as server:
        yield server


def _query(prom: PromServer, expr: str) -> list[dict[str, object]]:
    data = prom.api("query", {"query": expr})
    assert isinstance(data, dict)
    result: list[dict[str, object]] = data["result"]
    return result


def _wait_for(prom: PromServer, expr: str, n: int) -> list[dict[str, object]]:
    """Poll an instant query until it returns `n` series (bounded by DEADLINE_S)."""
    deadline = time.monotonic() + DEADLINE_S
    result = _query(prom, expr)
    while len(result) < n and time.monotonic() < deadline:
        time.sleep(0.25)  # waiting for Prometheus' next scrape, not for our own code
        result = _query(prom, expr)
    return result


def test_prometheus_scrapes_every_node_and_sees_simulated_time_move(
        exporter: ExporterServer, prometheus: PromServer) -> None:
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    # three scrapes of every GPU: the counter went up between them (the simulated clock moves
    # 600 s per wall second) and each scrape saw a different simulated sample
    expr = f"changes({energy}[10s]) >= 2"
    moved = _wait_for(prometheus, expr, CFG.nodes * CFG.gpus_per_node)
    assert len(moved) == CFG.nodes * CFG.gpus_per_node, prometheus.log_path.read_text()[-2000:]
    hosts = {str(r["metric"]["Hostname"]) for r in moved}  # type: ignore[index]
    assert hosts == {"node01", "node02", "node03", "node04"}
    uuids = exporter.exporter.scenario.fleet.uuids
    for r in moved:
        labels = r["metric"]
        assert isinstance(labels, dict)
        node = int(labels["Hostname"][-2:]) - 1
        assert labels["UUID"] == uuids[node][int(labels["gpu"])]
    rises = _query(prometheus, f"min(increase({energy}[10s]))")
    assert float(rises[0]["value"][1]) > 0  # type: ignore[index]
    node_cpu = _query(prometheus, 'count by (instance) (node_cpu_seconds_total{job="node"})')
    assert sorted(str(r["metric"]["instance"]) for r in node_cpu) == [  # type: ignore[index]
        f"node0{i}:9100" for i in range(1, 5)]
    # the server-side clock agrees with the exporter's: Prometheus' newest sample for node01
    # GPU 0 equals the simulated sample at (about) its scrape time
    (latest,) = _query(prometheus, f'timestamp({energy}{{Hostname="node01",gpu="0"}})')
    scraped_wall = float(latest["value"][1])  # type: ignore[index]
    sim = exporter.exporter.clock.to_sim(scraped_wall)
    assert CFG.start_s < sim < CFG.end_s


def test_cli_serves_until_ctrl_c() -> None:
    cmd = [sys.executable, "-c", "from trainguard.cli.main import main; main()", "simulate",
           "--nodes", "2", "--gpus-per-node", "1", "--days", "0.1", "--serve", "127.0.0.1:0",
           "--speed", "600"]
    # SIGINT is ignored in processes started in the background by a non-interactive shell;
    # restore the default so Python turns it into KeyboardInterrupt as in a terminal.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert "serving 2 node(s)" in first and "/metrics" in first
        url = first.split(" at ", 1)[1].split("/metrics", 1)[0]
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
            assert b"DCGM_FI_DEV_GPU_UTIL{" in resp.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 130
        rest = proc.stderr.read()
        assert "Traceback" not in rest and "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
