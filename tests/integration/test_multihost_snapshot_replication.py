"""The memory snapshot tier across namespaced hosts (issue 27): each host's shards reach its
buddy's memory (the buddy's own /dev/shm), survive the death of the host that took them, and
are fetched to a replacement host, which restores them bit for bit.

The controller runs here (an :class:`AgentBackend` whose agents are entered into each host);
a tiny rank script writes snapshot slots with :func:`trainguard.snapshot.slot.write_slot`.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from multihost_job import _unavailable

from trainguard.agent.backend import AgentBackend
from trainguard.agent.launch_local import LocalLauncher
from trainguard.agent.remote import RemoteAttempt
from trainguard.agent.snapplane import AgentSnapshotPlane
from trainguard.devcluster import HostCluster, missing_requirements
from trainguard.recover.launchplan import LaunchPlan, RankLaunch
from trainguard.recover.local import LocalBackend
from trainguard.snapshot.layout import HostDirs
from trainguard.snapshot.plane import ShardCopy

pytestmark = [pytest.mark.integration, pytest.mark.multihost]

ROOT = Path("/dev/shm/trainguard")
HOSTS = ("host1", "host2", "host3")
BUDDIES = {"host1": "host2", "host2": "host3", "host3": "host1"}
STEPS = 3

# Attempt 0: write STEPS snapshots (double-buffered), then wait to be stopped.
# Attempt 1: restore the slot named by RESTORE_* (bit for bit), print the result, exit.
RANK = r"""
import os, sys, time
from pathlib import Path
from trainguard.snapshot.slot import Expected, next_slot, read_verified, write_slot
rank = int(os.environ["RANK"])
def payload(step):
    return bytes((rank * 31 + step * 7 + i) % 251 for i in range(200_000))
if "RESTORE_PATH" in os.environ:
    got = read_verified(Path(os.environ["RESTORE_PATH"]), Expected(
        int(os.environ["RESTORE_STEP"]), 0, os.environ["RESTORE_DIGEST"]), rank)
    print("restored" if got == payload(int(os.environ["RESTORE_STEP"])) else "different",
          flush=True)
    sys.exit(0)
own = Path(os.environ["SNAP_DIR"]) / "own"
for step in range(1, int(os.environ["STEPS"]) + 1):
    write_slot(next_slot(own, rank), payload(step), rank=rank, world=3, step=step,
               attempt=0, node=os.environ["TRAINGUARD_NODE"])
    time.sleep(0.2)
print("written", flush=True)
time.sleep(120)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostCluster]:
    if os.geteuid() != 0:
        _unavailable("namespaced hosts need root")
    missing = missing_requirements()
    if missing:
        _unavailable(f"missing programs: {', '.join(missing)}")
    with HostCluster(len(HOSTS), tmp_path_factory.mktemp("mhsnap") / "cluster") as c:
        yield c


def _on(cluster: HostCluster, node: str, path: str) -> bool:
    """Whether ``path`` exists in ``node``'s own file system view."""
    return cluster.run(node, ["test", "-f", path], check=False).returncode == 0


def _plan(tmp: Path, attempt: int, placement: dict[int, str], run_id: str,
          env: dict[int, dict[str, str]]) -> LaunchPlan:
    ranks = []
    nodes = tuple(dict.fromkeys(placement.values()))
    for rank, node in sorted(placement.items()):
        out = tmp / f"a{attempt}" / node / f"rank{rank}.log"
        rank_env = {"RANK": str(rank), "STEPS": str(STEPS), "PYTHONUNBUFFERED": "1",
                    "SNAP_DIR": str(HostDirs(ROOT, run_id, node).host),
                    "TRAINGUARD_EVENTS": str(out.with_suffix(".events.jsonl")),
                    **env.get(rank, {})}
        ranks.append(RankLaunch(rank, 0, node, nodes.index(node), rank_env, out))
    return LaunchPlan(attempt, (sys.executable, "-c", RANK), nodes, tuple(ranks), Path("/"),
                      host_dirs={n: str(HostDirs(ROOT, run_id, n).host) for n in nodes})


def _collect(attempt: RemoteAttempt, plane: AgentSnapshotPlane, have: list[ShardCopy],
             done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        attempt.poll()
        have += plane.copies()
        if done():
            return
        time.sleep(0.05)


def _newest(have: list[ShardCopy], rank: int, kind: str) -> ShardCopy | None:
    found = [c for c in have if c.rank == rank and c.kind == kind and c.step == STEPS]
    return found[-1] if found else None


def test_shards_reach_the_buddys_memory_and_outlive_their_host(cluster: HostCluster,
                                                                tmp_path: Path) -> None:
    # Each host has its own memory: a file in host1's /dev/shm is not in host2's.
    marker = f"/dev/shm/tg-{uuid.uuid4().hex[:8]}"
    cluster.run("host1", ["touch", marker], check=True)
    assert _on(cluster, "host1", marker) and not _on(cluster, "host2", marker)

    run_id = f"r{uuid.uuid4().hex[:10]}"
    backend = AgentBackend(LocalBackend(), LocalLauncher(f"{cluster.enter_script} {{node}}"),
                           listen=cluster.bridge_addr, advertise=cluster.bridge_addr,
                           node_timeout_s=6.0, connect_timeout_s=60.0)
    attempts: list[RemoteAttempt] = []
    try:
        plane = backend.snapshot_plane(ROOT, run_id, HOSTS)
        assert isinstance(plane, AgentSnapshotPlane)
        placement = {0: "host1", 1: "host2", 2: "host3"}
        plane.begin(0, HOSTS, BUDDIES)
        first = backend.launch(_plan(tmp_path, 0, placement, run_id, {}))
        attempts.append(first)
        have: list[ShardCopy] = []

        def replicated() -> bool:
            return all(_newest(have, r, "own") and _newest(have, r, "replica")
                       for r in placement)

        _collect(first, plane, have, replicated, 90.0)
        assert replicated(), (have, first.errors)
        for rank, node in placement.items():
            own, replica = _newest(have, rank, "own"), _newest(have, rank, "replica")
            assert own is not None and replica is not None
            assert (own.holder, replica.holder) == (node, BUDDIES[node])
            assert own.digest == replica.digest and replica.payload_bytes == 200_000
            # in the buddy's own memory: there, not on the host that took it, not here
            assert _on(cluster, BUDDIES[node], replica.path)
            assert not _on(cluster, node, replica.path)
            assert not Path(replica.path).exists()
        assert len(have) == len({(c.holder, c.path, c.step, c.digest) for c in have})

        # host1 dies with its memory; its shard lives on in host2's memory.
        rank0 = _newest(have, 0, "replica")
        assert rank0 is not None
        cluster.kill_host("host1")
        assert _on(cluster, "host2", rank0.path)
        first.stop(1.0)
        first.close()
        plane.lost("host1")

        # The replacement (host3 takes rank 0) fetches it from host2 and restores it.
        planned = plane.fetch(0, rank0, "host3", 30.0)
        assert (planned.holder, planned.kind) == ("host3", "fetched")
        plane.begin(1, ("host3", "host2"), {"host3": "host2", "host2": "host3"})
        local = _newest(have, 1, "own")  # rank 1 stays on host2: its own slot
        assert local is not None
        env = {r: {"RESTORE_PATH": c.path, "RESTORE_STEP": str(c.step),
                   "RESTORE_DIGEST": c.digest} for r, c in ((0, planned), (1, local))}
        second = backend.launch(_plan(tmp_path, 1, {0: "host3", 1: "host2"}, run_id, env))
        attempts.append(second)
        exits: dict[int, int] = {}
        deadline = time.monotonic() + 90.0
        while len(exits) < 2 and time.monotonic() < deadline:
            exits.update({e.rank: e.returncode for e in second.poll()})
            have += plane.copies()
            time.sleep(0.05)
        for rank, node in ((0, "host3"), (1, "host2")):
            output = (tmp_path / "a1" / node / f"rank{rank}.log").read_text()
            assert exits.get(rank) == 0 and "restored" in output, (
                exits, output, second.errors, plane.failed)
        assert any(c.kind == "fetched" and c.holder == "host3" and c.digest == rank0.digest
                   for c in have)
        second.close()
        attempts.clear()

        # The run's end: its directories go from every live host.
        plane.close(remove=True)
        for node in ("host2", "host3"):
            assert not _on(cluster, node, str(HostDirs(ROOT, run_id, node).lease))
    finally:
        for attempt in attempts:
            attempt.stop(1.0)
            attempt.close()
        backend.close()
