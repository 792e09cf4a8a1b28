"""Fencing a lost host on the namespaced cluster (issue 26): a host declared lost (its agent
SIGSTOPped, or its link cut) keeps running unless fenced. Its ranks here never talk to the
others, so nothing but fencing stops them; each appends timestamps to its own beat file in the
shared directory and checkpoints through the SDK.

After the relaunch no beat of the lost host's rank is newer than the first beat of the new
attempt, its agent and ranks are gone when the relaunch starts, the new attempt's rank raised
the checkpoint directory's epoch, and the job is recovered in exactly one relaunch. Local agents
(entered into each host) and Slurm (allocation and submit).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import multihost_job
import pytest
from multihost_job import Job, _unavailable, no_job_left, rank_pids  # noqa: F401 (fixture)

from trainguard.ckpt.epoch import read_epoch
from trainguard.devcluster import HostCluster, SlurmHostCluster, missing_requirements
from trainguard.devcluster.common import SLURM_PROGRAMS

pytestmark = [pytest.mark.integration, pytest.mark.multihost,
              pytest.mark.usefixtures("no_job_left")]

SCRIPT = Path(__file__).parent / "scripts" / "fence_beats.py"
MARKER = "fence_beats.py"
HOSTS = ("host1", "host2", "host3", "host4")
NODE_TIMEOUT = 6.0


@pytest.fixture(autouse=True)
def beats_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multihost_job, "SCRIPT", SCRIPT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    if os.geteuid() != 0:
        _unavailable("namespaced hosts need root")
    missing = missing_requirements()
    if missing:
        _unavailable(f"missing programs: {', '.join(missing)}")
    with HostCluster(4, tmp_path_factory.mktemp("mhf") / "cluster") as c:
        yield c


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmHostCluster]:
    if os.geteuid() != 0:
        _unavailable("namespaced hosts need root")
    missing = missing_requirements() + missing_requirements(SLURM_PROGRAMS)
    if missing:
        _unavailable(f"missing: {', '.join(missing)}")
    with SlurmHostCluster(4, tmp_path_factory.mktemp("mhfs") / "cluster") as s:
        yield s


def _beats(job: Job, node: str, attempt: int) -> list[float]:
    found: list[float] = []
    for path in (job.ckpt / "beats").glob(f"{node}-a{attempt}-r*.log"):
        found += [float(line.split()[0]) for line in path.read_text().splitlines() if line]
    return sorted(found)


def _lose_host2_and_check_the_fence(cluster: HostCluster, job: Job, how: str) -> None:
    job.wait_for_step(12)
    try:
        if how == "agent_stopped":
            cluster.run("host2", ["pkill", "-STOP", "-f", "trainguard.agent"], check=True)
        else:
            cluster.link_down("host2")
        deadline = time.monotonic() + NODE_TIMEOUT + 60
        while "attempt 1: launching" not in job.output() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "attempt 1: launching" in job.output(), job.output()[-3000:]
        # Fenced before the relaunch: the lost host's agent and rank are gone by now.
        assert rank_pids(cluster, "host2", MARKER) == [], job.output()[-3000:]
        assert rank_pids(cluster, "host2", "trainguard.agent") == [], job.output()[-3000:]
    finally:
        if how == "link_down":
            cluster.link_up("host2")
    summary = job.wait()
    assert summary["status"] == "succeeded", job.output()[-3000:]
    assert len(summary["attempts"]) == 2, job.output()[-3000:]  # exactly one relaunch
    assert [e["node"] for e in summary["exclusions"]] == ["host2"]
    assert summary["attempts"][-1]["nodes"] == ["host1", "host4", "host3"]
    stale = _beats(job, "host2", 0)
    fresh = [t for node in ("host1", "host3", "host4") for t in _beats(job, node, 1)]
    assert stale and fresh
    # Nothing written by the lost host's rank once the new attempt runs.
    assert stale[-1] < min(fresh), (stale[-3:], min(fresh))
    assert read_epoch(job.ckpt / "rank1") == 1  # host4's new rank 1 fenced the old one
    assert rank_pids(cluster, "host2", "trainguard.agent") == []
    assert rank_pids(cluster, "host2", MARKER) == []


@pytest.mark.parametrize("how", ["agent_stopped", "link_down"])
def test_a_lost_host_is_fenced_before_the_relaunch(
        cluster: HostCluster, tmp_path: Path, how: str) -> None:
    job = Job(cluster, tmp_path, f"fence-{how}", steps=60,
              extra=["--node-timeout", str(NODE_TIMEOUT), "--hang-timeout", "60"])
    _lose_host2_and_check_the_fence(cluster, job, how)


def _responding(slurm: SlurmHostCluster, node: str, timeout_s: float = 120.0) -> None:
    """Wait until slurmctld hears from ``node``'s slurmd again (state without ``*``): the case
    before fences host2, and its slurmd may not answer pings for a while after."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state = slurm.run(["sinfo", "-h", "-n", node, "-o", "%T"]).stdout.strip()
        if state and not state.endswith("*") and "not_responding" not in state.lower():
            return
        time.sleep(0.5)
    raise AssertionError(f"{node} is still not responding to slurmctld: {state!r}")


@pytest.mark.parametrize("mode", ["allocation", "submit"])
def test_a_stopped_agent_is_fenced_through_slurm(
        slurm: SlurmHostCluster, tmp_path: Path, mode: str) -> None:
    slurm.run(["scontrol", "update", "nodename=host2", "state=resume"])
    _responding(slurm, "host2")
    wrapper = ["salloc", "-N4", "--no-kill", f"--nodelist={','.join(HOSTS)}", "--"] \
        if mode == "allocation" else []
    job = Job(slurm.cluster, tmp_path, f"sfence-{mode}", steps=60, env=slurm.env(),
              wrapper=wrapper, backend=["--backend", "slurm", "--slurm-mode", mode],
              extra=["--node-timeout", str(NODE_TIMEOUT), "--hang-timeout", "60"])
    try:
        _lose_host2_and_check_the_fence(slurm.cluster, job, "agent_stopped")
        shown = slurm.run(["scontrol", "show", "node", "host2"]).stdout
        assert "DRAIN" in shown, shown
    finally:
        slurm.run(["scontrol", "update", "nodename=host2", "state=resume"])
