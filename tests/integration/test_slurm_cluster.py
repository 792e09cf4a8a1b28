"""The Slurm test cluster, and trainguard.recover.slurm against it (real Slurm 22.05)."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster
from typer.testing import CliRunner

from trainguard.cli.slurm import app as slurm_app
from trainguard.recover.slurm import (
    SlurmCommands,
    compress_hostlist,
    expand_hostlist,
    import_history,
    load_history,
)
from trainguard.store import Store

pytestmark = pytest.mark.integration

ECHO_NODE = "srun bash -c 'echo $SLURMD_NODENAME'"  # hostname is the same on every virtual node
HOSTILE = 'xid 79; rm -rf / $(reboot) "quoted"\nnext'


def nodes_of(cluster: SlurmCluster, job: str) -> list[str]:
    """The node names a job printed (one line each), sorted."""
    return sorted(line for line in cluster.output(job).splitlines() if line.startswith("node"))


def drain_reasons(cluster: SlurmCluster) -> dict[str, str]:
    """``sinfo -R`` (full reasons: the default format cuts them at 20 characters)."""
    proc = cluster.run(["sinfo", "-h", "-R", "-o", "%N|%E"], check=True)
    pairs = (line.split("|", 1) for line in proc.stdout.splitlines() if line)
    return {node: reason for expr, reason in pairs for node in expand_hostlist(expr)}


# -- the cluster itself --------------------------------------------------------------------------


def test_exclude_runs_on_the_other_nodes(slurm_cluster: SlurmCluster) -> None:
    # node names resolve inside jobs (the slurmds' private /etc/hosts), e.g. for MASTER_ADDR
    script = f"{ECHO_NODE}; echo resolved=$(getent hosts node1 | cut -d' ' -f1)"
    job = slurm_cluster.sbatch(["-N2", "--exclude=node1"], script)
    assert slurm_cluster.wait_job(job) == "COMPLETED"
    assert nodes_of(slurm_cluster, job) == ["node2", "node3"]
    assert "resolved=127.0.0.1" in slurm_cluster.output(job)


def test_drained_node_is_avoided_until_resumed(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    cluster.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=xid 79"],
                check=True)
    try:
        assert drain_reasons(cluster) == {"node2": "xid 79"}
        job = cluster.sbatch(["-N3"], ECHO_NODE)
        assert cluster.wait_job(job) == "COMPLETED"
        assert nodes_of(cluster, job) == ["node1", "node3", "node4"]
    finally:
        cluster.run(["scontrol", "update", "nodename=node2", "state=resume"], check=True)
    cluster.wait_idle(timeout_s=10)
    assert drain_reasons(cluster) == {}


def test_failing_job_ends_failed(slurm_cluster: SlurmCluster) -> None:
    job = slurm_cluster.sbatch(["-N1"], "exit 3")
    assert slurm_cluster.wait_job(job) == "FAILED"
    shown = SlurmCommands(env=slurm_cluster.env).show_job(job)
    assert (shown["JobState"], shown["ExitCode"], shown["Reason"]) == ("FAILED", "3:0",
                                                                       "NonZeroExitCode")


# -- trainguard.recover.slurm against real Slurm -------------------------------------------------


def test_hostile_drain_reason_arrives_sanitized(slurm_cluster: SlurmCluster) -> None:
    slurm = SlurmCommands(env=slurm_cluster.env)
    slurm.drain("node3", HOSTILE)
    try:
        assert drain_reasons(slurm_cluster) == {"node3": "xid 79, rm -rf / (reboot) quoted next"}
        node = slurm.sinfo_nodes()["node3"]
        assert node.drained and node.reason == "xid 79, rm -rf / (reboot) quoted next"
    finally:
        slurm.resume("node3")
    slurm_cluster.wait_idle(timeout_s=10)
    assert slurm.sinfo_nodes()["node3"].reason is None


@pytest.mark.parametrize("expr", [
    "node1", "node1,node2", " node1 , node2 ", "node[1-3,7]", "gpu[001-003]", "n[8-11]",
    "n[08-11]", "n[98-101]", "n[01-3]", "n[1-03]", "n[3,1,2]", "rack[1-2]-n[01-02]",
    "n[1-2][3-4]", "node[1-2],gpu[3]", "[1-2]", "n1 n2", "",
])
def test_expand_hostlist_agrees_with_scontrol(slurm_cluster: SlurmCluster, expr: str) -> None:
    assert SlurmCommands(env=slurm_cluster.env).hostnames(expr) == expand_hostlist(expr)


@pytest.mark.parametrize("names", [
    ["node1", "node2", "node3", "node7"], ["gpu001", "gpu002", "gpu010"], ["n9", "n10", "n11"],
    ["a1", "a2", "b1"], ["rack1-n01", "rack1-n02", "rack2-n01"],
])
def test_compress_hostlist_agrees_with_scontrol(
    slurm_cluster: SlurmCluster, names: list[str]
) -> None:
    proc = slurm_cluster.run(["scontrol", "show", "hostlist", ",".join(names)], check=True)
    assert compress_hostlist(names) == proc.stdout.strip()


def test_import_history_of_real_jobs(slurm_cluster: SlurmCluster, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = slurm_cluster
    slurm = SlurmCommands(env=cluster.env)
    ok = cluster.sbatch(["-N2", "--job-name=tg ok"], ECHO_NODE)
    bad = cluster.sbatch(["-N1", "--job-name=tg-fail"], "exit 4")
    long = cluster.sbatch(["-N1", "--job-name=tg-cancel"], "srun sleep 300")
    assert cluster.wait_job(long, until=lambda s: s == "RUNNING") == "RUNNING"
    slurm.cancel(long)
    states = {j: cluster.wait_job(j) for j in (ok, bad, long)}
    assert states == {ok: "COMPLETED", bad: "FAILED", long: "CANCELLED"}

    history = load_history(slurm)  # no accounting here: the jobcomp file named in the config
    assert (history.source, history.location) == ("jobcomp", str(cluster.jobcomp))
    with Store.open(str(tmp_path / "tg.db")) as store:
        assert import_history(store, history.jobs).imported >= 3
        sessions = {s.external_id: s for s in store.sessions()}
        assert {j: sessions[j].status for j in (ok, bad, long)} == {
            ok: "succeeded", bad: "failed", long: "cancelled"}
        assert sessions[ok].name == "tg ok"
        (attempt,) = store.attempts(sessions[ok].id)
        assert attempt.nodes == tuple(nodes_of(cluster, ok))
        (attempt,) = store.attempts(sessions[bad].id)
        assert (attempt.exit_codes, attempt.failure_category) == ({"job": 4}, "unknown")
        again = import_history(store, load_history(slurm, source="squeue").jobs)
        assert again.imported == 0  # same jobs, other source: all known already

    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])
    result = CliRunner().invoke(slurm_app, ["import-history", "--db", str(tmp_path / "cli.db")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"jobcomp {cluster.jobcomp}:")
