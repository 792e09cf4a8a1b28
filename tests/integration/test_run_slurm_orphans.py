"""A ``kill -9`` of `trainguard run --backend slurm` leaves nothing running on the real test
cluster: the submitted job is cancelled (submit mode), the srun step and its ranks are stopped
while the surrounding allocation lives on (allocation mode)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_cluster import ACTIVE_STATES, SlurmCluster

from trainguard.recover.slurm.commands import SlurmCommands

pytestmark = pytest.mark.integration

PLAIN = Path(__file__).parent / "scripts" / "plain_job.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]


def _start(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 1:].split()
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def wait_for(path: Path, proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert proc.poll() is None, f"exited early ({proc.returncode})"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.1)
    return path.read_text().strip()


def gone_within(seconds: float, check: object) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


def test_submit_mode_cancels_the_job_when_the_supervisor_is_killed(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    commands = SlurmCommands(env=slurm_cluster.env)
    attempt = tmp_path / "run" / "attempts" / "0"
    sup = subprocess.Popen([*TG, "run", "--no-agents", "-q", "--no-db", "--backend", "slurm",
                            "--slurm-mode", "submit", "--run-dir", str(tmp_path / "run"),
                            "--nodes", "node1",
                            "--", sys.executable, str(PLAIN), "100000"],
                           cwd=tmp_path, env={**os.environ, **slurm_cluster.env},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    job = None
    try:
        job = wait_for(attempt / "job_id", sup)
        rank_pid = int(wait_for(attempt / "node1" / "rank0.pid", sup))
        rank_start = _start(rank_pid)
        sup.kill()
        sup.wait()

        def cancelled() -> bool:
            state = commands.show_job(job).get("JobState", "").split()[0]
            return state not in ACTIVE_STATES and _start(rank_pid) != rank_start

        assert gone_within(10, cancelled), commands.show_job(job)
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        if job is not None:
            commands.cancel(job)
        slurm_cluster.wait_idle(timeout_s=30)


def test_allocation_mode_stops_the_step_when_the_supervisor_is_killed(
        slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    pid_file = tmp_path / "supervisor.pid"
    attempt = tmp_path / "run" / "attempts" / "0"
    tg = shlex.join([*TG, "run", "--no-agents", "-q", "--no-db", "--backend", "slurm", "--run-dir",
                     str(tmp_path / "run"), "--nodes", "node1", "--", sys.executable,
                     str(PLAIN), "100000"])
    # The allocation outlives the supervisor (as in an sbatch script that goes on).
    script = f"{tg} & echo $! > {shlex.quote(str(pid_file))}; wait; sleep 120"
    salloc = subprocess.Popen(["salloc", "-N", "1", "--job-name", "tg-orphans", "bash", "-c",
                               script], cwd=tmp_path, env={**os.environ, **slurm_cluster.env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        sup_pid = int(wait_for(pid_file, salloc))
        rank_pid = int(wait_for(attempt / "node1" / "rank0.pid", salloc))
        rank_start = _start(rank_pid)
        time.sleep(1.0)  # the supervisor has polled and told its reaper about the step
        os.kill(sup_pid, signal.SIGKILL)
        assert gone_within(10, lambda: _start(rank_pid) != rank_start)
        assert salloc.poll() is None  # the allocation itself was left alone
    finally:
        if salloc.poll() is None:
            os.killpg(salloc.pid, signal.SIGTERM)
            try:
                salloc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(salloc.pid, signal.SIGKILL)
                salloc.wait()
        slurm_cluster.wait_idle(timeout_s=30)
