"""No false hang through Slurm's direct mode (issue 26): each task's rank is this machine's
process (pid files), so its state and CPU time come from ``/proc`` here. An ordinary DDP script
that logs on rank 0 only runs 3x the hang timeout in one attempt, as an ``srun`` step of an
allocation and as a submitted job; a rank that stops itself is declared within the hang
timeout + 5 s. (Agents started by Slurm: test_no_false_hang_multihost.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster

pytest.importorskip("torch", reason="the DDP script needs torch")
pytestmark = pytest.mark.integration

QUIET = Path(__file__).parent / "scripts" / "quiet_ddp.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]
HANG_TIMEOUT = 4.0
MODES = {"allocation": ("salloc", "-N", "2", "--job-name", "tg-quiet"), "submit": ()}


def run(cluster: SlurmCluster, tmp: Path, mode: str,
        *script_args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    argv = [*MODES[mode], *TG, "run", "--no-agents", "--no-db", "--backend", "slurm",
            "--slurm-mode", mode, "--run-dir", str(tmp / "run"), "--nodes", "node1,node2",
            "--hang-timeout", f"{HANG_TIMEOUT:g}", "--max-retries", "1", "--backoff", "0.2",
            "--", sys.executable, str(QUIET), *script_args]
    r = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, timeout=300,
                       env={**os.environ, **cluster.env})
    return r, json.loads((tmp / "run" / "summary.json").read_text())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_logging_on_rank_0_only_runs_3x_the_hang_timeout(slurm_cluster: SlurmCluster,
                                                         tmp_path: Path, mode: str) -> None:
    r, doc = run(slurm_cluster, tmp_path, mode, "--steps", str(int(3.2 * HANG_TIMEOUT / 0.2)),
                 "--step-time", "0.2")
    assert r.returncode == 0, r.stderr[-3000:]
    assert [a["status"] for a in doc["attempts"]] == ["succeeded"], r.stderr[-3000:]
    assert doc["attempts"][0]["duration_s"] > 3 * HANG_TIMEOUT


def test_a_stopped_rank_is_declared_within_the_timeout(slurm_cluster: SlurmCluster,
                                                       tmp_path: Path) -> None:
    mark = tmp_path / "fault"
    r, doc = run(slurm_cluster, tmp_path, "submit", "--steps", "40", "--step-time", "0.1",
                 "--stop-rank", "1", "--stop-at", "8", "--mark", str(mark))
    assert r.returncode == 0, r.stderr[-3000:]
    first, second = doc["attempts"]
    assert first["failure_category"] == "collective_hang" and second["status"] == "succeeded"
    assert first["failure"]["culprit_rank"] == 1, first["failure"]
    assert float(first["failed_at"]) - float(mark.read_text()) < HANG_TIMEOUT + 5
