"""No false hang on namespaced hosts (issue 26): an ordinary DDP script that logs on rank 0 only
runs 3x the hang timeout in one attempt, with each host's agent reading its own ranks' ``/proc``
(local agents, and agents started by Slurm in allocation and submit modes); a rank stopped inside
its host is still declared within the hang timeout + 5 s."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import multihost_job
import pytest
from multihost_job import Job, _unavailable, no_job_left  # noqa: F401 (fixture)

from trainguard.devcluster import HostCluster, SlurmHostCluster, missing_requirements
from trainguard.devcluster.common import SLURM_PROGRAMS

pytestmark = [pytest.mark.integration, pytest.mark.multihost,
              pytest.mark.usefixtures("no_job_left", "quiet_script")]

QUIET = Path(__file__).parent / "scripts" / "quiet_ddp.py"
HANG_TIMEOUT = 5.0
STEP_S = 0.2
STEPS = int(3.2 * HANG_TIMEOUT / STEP_S)
HOSTS = ("host1", "host2", "host3", "host4")


@pytest.fixture
def quiet_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs run quiet_ddp.py (rank 0 logs, the others print one start-up line)."""
    monkeypatch.setattr(multihost_job, "SCRIPT", QUIET)


def _require(*programs: str) -> None:
    if os.geteuid() != 0:
        _unavailable("namespaced hosts need root")
    missing = missing_requirements() + (missing_requirements(programs) if programs else [])
    if missing:
        _unavailable(f"missing: {', '.join(missing)}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    _require()
    with HostCluster(4, tmp_path_factory.mktemp("qmh") / "cluster") as c:
        yield c


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmHostCluster]:
    _require(*SLURM_PROGRAMS)
    with SlurmHostCluster(4, tmp_path_factory.mktemp("qmhs") / "cluster") as s:
        yield s


def quiet_job(cluster: HostCluster, root: Path, name: str, **kw: object) -> Job:
    return Job(cluster, root, name, steps=STEPS, script_args=("--step-time", str(STEP_S)),
               extra=["--hang-timeout", f"{HANG_TIMEOUT:g}"], **kw)  # type: ignore[arg-type]


def one_clean_attempt(job: Job) -> None:
    summary = job.wait()
    assert summary["status"] == "succeeded", job.output()[-3000:]
    assert len(summary["attempts"]) == 1, job.output()[-3000:]
    assert summary["attempts"][0]["duration_s"] > 3 * HANG_TIMEOUT
    assert "hang" not in job.output()


def test_logging_on_rank_0_only_is_not_a_hang_with_agents(cluster: HostCluster,
                                                          tmp_path: Path) -> None:
    one_clean_attempt(quiet_job(cluster, tmp_path, "quiet"))


def test_a_rank_stopped_inside_its_host_is_declared_within_the_timeout(
        cluster: HostCluster, tmp_path: Path) -> None:
    job = quiet_job(cluster, tmp_path, "qstop")
    job.wait_for_step(12)
    cluster.run("host3", ["pkill", "-STOP", "-f", "quiet_ddp.py"], check=True)
    stopped_at = time.monotonic()
    while "s: hang" not in job.output() and time.monotonic() - stopped_at < HANG_TIMEOUT + 30:
        time.sleep(0.1)
    assert "s: hang" in job.output(), job.output()[-3000:]
    assert time.monotonic() - stopped_at < HANG_TIMEOUT + 5
    summary = job.wait()
    assert summary["status"] == "succeeded", job.output()[-3000:]
    first = summary["attempts"][0]
    assert first["failure"]["culprit_rank"] == 2, first["failure"]
    assert len(summary["attempts"]) == 2, job.attempts_why(summary)


@pytest.mark.parametrize("mode", ["allocation", "submit"])
def test_logging_on_rank_0_only_is_not_a_hang_through_slurm(slurm: SlurmHostCluster,
                                                            tmp_path: Path, mode: str) -> None:
    wrapper = ["salloc", "-N4", "--no-kill", f"--nodelist={','.join(HOSTS)}", "--"] \
        if mode == "allocation" else []
    one_clean_attempt(quiet_job(slurm.cluster, tmp_path, f"quiet-{mode}", env=slurm.env(),
                                wrapper=wrapper,
                                backend=["--backend", "slurm", "--slurm-mode", mode]))
