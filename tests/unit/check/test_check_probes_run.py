"""The probe registry and runner (time limit, errors, unknown names), the clock, and dcgm with
a stand-in ``dcgmi`` executable."""

from __future__ import annotations

import stat
import threading
import time
from pathlib import Path

import pytest

from trainguard.check.judge import judge, summarize
from trainguard.check.model import Level, ProbeResult, Status
from trainguard.check.probe_base import HARD_FAIL_FACT, ProbeParams
from trainguard.check.probes import (
    DEFAULT_PROBES,
    PROBES,
    clock_offset,
    default_probes,
    run_probes,
)
from trainguard.check.probes_dcgm import dcgm, parse_dcgm_diag
from trainguard.errors import ConfigError


def test_a_probe_that_hangs_is_an_error_at_its_time_limit() -> None:
    release = threading.Event()

    def hangs(params: ProbeParams) -> ProbeResult:
        release.wait(30)
        return ProbeResult("hangs", params.host, Status.OK)

    def quick(params: ProbeParams) -> ProbeResult:
        return ProbeResult("quick", params.host, Status.OK)

    registry = {"hangs": hangs, "quick": quick}
    start = time.monotonic()
    try:
        results = run_probes(["hangs", "quick"], ProbeParams("h", time_limit_s=0.3), registry)
    finally:
        release.set()
    elapsed = time.monotonic() - start
    assert elapsed < 0.3 + 1.0
    assert results[0].status is Status.ERROR and results[0].reason == "timed out after 0.3 s"
    assert results[1].status is Status.OK  # the next probe still ran


def test_a_probe_that_raises_is_an_error() -> None:
    def broken(params: ProbeParams) -> ProbeResult:
        raise RuntimeError("boom\nsecond line")

    [r] = run_probes(["broken"], ProbeParams("h"), {"broken": broken})
    assert r.status is Status.ERROR and r.reason == "RuntimeError: boom" and r.check == "broken"


def test_unknown_probe_names_are_a_config_error_before_anything_runs() -> None:
    ran: list[str] = []
    registry = {"a": lambda p: ran.append("a") or ProbeResult("a", p.host, Status.OK)}
    with pytest.raises(ConfigError, match="unknown check 'nope'; known: a"):
        run_probes(["a", "nope"], ProbeParams("h"), registry)
    assert ran == []


def test_default_probes_on_a_cpu_only_host(tmp_path: Path) -> None:
    assert set(DEFAULT_PROBES) <= set(PROBES)
    params = ProbeParams("h", checkpoint_dir=tmp_path, time_limit_s=30, storage_bytes=8 * 2**20)
    assert default_probes(ProbeParams("h")) == tuple(n for n in DEFAULT_PROBES if n != "storage")
    results = run_probes(default_probes(params), params)
    status = {r.check: r.status for r in results}
    assert status == {"cpu_gemm": Status.OK, "mem_bandwidth": Status.OK, "storage": Status.OK,
                      "gpu": Status.SKIPPED, "gpu_perf": Status.SKIPPED, "dcgm": Status.SKIPPED}
    assert all(r.reason for r in results if r.status is Status.SKIPPED)


def test_clock_probe_reads_the_wall_clock() -> None:
    before = time.time()
    [r] = run_probes(["clock"], ProbeParams("h"))
    fig = r.figure("clock")
    assert fig is not None and before <= fig.value <= time.time()


@pytest.mark.parametrize(("t_send", "t_host", "t_recv", "expected"), [
    (100.0, 105.5, 101.0, (5.0, 0.5)),
    (100.0, 99.0, 100.0, (-1.0, 0.0)),
    (10.0, 10.2, 10.4, (0.0, 0.2)),
])
def test_clock_offset(t_send: float, t_host: float, t_recv: float,
                      expected: tuple[float, float]) -> None:
    assert clock_offset(t_send, t_host, t_recv) == pytest.approx(expected)


def test_clock_offset_rejects_a_reply_before_the_request() -> None:
    with pytest.raises(ValueError, match="before send time"):
        clock_offset(10.0, 10.0, 9.0)


DCGM_TABLE = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.5                                          |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| CUDA Main Library         | Pass                                           |
| Persistence Mode          | {persistence}                                  |
| Environment Variables     | Pass                                           |
| Page Retirement/Row Remap | Pass                                           |
| Graphics Processes        | Skip                                           |
| Inforom                   | Pass                                           |
+---------------------------+------------------------------------------------+
"""


def _dcgmi(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "dcgmi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_parse_dcgm_diag_reads_result_rows_only() -> None:
    rows = parse_dcgm_diag(DCGM_TABLE.format(persistence="Fail"))
    assert ("Persistence Mode", "fail") in rows and ("Graphics Processes", "skip") in rows
    assert len(rows) == 8  # not the version, header or separator rows


def test_dcgm_passing(tmp_path: Path) -> None:
    table = tmp_path / "out.txt"
    table.write_text(DCGM_TABLE.format(persistence="Pass"))
    r = dcgm(ProbeParams("d1"), _dcgmi(tmp_path, f"cat {table}\n"))
    assert r.status is Status.OK and r.figure("dcgm_failed").value == 0  # type: ignore[union-attr]
    assert dict(r.facts)["results"] == "7 pass, 0 fail, 0 warn, 1 skip"
    assert "Denylist" in dict(r.facts)["output"]
    assert summarize(judge([r])) == {"d1": Level.PASS}


def test_dcgm_failing_test_is_a_fail(tmp_path: Path) -> None:
    table = tmp_path / "out.txt"
    table.write_text(DCGM_TABLE.format(persistence="Fail"))
    r = dcgm(ProbeParams("d1"), _dcgmi(tmp_path, f"cat {table}\nexit 226\n"))
    assert [v for k, v in r.facts if k == HARD_FAIL_FACT] == ["DCGM Persistence Mode: fail"]
    assert summarize(judge([r])) == {"d1": Level.FAIL}


def test_dcgm_without_a_table_is_an_error(tmp_path: Path) -> None:
    r = dcgm(ProbeParams("d1"), _dcgmi(tmp_path, "echo 'Error: unable to connect to host engine'"
                                                 "\nexit 1\n"))
    assert r.status is Status.ERROR and "exited 1" in r.reason and "host engine" in r.reason


def test_dcgm_that_hangs_is_stopped(tmp_path: Path) -> None:
    start = time.monotonic()
    r = dcgm(ProbeParams("d1", time_limit_s=0.5), _dcgmi(tmp_path, "exec sleep 30\n"))
    assert r.status is Status.ERROR and "timed out" in r.reason
    assert time.monotonic() - start < 3


def test_dcgm_is_skipped_without_dcgmi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    r = dcgm(ProbeParams("d1"))
    assert r.status is Status.SKIPPED and r.reason == "dcgmi not installed"


def test_probe_params_cross_the_wire_and_bad_ones_are_config_errors(tmp_path: Path) -> None:
    params = ProbeParams("h", checkpoint_dir=tmp_path, expected_gpus=8, time_limit_s=12.5)
    assert ProbeParams.from_dict(params.to_dict()) == params
    assert ProbeParams.from_dict({"host": "h"}).checkpoint_dir is None
    with pytest.raises(ConfigError, match="unknown key 'time_limit'"):
        ProbeParams.from_dict({"host": "h", "time_limit": 3})
    with pytest.raises(ConfigError, match=r"check\.time_limit_s must be > 0"):
        ProbeParams.from_dict({"host": "h", "time_limit_s": 0})
