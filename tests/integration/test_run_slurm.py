"""`trainguard run --backend slurm` on a real Slurm cluster (4 virtual nodes on this machine):
both modes, an XID on node2 drains it with the evidence as the reason, the resubmission
excludes it, `trainguard nodes` lists it, and nothing goes through a shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import SlurmCluster

from trainguard.recover.slurm.commands import SlurmCommands

pytest.importorskip("torch", reason="the example needs torch (pip install torch==2.13.0)")
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_gpt.py"
PLAIN = Path(__file__).parent / "scripts" / "plain_job.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]
STEPS = 40


def gpt_args(tmp: Path) -> list[str]:
    return [sys.executable, str(EXAMPLE), "--steps", str(STEPS), "--ckpt-every", "10",
            "--ckpt-dir", str(tmp / "ckpt"), "--loss-log", str(tmp / "loss.txt")]


def final_loss(tmp: Path) -> str:
    last = (tmp / "loss.txt").read_text().splitlines()[-1].split()
    assert int(last[0]) == STEPS - 1
    return last[1]


def summary(tmp: Path) -> dict[str, Any]:
    return json.loads((tmp / "run" / "summary.json").read_text())  # type: ignore[no-any-return]


def tg(cluster: SlurmCluster, tmp: Path, *args: str, prefix: tuple[str, ...] = (),
       timeout: float = 300) -> subprocess.CompletedProcess[str]:
    # The single-host Slurm cluster checks the direct mode (rank wrapper, pid and exit files);
    # the agents through Slurm are checked on namespaced hosts (test_multihost_slurm.py).
    if args and args[0] == "run":
        args = ("run", "--no-agents", *args[1:])
    return subprocess.run([*prefix, *TG, *args], capture_output=True, text=True, cwd=tmp,
                          timeout=timeout, env={**os.environ, **cluster.env,
                                                "TRAINGUARD_DB": str(tmp / "tg.db")})


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The fault-free final loss at 3 ranks (local backend: the example is deterministic)."""
    tmp = tmp_path_factory.mktemp("reference")
    r = subprocess.run([*TG, "run", "-q", "--no-db", "--run-dir", str(tmp / "run"), "--nodes",
                        "a,b,c", "--", *gpt_args(tmp)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return final_loss(tmp)


@pytest.fixture
def commands(slurm_cluster: SlurmCluster) -> Iterator[SlurmCommands]:
    cmds = SlurmCommands(env=slurm_cluster.env)
    yield cmds
    for node, info in cmds.sinfo_nodes().items():  # leave the shared cluster as found
        if info.drained:
            cmds.resume(node)
    slurm_cluster.wait_idle(timeout_s=30)


XID = ("--inject", "xid:node=node2,xid=79,step=25", "--inject", "slow:step=25,delay=0.4")


def test_submit_mode_xid_drains_and_excludes_node2(slurm_cluster: SlurmCluster,
                                                   commands: SlurmCommands, tmp_path: Path,
                                                   reference: str) -> None:
    r = tg(slurm_cluster, tmp_path, "run", "-q", "--backend", "slurm", "--slurm-mode", "submit",
           "--run-dir", str(tmp_path / "run"), "--nodes", "node1,node2,node3", "--spares",
           "node4", *XID, "--", *gpt_args(tmp_path))
    assert r.returncode == 0, r.stderr
    assert final_loss(tmp_path) == reference
    s = summary(tmp_path)
    first, last = s["attempts"][0], s["attempts"][-1]
    assert first["failure_category"] == "gpu_hardware" and first["excluded_nodes"] == ["node2"]
    assert last["nodes"] == ["node1", "node4", "node3"] and last["status"] == "succeeded"
    # drained with the evidence as the reason
    info = commands.sinfo_nodes()["node2"]
    assert info.drained and "XID 79" in info.reason
    # the resubmission excluded it
    job = (tmp_path / "run" / "attempts" / str(last["index"]) / "job_id").read_text().strip()
    assert "node2" in commands.show_job(job).get("ExcNodeList", "")
    # and the store remembers it
    nodes = json.loads(tg(slurm_cluster, tmp_path, "nodes", "--json").stdout)["nodes"]
    node2 = next(n for n in nodes if n["node"] == "node2")
    assert node2["excluded"] and "XID 79" in node2["exclusion_reason"]
    # never used again until released: a later run cannot place a 3-node job without a spare
    again = tg(slurm_cluster, tmp_path, "run", "--backend", "slurm", "--slurm-mode", "submit",
               "--run-dir", str(tmp_path / "run2"), "--nodes", "node1,node2,node3", "--",
               sys.executable, str(PLAIN), "2")
    assert again.returncode == 2 and "excluded node(s) node2" in again.stderr
    released = tg(slurm_cluster, tmp_path, "nodes", "release", "node2", "--slurm")
    assert released.returncode == 0, released.stderr
    assert not commands.sinfo_nodes()["node2"].drained


def test_allocation_mode_relaunches_srun_steps_on_the_spare(
        slurm_cluster: SlurmCluster, commands: SlurmCommands, tmp_path: Path,
        reference: str) -> None:
    salloc = ("salloc", "-N", "4", "--job-name", "tg-alloc")
    r = tg(slurm_cluster, tmp_path, "run", "-q", "--backend", "slurm", "--run-dir",
           str(tmp_path / "run"), "--spares", "node4", *XID, "--", *gpt_args(tmp_path),
           prefix=salloc)
    assert r.returncode == 0, r.stderr
    assert final_loss(tmp_path) == reference
    s = summary(tmp_path)
    assert s["backend"] == "slurm" and s["nodes"] == ["node1", "node2", "node3"]
    assert s["attempts"][0]["excluded_nodes"] == ["node2"]
    assert s["attempts"][-1]["nodes"] == ["node1", "node4", "node3"]
    assert commands.sinfo_nodes()["node2"].drained


@pytest.mark.parametrize("hostile", ['quo"te\'s', "semi;colon", "$(reboot)", "new\nline",
                                     "with space", "`tick`"])
def test_hostile_job_names_and_reasons_never_reach_a_shell(
        slurm_cluster: SlurmCluster, commands: SlurmCommands, tmp_path: Path,
        hostile: str) -> None:
    # The evidence line itself carries the hostile text into the drain reason.
    klog = tmp_path / "run" / "nodes" / "node3" / "kern.log"
    klog.parent.mkdir(parents=True)
    klog.write_text(f"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name={hostile}, GPU has fallen "
                    "off the bus.\n".replace("\n", " ", 1 if "\n" in hostile else 0))
    r = tg(slurm_cluster, tmp_path, "run", "-q", "--backend", "slurm", "--slurm-mode", "submit",
           "--name", hostile, "--run-dir", str(tmp_path / "run"), "--nodes", "node1",
           "--spares", "node3", "--", sys.executable, str(PLAIN), "2")
    assert r.returncode == 0, r.stderr
    canary = Path("/tmp/trainguard-shell-canary")
    assert not canary.exists()
    reason = commands.sinfo_nodes()["node3"].reason
    for bad in ('"', "'", ";", "$(", "`", "\n"):
        assert bad not in reason
    job = (tmp_path / "run" / "attempts" / "0" / "job_id").read_text().strip()
    name = commands.show_job(job)["JobName"]
    for bad in ('"', "'", ";", "$(", "`", "\n", " "):
        assert bad not in name


@pytest.mark.parametrize("bad", ["node1;reboot", "node$(x)", "node 1", "node'1"])
def test_hostile_node_names_are_refused(slurm_cluster: SlurmCluster, tmp_path: Path,
                                        bad: str) -> None:
    r = tg(slurm_cluster, tmp_path, "run", "--backend", "slurm", "--slurm-mode", "submit",
           "--run-dir", str(tmp_path / "run"), "--nodes", bad, "--", "true")
    assert r.returncode == 2 and "invalid node name" in r.stderr and "Traceback" not in r.stderr
