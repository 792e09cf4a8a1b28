"""`trainguard inject kill|hang`: progress on stderr, a required --rank, and a record in the run
dir that lets the supervisor name the failure as injected."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.recover.injected import injections_path, read_injections

runner = CliRunner()


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def write_state(run_dir: Path, ranks: list[dict[str, object]], attempt: int = 2) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "state.json").write_text(json.dumps(
        {"status": "running", "attempt": attempt, "ranks": ranks}))


@pytest.mark.parametrize("kind", ["kill", "hang"])
def test_rank_is_required(tmp_path: Path, kind: str) -> None:
    write_state(tmp_path, [])
    r = runner.invoke(app, ["inject", kind, "--run-dir", str(tmp_path)])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs --rank" in lines[0]


def test_kill_says_each_step_and_records_the_injection(
        tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    write_state(tmp_path, [{"rank": 0, "node": "node1", "pid": 1},
                           {"rank": 1, "node": "node2", "pid": child.pid}])
    r = runner.invoke(app, ["inject", "kill", "--run-dir", str(tmp_path), "--rank", "1"])
    assert r.exit_code == 0, r.stderr
    assert child.wait(timeout=5) == -signal.SIGKILL
    said = r.stderr
    assert f"inject: looking for the run in {tmp_path}" in said
    assert f"rank 1 of attempt 2 is pid {child.pid} on node2: sending SIGKILL" in said
    assert f"done: killed rank 1 on node2 (pid {child.pid})" in said
    (inj,) = read_injections(injections_path(tmp_path, 2))
    assert (inj.kind, inj.rank, inj.node, inj.source) == ("kill", 1, "node2", "trainguard inject")
    assert inj.describe() == "injected kill of rank 1 (trainguard inject)"


def test_hang_is_confirmed_stopped(tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    write_state(tmp_path, [{"rank": 0, "node": "node1", "pid": child.pid}], attempt=0)
    r = runner.invoke(app, ["inject", "hang", "--run-dir", str(tmp_path), "--rank", "0"])
    assert r.exit_code == 0, r.stderr
    assert "sending SIGSTOP" in r.stderr and "done: stopped rank 0" in r.stderr
    (inj,) = read_injections(injections_path(tmp_path, 0))
    assert (inj.kind, inj.rank, inj.node) == ("hang", 0, "node1") and inj.time is not None


def test_a_launching_attempt_is_waited_for_and_said(tmp_path: Path) -> None:
    write_state(tmp_path, [])
    r = runner.invoke(app, ["inject", "kill", "--run-dir", str(tmp_path), "--rank", "0",
                            "--wait", "0.2"])
    assert r.exit_code == 1
    assert "attempt 2 is launching: waiting up to 0.2 s" in r.stderr
    assert "did not list its ranks within 0.2 s" in r.stderr
    assert not injections_path(tmp_path, 2).exists()


def test_an_unknown_rank_is_bad_input(tmp_path: Path) -> None:
    write_state(tmp_path, [{"rank": 0, "node": "node1", "pid": 1},
                           {"rank": 1, "node": "node1", "pid": 2}])
    r = runner.invoke(app, ["inject", "kill", "--run-dir", str(tmp_path), "--rank", "5"])
    assert r.exit_code == 2
    assert "rank 5 is not part of the current attempt (ranks 0-1)" in r.stderr
