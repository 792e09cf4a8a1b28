"""A hanging probe command leaves nothing running: its whole process group is killed."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from trainguard.check.model import Status
from trainguard.check.probe_base import ProbeParams
from trainguard.check.probe_proc import run_command
from trainguard.check.probes_dcgm import dcgm


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _gone(pids: list[int], within_s: float = 3.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


def _hanging_dcgmi(tmp_path: Path) -> tuple[Path, Path]:
    """A ``dcgmi`` that starts a sleeping child, notes both PIDs, and never returns."""
    pids = tmp_path / "pids"
    exe = tmp_path / "bin" / "dcgmi"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n"
                   "sleep 300 &\n"
                   f"echo $! > {pids}.child\n"
                   f"echo $$ > {pids}.tmp && mv {pids}.tmp {pids}\n"
                   "exec sleep 300\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe, pids


def test_a_dcgmi_that_hangs_leaves_no_process_behind(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    exe, pids = _hanging_dcgmi(tmp_path)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    started = time.monotonic()
    r = dcgm(ProbeParams("d1", time_limit_s=1.0))  # found on PATH
    assert r.status is Status.ERROR and "timed out" in r.reason
    assert time.monotonic() - started < 5
    both = [int(pids.read_text()), int(Path(f"{pids}.child").read_text())]
    try:
        assert _gone(both), [p for p in both if _alive(p)]
    finally:
        for pid in both:
            if _alive(pid):
                os.kill(pid, 9)


def test_a_command_that_exits_takes_its_helpers_with_it(tmp_path: Path) -> None:
    child = tmp_path / "child"
    done = run_command(["sh", "-c", f"sleep 300 & echo $! > {child}; echo hi; echo err >&2"],
                       timeout_s=10.0)
    assert not done.timed_out and done.returncode == 0 and done.output == "hi\nerr\n"
    pid = int(child.read_text())
    try:
        assert _gone([pid])
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def test_a_command_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    started = time.monotonic()
    done = run_command(["sh", "-c", "trap '' TERM; sleep 300"], timeout_s=0.3)
    assert done.timed_out and done.returncode is None
    assert time.monotonic() - started < 4
