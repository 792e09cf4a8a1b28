"""Issue 17's acceptance through Slurm: a ``slurmd`` inside each of 4 namespaced hosts
(3 nodes and a spare), ``slurmctld`` and the controller in the root namespace. The backend
starts one agent per node with ``srun --ntasks-per-node=1`` (allocation mode inside ``salloc``,
and submit mode); faults are made inside the hosts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from multihost_job import XID79, Job, _unavailable, no_job_left  # noqa: F401 (fixture)

from trainguard.devcluster import SlurmHostCluster, missing_requirements
from trainguard.devcluster.common import SLURM_PROGRAMS

pytestmark = [pytest.mark.integration, pytest.mark.multihost,
              pytest.mark.usefixtures("no_job_left")]

HOSTS = ("host1", "host2", "host3", "host4")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmHostCluster]:
    if os.geteuid() != 0:
        _unavailable("namespaced hosts need root")
    missing = missing_requirements() + missing_requirements(SLURM_PROGRAMS)
    if missing:
        _unavailable(f"missing: {', '.join(missing)}")
    with SlurmHostCluster(4, tmp_path_factory.mktemp("mhs") / "cluster") as s:
        yield s


def job(slurm: SlurmHostCluster, root: Path, name: str, mode: str) -> Job:
    wrapper = ["salloc", "-N4", "--no-kill", f"--nodelist={','.join(HOSTS)}", "--"] \
        if mode == "allocation" else []
    return Job(slurm.cluster, root, name, env=slurm.env(), wrapper=wrapper,
               backend=["--backend", "slurm", "--slurm-mode", mode])


@pytest.fixture(scope="module")
def baseline(slurm: SlurmHostCluster, tmp_path_factory: pytest.TempPathFactory) -> float:
    j = job(slurm, tmp_path_factory.mktemp("sbase"), "sbaseline", "allocation")
    summary = j.wait()
    assert summary["status"] == "succeeded", j.output()[-3000:]
    return j.final_loss()


@pytest.mark.parametrize("mode", ["allocation", "submit"])
def test_a_rank_killed_inside_host2_is_retried_through_slurm(
        slurm: SlurmHostCluster, baseline: float, tmp_path: Path, mode: str) -> None:
    j = job(slurm, tmp_path, f"skill-{mode}", mode)
    j.wait_for_step(12)
    slurm.cluster.run("host2", ["pkill", "-KILL", "-f", "plain_ddp.py"], check=True)
    summary = j.wait()
    assert summary["status"] == "succeeded", j.output()[-3000:]
    assert len(summary["attempts"]) == 2, j.attempts_why(summary)
    assert summary["exclusions"] == []
    assert j.final_loss() == baseline


def test_an_xid_on_host2_drains_it_with_the_xid_in_the_reason(
        slurm: SlurmHostCluster, baseline: float, tmp_path: Path) -> None:
    j = job(slurm, tmp_path, "sxid", "allocation")
    j.wait_for_step(12)
    slurm.cluster.run("host2", ["sh", "-c", f"echo '{XID79}' >> /var/log/kern.log"],
                      check=True)
    try:
        summary = j.wait()
        assert summary["status"] == "succeeded", j.output()[-3000:]
        assert [e["node"] for e in summary["exclusions"]] == ["host2"]
        assert summary["attempts"][-1]["nodes"] == ["host1", "host4", "host3"]
        shown = slurm.run(["scontrol", "show", "node", "host2"]).stdout
        assert "DRAIN" in shown and "79" in shown.split("Reason=", 1)[1], shown
        assert j.final_loss() == baseline
    finally:
        slurm.cluster.run("host2", ["sh", "-c", ": > /var/log/kern.log"], check=True)
        slurm.run(["scontrol", "update", "nodename=host2", "state=resume"])


def test_a_host_cut_off_is_lost_drained_and_replaced(
        slurm: SlurmHostCluster, baseline: float, tmp_path: Path) -> None:
    j = Job(slurm.cluster, tmp_path, "scut", env=slurm.env(),
            wrapper=["salloc", "-N4", "--no-kill", f"--nodelist={','.join(HOSTS)}", "--"],
            backend=["--backend", "slurm", "--slurm-mode", "allocation"],
            extra=["--node-timeout", "6", "--hang-timeout", "60"])
    j.wait_for_step(12)
    slurm.cluster.link_down("host2")
    try:
        summary = j.wait()
    finally:
        slurm.cluster.link_up("host2")
        slurm.run(["scontrol", "update", "nodename=host2", "state=resume"])
    assert summary["status"] == "succeeded", j.output()[-3000:]
    assert "node lost" in j.output()
    assert [e["node"] for e in summary["exclusions"]] == ["host2"]
    assert j.final_loss() == baseline
