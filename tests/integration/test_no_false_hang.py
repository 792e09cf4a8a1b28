"""No false hang for an ordinary script, and a stopped or stuck rank still caught fast
(local backend, real processes; the rule: :mod:`trainguard.recover.liveness`).

An ordinary script without the SDK prints a start-up line on every rank and then logs on rank 0
only: the quiet ranks are not hung. A rank stopped (SIGSTOP) or stuck outside a collective
while the others wait in it is declared within ``--hang-timeout`` + 5 s, a rank stopped before
its first output too (not after the 900 s start-up timeout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "quiet_ddp.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]
HANG_TIMEOUT = 4.0


def run(tmp: Path, *script_args: str, retries: int = 1, opts: tuple[str, ...] = (),
        timeout: float = 180) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    cmd = [*TG, "run", "--no-db", "--run-dir", str(tmp / "run"), "--nodes", "a,b", *opts,
           "--hang-timeout", f"{HANG_TIMEOUT:g}", "--max-retries", str(retries),
           "--backoff", "0.2", "--", sys.executable, str(SCRIPT), *script_args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    doc = json.loads((tmp / "run" / "summary.json").read_text())
    return r, doc


def declared_after_fault(doc: dict[str, Any], mark: Path) -> float:
    first = doc["attempts"][0]
    return float(first["failed_at"]) - float(mark.read_text())


@pytest.mark.parametrize("opts", [(), ("--no-agents",)], ids=["agents", "direct"])
def test_a_rank_quiet_after_its_start_up_line_is_not_hung(tmp_path: Path,
                                                          opts: tuple[str, ...]) -> None:
    # the reproduction: rank 1 prints once, rank 0 every 0.2 s, for 3x the timeout
    r, doc = run(tmp_path, "--plain", "--steps", str(int(3.2 * HANG_TIMEOUT / 0.2)),
                 "--step-time", "0.2", opts=opts)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [a["status"] for a in doc["attempts"]] == ["succeeded"], doc["attempts"]
    assert "hang" not in r.stderr


def test_ddp_logging_on_rank_0_only_runs_3x_the_hang_timeout(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the DDP script needs torch")
    r, doc = run(tmp_path, "--steps", str(int(3.2 * HANG_TIMEOUT / 0.2)), "--step-time", "0.2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert [a["status"] for a in doc["attempts"]] == ["succeeded"], doc["attempts"]
    assert doc["attempts"][0]["duration_s"] > 3 * HANG_TIMEOUT


def test_a_stopped_rank_is_declared_within_the_timeout_and_named(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the DDP script needs torch")
    mark = tmp_path / "fault"
    r, doc = run(tmp_path, "--steps", "40", "--step-time", "0.1", "--stop-rank", "1",
                 "--stop-at", "8", "--mark", str(mark))
    assert r.returncode == 0, r.stderr[-3000:]
    first, second = doc["attempts"]
    # a gloo job: a collective hang, not an NCCL one; stopped from outside, so no node blamed
    assert first["failure_category"] == "collective_hang", first
    assert first["failure"]["culprit_rank"] == 1, first["failure"]
    assert first["failure"]["implicated_nodes"] == [], first["failure"]
    assert second["status"] == "succeeded"
    assert declared_after_fault(doc, mark) < HANG_TIMEOUT + 5


def test_a_rank_stuck_outside_the_collective_is_declared_within_the_timeout(
        tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the DDP script needs torch")
    mark = tmp_path / "fault"
    r, doc = run(tmp_path, "--steps", "40", "--step-time", "0.1", "--stall-rank", "1",
                 "--stall-at", "8", "--mark", str(mark))
    assert r.returncode == 0, r.stderr[-3000:]
    first, second = doc["attempts"]
    assert second["status"] == "succeeded"
    # the silence starts at rank 0's last line, a step or so before rank 1 stalls
    after = declared_after_fault(doc, mark)
    assert HANG_TIMEOUT - 2 < after < HANG_TIMEOUT + 5
    # rank 0 waits in DDP's gradient all-reduce (py-spy: idle in backward), rank 1 is not in
    # a collective: the stacks single it out, asleep in the job's own code
    if shutil.which("py-spy") or (Path(sys.executable).parent / "py-spy").exists():
        assert first["failure"]["culprit_rank"] == 1, first["failure"]
        assert first["failure_category"] == "user_code_error", first
        assert "quiet_ddp.py" in first["failure"]["summary"], first["failure"]
        assert first["failure"]["implicated_nodes"] == [], first["failure"]
    else:
        assert first["failure_category"] == "collective_hang", first
        assert first["failure"]["culprit_rank"] != 0, first["failure"]


@pytest.mark.parametrize("opts", [(), ("--no-agents",)], ids=["agents", "direct"])
def test_a_rank_stopped_before_its_first_output_is_declared_within_the_timeout(
        tmp_path: Path, opts: tuple[str, ...]) -> None:
    # rank 0 keeps logging; rank 1 stops before printing anything: a stopped process is not
    # starting, so the 900 s start-up allowance does not apply
    mark = tmp_path / "fault"
    r, doc = run(tmp_path, "--plain", "--steps", "150", "--step-time", "0.1", "--stop-rank",
                 "1", "--stop-at", "-1", "--mark", str(mark), retries=0, opts=opts)
    first = doc["attempts"][0]
    assert first["failure_category"] == "collective_hang", first
    assert first["failure"]["culprit_rank"] == 1, first["failure"]
    assert declared_after_fault(doc, mark) < HANG_TIMEOUT + 5
    assert r.returncode != 0
