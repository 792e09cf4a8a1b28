"""`trainguard ckpt analyze --prometheus` against a real Prometheus holding node-exporter NFS
mountstats counters with known checkpoint saves and a load.

The counters are written here in node_exporter's mountstats format (families, labels `export`,
`protocol`, `mountaddr`, `operation`), backfilled with promtool, and read back through the HTTP
API. The saves mirror the report's Analysis 2: node01 writes at 1.4% and node02 at 10.4% of a
200 Gbit/s link while 93% of WRITE time is spent queued on the client (128 RPC slots saturated).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_server import (
    PrometheusStartError,
    PrometheusUnavailable,
    _unavailable,
    binaries,
    start_prometheus,
)
from typer.testing import CliRunner

from trainguard.cli.main import app

pytestmark = pytest.mark.integration

T0 = 1_731_888_000  # a multiple of 2 h: one backfill block
STEP = 30
N_T = 240  # one 2-hour window
NODES = ("node01", "node02", "node03")
LINK_BPS = 200e9 / 8  # 200 Gbit/s in bytes/s
MOUNT = 'export="nfs01:/ckpt",mountaddr="10.0.0.5",protocol="tcp"'
SLOTS = 128  # RPCs in flight while the client's slot table is full

# (first sample, last sample, {node: bytes/s}); a sample's rate covers the step before it.
SAVE_A = (60, 69, {"node01": 0.014 * LINK_BPS, "node02": 0.104 * LINK_BPS,
                   "node03": 0.04 * LINK_BPS})
SAVE_B = (160, 171, {"node01": 0.048 * LINK_BPS, "node02": 0.048 * LINK_BPS})
LOAD = (20, 29, {n: 0.06 * LINK_BPS for n in NODES})
WRITE_QUEUE_SHARE = 0.93
READ_QUEUE_SHARE = 0.10

runner = CliRunner()


def _t(sample: int) -> int:
    return T0 + sample * STEP


def _rates(bursts: list[tuple[int, int, dict[str, float]]], quiet: float,
           rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per node, bytes/s at each sample: quiet noise, plus the bursts."""
    out = {n: quiet * np.exp(0.2 * rng.standard_normal(N_T)) for n in NODES}
    for first, last, per_node in bursts:
        for node, rate in per_node.items():
            out[node][first:last + 1] = rate
    return out


def _busy(bursts: list[tuple[int, int, dict[str, float]]]) -> dict[str, np.ndarray]:
    """1 where a node is in a burst, else 0."""
    out = {n: np.zeros(N_T) for n in NODES}
    for first, last, per_node in bursts:
        for node in per_node:
            out[node][first:last + 1] = 1.0
    return out


def _write_openmetrics(path: Path) -> None:
    rng = np.random.default_rng(5)
    write = _rates([SAVE_A, SAVE_B], 2e5, rng)
    read = _rates([LOAD], 1e6, rng)
    w_busy, r_busy = _busy([SAVE_A, SAVE_B]), _busy([LOAD])
    # Per op and node: (requests/s, bytes/s sent, bytes/s received, queue, response, request s/s)
    ops: dict[str, dict[str, tuple[np.ndarray, ...]]] = {"READ": {}, "WRITE": {}, "GETATTR": {}}
    for n in NODES:
        request_w = SLOTS * w_busy[n] + 0.01
        queue_w = WRITE_QUEUE_SHARE * SLOTS * w_busy[n] + 1e-4
        response_w = request_w - queue_w - 0.001 * w_busy[n]  # the rest: client processing
        ops["WRITE"][n] = (write[n] / 1e6, write[n] * 1.001, write[n] * 0 + 120.0,
                           queue_w, response_w, request_w)
        request_r = SLOTS * r_busy[n] + 0.02
        queue_r = READ_QUEUE_SHARE * SLOTS * r_busy[n] + 2e-4
        ops["READ"][n] = (read[n] / 1e6, read[n] * 0 + 150.0, read[n] * 1.001, queue_r,
                          request_r - queue_r, request_r)
        ones = np.ones(N_T)
        ops["GETATTR"][n] = (ones * 50, ones * 9e3, ones * 1.2e4, ones * 5.0, ones * 0.1,
                             ones * 5.2)  # busy metadata traffic: must not count as WRITE/READ
    ts = [f" {_t(i)}\n" for i in range(N_T)]
    lines: list[str] = []

    def counter(family: str, help_: str, series: list[tuple[str, np.ndarray]],
                decimals: int) -> None:
        lines.append(f"# HELP {family} {help_}\n# TYPE {family} counter\n")
        for labels, rate in series:
            values = np.cumsum(rate * STEP) + 1e9
            lines.extend(f"{family}_total{{{labels}}} {v:.{decimals}f}{t}"
                         for v, t in zip(values, ts, strict=True))

    def inst(n: str) -> str:
        return f'instance="{n}:9100",job="node",{MOUNT}'

    counter("node_mountstats_nfs_total_write_bytes",
            "Number of bytes written to the NFS server, in total.",
            [(inst(n), write[n]) for n in NODES], 0)
    counter("node_mountstats_nfs_total_read_bytes",
            "Number of bytes read from the NFS server, in total.",
            [(inst(n), read[n]) for n in NODES], 0)
    for k, (name, help_, decimals) in enumerate((
            ("requests", "Number of requests performed for a given operation.", 0),
            ("sent_bytes", "Number of bytes sent for a given operation, including RPC headers "
             "and payload.", 0),
            ("received_bytes", "Number of bytes received for a given operation, including RPC "
             "headers and payload.", 0),
            ("queue_time_seconds", "Duration all requests spent queued for transmission for a "
             "given operation before they were sent, in seconds.", 3),
            ("response_time_seconds", "Duration all requests took to get a reply back after a "
             "request for a given operation was transmitted, in seconds.", 3),
            ("request_time_seconds", "Duration all requests took from when a request was "
             "enqueued to when it was completely handled for a given operation, in seconds.",
             3))):
        counter(f"node_mountstats_nfs_operations_{name}", help_,
                [(f'{inst(n)},operation="{op}"', ops[op][n][k]) for op in ops for n in NODES],
                decimals)
    lines.append("# HELP node_mountstats_nfs_transport_maximum_rpc_slots Maximum number of "
                 "simultaneously active RPC requests ever used.\n"
                 "# TYPE node_mountstats_nfs_transport_maximum_rpc_slots gauge\n")
    for n in NODES:
        lines.extend(f'node_mountstats_nfs_transport_maximum_rpc_slots{{{inst(n)},'
                     f'transport="0"}} {SLOTS}{t}' for t in ts)
    lines.append("# EOF\n")
    path.write_text("".join(lines))


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Prometheus for the module, backfilled with the counters above."""
    try:
        binaries()
    except PrometheusUnavailable as exc:
        _unavailable(str(exc))
    work = tmp_path_factory.mktemp("nfs-prometheus")
    om = work / f"mountstats-{T0}.om"
    _write_openmetrics(om)
    try:
        server = start_prometheus(work / "server", [om])
    except PrometheusStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def analysed(server_url: str) -> dict[str, Any]:
    result = runner.invoke(app, ["ckpt", "analyze", "--prometheus", server_url,
                                 "--start", str(T0), "--end", str(_t(N_T - 1)),
                                 "--step", str(STEP), "--json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_phases_found_where_they_were_written(analysed: dict[str, Any]) -> None:
    got = [(p["kind"], p["start"], p["end"], [n["node"] for n in p["nodes"]])
           for p in analysed["phases"]]
    assert got == [
        ("load", _t(LOAD[0] - 1), _t(LOAD[1]), list(NODES)),
        ("save", _t(SAVE_A[0] - 1), _t(SAVE_A[1]), list(NODES)),
        ("save", _t(SAVE_B[0] - 1), _t(SAVE_B[1]), ["node01", "node02"]),
    ]
    assert analysed["save_source"] == "node_mountstats_nfs_total_write_bytes_total"
    assert analysed["load_source"] == "node_mountstats_nfs_total_read_bytes_total"
    assert analysed["nodes"] == list(NODES)


def test_bandwidth_and_utilization(analysed: dict[str, Any]) -> None:
    load, save_a, save_b = analysed["phases"]
    for phase, (first, last, per_node) in ((load, LOAD), (save_a, SAVE_A), (save_b, SAVE_B)):
        seconds = (last - first + 1) * STEP
        assert phase["duration_s"] == seconds
        for n in phase["nodes"]:
            rate = per_node[n["node"]]
            assert n["mean_bps"] == pytest.approx(rate, rel=1e-6)
            assert n["peak_bps"] == pytest.approx(rate, rel=1e-6)
            assert n["bytes"] == pytest.approx(rate * seconds, rel=1e-6)
            assert n["util_mean_pct"] == pytest.approx(100 * rate / LINK_BPS, rel=1e-6)
        total = sum(per_node.values())
        assert phase["bytes"] == pytest.approx(total * seconds, rel=1e-6)
        assert phase["mean_bps"] == pytest.approx(total, rel=1e-6)
        assert phase["peak_bps"] == pytest.approx(total, rel=1e-6)
    assert [n["util_mean_pct"] for n in save_a["nodes"]] == pytest.approx([1.4, 10.4, 4.0])
    assert save_a["util_peak_pct"] == pytest.approx(10.4)
    s = analysed["summary"]
    assert (s["saves"], s["loads"]) == (2, 1)
    assert s["median_save_s"] == (300 + 360) / 2
    assert (s["save_util_min_pct"], s["save_util_max_pct"]) == (1.4, 10.4)


def test_queue_share_and_hint(analysed: dict[str, Any]) -> None:
    load, save_a, save_b = analysed["phases"]
    for save in (save_a, save_b):
        assert save["queue_share"] == pytest.approx(WRITE_QUEUE_SHARE, abs=1e-3)
        assert "client-side queueing" in save["hint"]
        assert "trainguard nfs diagnose" in save["hint"]
    assert load["queue_share"] == pytest.approx(READ_QUEUE_SHARE, abs=1e-3)
    assert "client-side" not in load["hint"]
    assert analysed["summary"]["save_queue_share"] == pytest.approx(WRITE_QUEUE_SHARE, abs=1e-3)
    assert "trainguard nfs diagnose" in analysed["summary"]["hint"]


def test_table_with_a_node_filter(server_url: str) -> None:
    result = runner.invoke(app, ["ckpt", "analyze", "--prometheus", server_url,
                                 "--start", str(T0), "--end", str(_t(N_T - 1)),
                                 "--node", "node03"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "1 nodes, 2.0 h at 30s" in text
    assert "2 checkpoint phases" in text
    assert "1 saves, 1 loads" in text
    assert "saves used 4.0-4.0% of each node's 200 Gbit/s link" in text
    assert "WRITE queue share 93%" in text
    assert "hint: 93% of WRITE time during saves was client-side queueing" in text
