"""Issue 17's acceptance on a namespaced cluster: 4 hosts (3 nodes and a spare), each with its
own network, hostname, PID space and private /tmp and /var/log; the controller in the root
namespace reaches them only over the bridge.

Faults are made *inside* a host (``pkill`` in its PID namespace, a line appended to its own
/var/log/kern.log, its link cut, its agent killed), so the controller can only learn of them
from the agents. The job is an ordinary DDP script without the SDK.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from multihost_job import XID79, Job, _unavailable, no_job_left, rank_pids  # noqa: F401 (fixture)

from trainguard.devcluster import HostCluster, missing_requirements

pytestmark = [pytest.mark.integration, pytest.mark.multihost,
              pytest.mark.usefixtures("no_job_left")]



@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    import os

    if os.geteuid() != 0:
        _unavailable("namespaced hosts need root")
    missing = missing_requirements()
    if missing:
        _unavailable(f"missing programs: {', '.join(missing)}")
    root = tmp_path_factory.mktemp("mh")
    with HostCluster(4, root / "cluster") as c:
        yield c


@pytest.fixture(scope="module")
def baseline(cluster: HostCluster, tmp_path_factory: pytest.TempPathFactory) -> float:
    job = Job(cluster, tmp_path_factory.mktemp("base"), "baseline")
    summary = job.wait()
    assert summary["status"] == "succeeded", job.output()[-3000:]
    assert len(summary["attempts"]) == 1
    return job.final_loss()


def excluded(summary: dict[str, object]) -> list[str]:
    return [e["node"] for e in summary["exclusions"]]  # type: ignore[index, union-attr]


def test_a_rank_killed_inside_host2_is_retried_and_resumes(
        cluster: HostCluster, baseline: float, tmp_path: Path) -> None:
    job = Job(cluster, tmp_path, "kill")
    job.wait_for_step(12)
    cluster.run("host2", ["pkill", "-KILL", "-f", "plain_ddp.py"], check=True)
    summary = job.wait()
    assert summary["status"] == "succeeded", job.output()[-3000:]
    assert len(summary["attempts"]) == 2, job.attempts_why(summary)
    assert excluded(summary) == []
    assert "resumed from step-" in (job.run_dir / "attempts/1/host1/rank0.log").read_text()
    assert job.final_loss() == baseline


def test_an_xid_in_host2s_own_kernel_log_moves_the_job_to_the_spare(
        cluster: HostCluster, baseline: float, tmp_path: Path) -> None:
    job = Job(cluster, tmp_path, "xid")
    job.wait_for_step(12)
    cluster.run("host2", ["sh", "-c", f"echo '{XID79}' >> /var/log/kern.log"], check=True)
    assert not Path("/var/log/kern.log").exists() or XID79 not in \
        Path("/var/log/kern.log").read_text(errors="replace")  # host2's own file only
    try:
        summary = job.wait()
    finally:
        # "Repaired": a later run would otherwise (rightly) find the recent XID in host2's
        # log and leave host2 out from the start.
        cluster.run("host2", ["sh", "-c", ": > /var/log/kern.log"], check=True)
    assert summary["status"] == "succeeded", job.output()[-3000:]
    assert excluded(summary) == ["host2"]
    assert summary["exclusions"][0]["reason"].find("79") >= 0
    assert summary["attempts"][-1]["nodes"] == ["host1", "host4", "host3"]
    assert job.final_loss() == baseline


def test_a_rank_stopped_on_host3_is_a_hang_localized_to_host3(
        cluster: HostCluster, baseline: float, tmp_path: Path) -> None:
    hang_timeout = 8.0
    job = Job(cluster, tmp_path, "hang", extra=["--hang-timeout", str(hang_timeout)])
    job.wait_for_step(12)
    cluster.run("host3", ["pkill", "-STOP", "-f", "plain_ddp.py"], check=True)
    stopped_at = time.monotonic()
    while "s: hang" not in job.output() and time.monotonic() - stopped_at < hang_timeout + 30:
        time.sleep(0.1)
    # The others block in their next all-reduce within a step (0.2 s) of the stop.
    assert "s: hang" in job.output(), job.output()[-3000:]
    assert time.monotonic() - stopped_at < hang_timeout + 5
    hang = job.run_dir / "attempts" / "0" / "hang.json"
    summary = job.wait()
    assert summary["status"] == "succeeded", job.output()[-3000:]
    from typer.testing import CliRunner

    from trainguard.cli.main import app

    shown = CliRunner().invoke(app, ["diagnose", "hang", str(job.run_dir), "--attempt", "0"])
    assert shown.exit_code == 1, shown.output  # a hang found
    assert "host3" in shown.output and "rank 2" in shown.output
    import json

    doc = json.loads(hang.read_text())
    assert "plain_ddp.py" in doc["stacks"]["2"]  # the stopped rank's own Python stack
    assert job.final_loss() == baseline


@pytest.mark.parametrize("how", ["link_down", "agent_killed"])
def test_a_lost_host_is_excluded_and_the_job_resumes_on_the_spare(
        cluster: HostCluster, baseline: float, tmp_path: Path, how: str) -> None:
    node_timeout = 6.0
    job = Job(cluster, tmp_path, how, extra=["--node-timeout", str(node_timeout),
                                             "--hang-timeout", "60"])
    job.wait_for_step(12)
    cut = time.monotonic()
    try:
        if how == "link_down":
            cluster.link_down("host2")
        else:
            cluster.run("host2", ["pkill", "-KILL", "-f", "trainguard.agent"], check=True)
        deadline = cut + node_timeout + 5
        while "node lost" not in job.output() and time.monotonic() < deadline + 10:
            time.sleep(0.1)
        assert "node lost" in job.output(), job.output()[-3000:]
        assert time.monotonic() - cut < node_timeout + 5 + 1.0  # polling slack of this test
    finally:
        if how == "link_down":
            cluster.link_up("host2")
    summary = job.wait()
    assert summary["status"] == "succeeded", job.output()[-3000:]
    assert excluded(summary) == ["host2"]
    assert summary["attempts"][-1]["nodes"] == ["host1", "host4", "host3"]
    assert job.final_loss() == baseline
    # host2's agent gave up on its unreachable controller and stopped its rank.
    deadline = time.monotonic() + 30
    while rank_pids(cluster, "host2") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rank_pids(cluster, "host2") == []


def test_a_killed_controller_leaves_no_rank_on_any_host(
        cluster: HostCluster, tmp_path: Path) -> None:
    job = Job(cluster, tmp_path, "orphan", steps=400)
    job.wait_for_step(5)
    assert all(rank_pids(cluster, h) for h in ("host1", "host2", "host3"))
    job.kill()  # SIGKILL the controller
    killed = time.monotonic()
    while time.monotonic() - killed < 30 and any(
            rank_pids(cluster, h) for h in ("host1", "host2", "host3", "host4")):
        time.sleep(0.2)
    left = {h: rank_pids(cluster, h) for h in ("host1", "host2", "host3", "host4")}
    assert not any(left.values()), left
    left_agents = {h: rank_pids(cluster, h, "trainguard.agent") for h in ("host1", "host2")}
    assert not any(left_agents.values()), left_agents


def test_garbage_wrong_secret_and_oversized_frames_do_not_disturb_the_run(
        cluster: HostCluster, baseline: float, tmp_path: Path) -> None:
    from trainguard.agent.client import ask
    from trainguard.agent.wire import WireError, pack

    job = Job(cluster, tmp_path, "hostile")
    control = job.control()
    job.wait_for_step(5)
    host, port = str(control["host"]), int(control["port"])
    for payload in (b"\x00\xff" * 50_000, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                    pack({"t": "hello", "blob": b"x" * 900_000}, limit=1 << 21)):
        with socket.create_connection((host, port), timeout=5) as s:
            try:
                s.sendall(payload)
                s.settimeout(5)
                s.recv(65536)
            except OSError:
                pass
    with pytest.raises(WireError):
        ask(host, port, str(control["session"]), "not-the-secret", {"op": "signal"})
    summary = job.wait()
    assert summary["status"] == "succeeded", job.output()[-3000:]
    assert len(summary["attempts"]) == 1
    assert job.final_loss() == baseline
    assert "dropped" in job.output()  # each rejection was logged
