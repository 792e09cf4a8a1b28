"""The ring-wide all-reduce check's pure parts, and one real run through local agents."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.check.allreduce import (
    MARKER,
    bus_bandwidth_mbps,
    collective_finding,
    parse_result,
)
from trainguard.check.model import Level


def test_bus_bandwidth_is_nccl_tests_busbw() -> None:
    # 8 ranks, 100 MB in 0.1 s: algbw 1000 MB/s, busbw 2 * 7/8 of it
    assert bus_bandwidth_mbps(100_000_000, 0.1, 8) == pytest.approx(1750.0)
    assert bus_bandwidth_mbps(100, 0.0, 8) == 0.0 and bus_bandwidth_mbps(100, 1.0, 1) == 0.0


def test_the_result_line_is_found_among_other_output() -> None:
    doc = {"backend": "gloo", "latency_ms": 0.5, "busbw_mbps": 900.0}
    text = f"warning: x\n{MARKER}{json.dumps(doc)}\nbye\n"
    assert parse_result(text) == doc
    assert parse_result("nothing here") is None
    assert parse_result(MARKER + "{not json") is None


def test_findings_pass_with_figures_or_fail_naming_the_set() -> None:
    ok = collective_finding({"backend": "gloo", "latency_ms": 0.5, "busbw_mbps": 900.0},
                            ["a", "b"])
    assert ok.level is Level.PASS and ok.value == 900.0 and "gloo" in ok.reason
    bad = collective_finding(None, ["a", "b"], "rank 1 on b exited 1")
    assert bad.level is Level.FAIL and "a, b" in bad.reason and "exited 1" in bad.reason


@pytest.mark.integration
def test_a_real_ring_through_local_agents(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-m", "trainguard.cli.main", "check", "--nodes",
                        "a,b,c", "--probe", "cpu_gemm", "--no-links", "--json"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    ring = [f for f in report["findings"] if f["check"] == "allreduce"]
    assert len(ring) == 1 and ring[0]["level"] == "pass", ring
    assert "gloo, 3 hosts" in ring[0]["reason"] and ring[0]["value"] > 0
