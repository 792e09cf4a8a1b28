"""An agent's snapshot service (scanning, replication to the buddy, fetches) and the
controller's plane, wired together without the hub: real sockets on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent.snapplane import AgentSnapshotPlane
from trainguard.agent.snapshots import SnapshotService, copy_fields, remove_run, scan_copies
from trainguard.agent.validate import check_message
from trainguard.agent.wire import WireError
from trainguard.errors import SnapshotError
from trainguard.snapshot.layout import HostDirs
from trainguard.snapshot.plane import ShardCopy
from trainguard.snapshot.slot import read_verified, slot_paths, write_slot

SECRET = b"run-secret"


def _own(dirs: HostDirs, rank: int, step: int, payload: bytes, slot: int = 0) -> Path:
    path = slot_paths(dirs.own, rank)[slot]
    write_slot(path, payload, rank=rank, world=2, step=step, attempt=1, node=dirs.node)
    return path


def test_scan_finds_committed_copies_only(tmp_path: Path) -> None:
    dirs = HostDirs(tmp_path, "run", "n1").create()
    _own(dirs, 0, 4, b"aaaa")
    (dirs.own / "rank00001.a").write_bytes(b"\0" * 5000)  # torn: no header
    other = dirs.replica("n2")
    other.mkdir(parents=True)
    write_slot(other / "rank00001.b", b"bb", rank=1, world=2, step=3, attempt=1, node="n2")
    write_slot(other / "rank00002.a", b"cc", rank=1, world=2, step=3, attempt=1, node="n2")
    found = {(c.kind, c.rank, c.step, c.holder) for c in scan_copies(dirs)}
    assert found == {("own", 0, 4, "n1"), ("replica", 1, 3, "n1")}  # a misnamed slot skipped


def test_service_reads_the_slot_directories_only_when_there_is_news(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between commits a look costs one inotify read, not a header read per slot file; a
    commit in own/ is found at the next look, and a full look comes every FULL_SCAN_S."""
    import trainguard.agent.snapshots as snapshots

    scans: list[int] = []
    real = snapshots.scan_copies
    monkeypatch.setattr(snapshots, "scan_copies", lambda d: scans.append(1) or real(d))
    now = [100.0]
    dirs = HostDirs(tmp_path, "run", "n1")
    svc = SnapshotService(dirs, SECRET, 1, clock=lambda: now[0])
    try:
        svc.start()  # its thread looks too, on the same (test) clock
        svc.step()
        svc.take()
        scans.clear()
        for _ in range(5):
            now[0] += 0.05
            svc.step()
        assert scans == []
        _own(dirs, 0, 4, b"aaaa")
        svc.step()
        assert len(scans) == 1
        assert [c["step"] for m in svc.take() for c in m["copies"]] == [4]
        now[0] += snapshots.FULL_SCAN_S
        svc.step()
        assert len(scans) == 2
    finally:
        svc.close()


def test_service_reports_each_copy_once(tmp_path: Path) -> None:
    dirs = HostDirs(tmp_path, "run", "n1")
    svc = SnapshotService(dirs, SECRET, 1)
    try:
        svc.start()
        _own(dirs, 0, 4, b"aaaa")
        assert [c.step for c in svc.scan()] == [4]
        assert svc.scan() == []
        _own(dirs, 0, 6, b"bbbb", slot=1)
        assert [c.step for c in svc.scan()] == [6]
        msgs = svc.take()
        assert [m["t"] for m in msgs] == ["snapinv", "snapinv"]
        for msg in msgs:
            check_message(msg)
        assert dirs.lease.exists()
    finally:
        svc.close()


class _Hub:
    """What the plane sends, delivered straight to the services."""

    def __init__(self) -> None:
        self.services: dict[str, SnapshotService] = {}
        self.sent: list[tuple[str, Mapping[str, Any]]] = []
        self.replies: list[tuple[str, dict[str, Any]]] = []

    def send(self, node: str, msg: Mapping[str, Any]) -> bool:
        self.sent.append((node, msg))
        svc = self.services.get(node)
        if svc is None:
            return False
        if msg["t"] == "snapbuddy":
            svc.set_buddy(msg["node"], (msg["addr"], msg["port"]) if msg["node"] else None)
        elif msg["t"] == "snapfetch":
            copy = svc.fetch(msg)
            self.replies.append((node, {"t": "reply", "req": msg["req"],
                                        "copy": copy_fields(copy)}))
        return True


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[AgentSnapshotPlane, _Hub, dict[str, HostDirs]]]:
    hub = _Hub()
    plane = AgentSnapshotPlane(tmp_path, "run", ("n1", "n2"), hub.send)
    dirs = {n: HostDirs(tmp_path, "run", n) for n in ("n1", "n2")}
    try:
        yield plane, hub, dirs
    finally:
        for svc in hub.services.values():
            svc.close()


def _start(plane: AgentSnapshotPlane, hub: _Hub, dirs: dict[str, HostDirs]) -> None:
    for node, d in dirs.items():
        svc = hub.services[node] = SnapshotService(d, SECRET, 1)
        addr = svc.start()
        assert addr is not None
        plane.receive(node, {"t": "snapserve", "addr": addr[0], "port": addr[1]})
    plane.tick()


def _pump(plane: AgentSnapshotPlane, hub: _Hub) -> list[ShardCopy]:
    for svc in hub.services.values():
        svc.step()
    for node, svc in hub.services.items():
        svc.scan()
        for msg in svc.take():
            check_message(msg)
            plane.receive(node, msg)
    replies, hub.replies = hub.replies, []
    for node, msg in replies:
        check_message(msg)
        if plane.claims(msg["req"]):
            plane.receive(node, msg)
    return plane.copies()


def test_own_slots_reach_the_buddy_and_come_back(
        cluster: tuple[AgentSnapshotPlane, _Hub, dict[str, HostDirs]]) -> None:
    plane, hub, dirs = cluster
    plane.begin(1, ("n1", "n2"), {"n1": "n2", "n2": "n1"})
    plane.launch_fields("n1")
    plane.launch_fields("n2")
    _start(plane, hub, dirs)
    _own(dirs["n1"], 0, 5, b"rank0-state")
    _own(dirs["n2"], 1, 5, b"rank1-state")
    copies = _pump(plane, hub)
    kinds = {(c.holder, c.kind, c.rank) for c in copies}
    assert kinds == {("n1", "own", 0), ("n2", "replica", 0), ("n2", "own", 1),
                     ("n1", "replica", 1)}
    assert _pump(plane, hub) == []  # never the same copy twice
    replica = next(c for c in copies if c.kind == "replica" and c.rank == 0)
    assert read_verified(Path(replica.path), None) == b"rank0-state"

    # n1 is replaced by n3 for the next attempt: rank 0's shard is fetched from n2
    plane.lost("n1")
    hub.services.pop("n1").close()
    planned = plane.fetch(0, replica, "n3", 30.0)
    assert planned.holder == "n3" and planned.kind == "fetched"
    plane.begin(2, ("n3", "n2"), {"n3": "n2", "n2": "n3"})
    assert plane.launch_fields("n3")["fetch"] == [0]
    dirs["n3"] = HostDirs(dirs["n1"].root, "run", "n3")
    for svc in hub.services.values():
        svc.close()
    hub.services.clear()
    del dirs["n1"]
    _start(plane, hub, dirs)
    got = _pump(plane, hub)
    fetched = [c for c in got if c.kind == "fetched"]
    assert fetched and fetched[0].holder == "n3" and fetched[0].digest == replica.digest
    assert read_verified(Path(fetched[0].path), None) == b"rank0-state"


def test_fetch_from_a_lost_host_is_refused(
        cluster: tuple[AgentSnapshotPlane, _Hub, dict[str, HostDirs]]) -> None:
    plane, _, _ = cluster
    plane.lost("n2")
    copy = ShardCopy(0, 5, 1, "00000000", "n2", "replica", "/x", 4)
    with pytest.raises(SnapshotError, match="n2 is lost"):
        plane.fetch(0, copy, "n1", 5.0)


def test_a_lying_inventory_is_rejected() -> None:
    with pytest.raises(WireError, match="kind"):
        check_message({"t": "snapinv", "copies": [
            {"rank": 0, "step": 1, "attempt": 0, "digest": "ab", "kind": "stolen",
             "path": "/x"}]})
    with pytest.raises(WireError, match="port"):
        check_message({"t": "snapserve", "addr": "10.0.0.1", "port": 0})


def test_remove_run_leaves_other_nodes(tmp_path: Path) -> None:
    a = HostDirs(tmp_path, "run", "n1").create()
    b = HostDirs(tmp_path, "run", "n2").create()
    assert remove_run(a) and not a.host.exists() and b.host.exists()
    assert remove_run(b) and not b.run.exists()
    assert not remove_run(b)


def test_a_fenced_service_neither_pushes_nor_serves(tmp_path: Path) -> None:
    live = [True]
    a = SnapshotService(HostDirs(tmp_path, "run", "n1"), SECRET, 1, live=lambda: live[0])
    b = SnapshotService(HostDirs(tmp_path, "run", "n2"), SECRET, 1)
    try:
        a.start()
        addr = b.start()
        assert addr is not None
        a.set_buddy("n2", addr)
        _own(a.dirs, 0, 1, b"one")
        assert a.push_new() == 1
        live[0] = False
        _own(a.dirs, 0, 2, b"two", slot=1)
        a.step()  # finds itself fenced: closes its server, pushes nothing
        assert a.push_new() == 0
        steps = {c.step for c in scan_copies(b.dirs) if c.kind == "replica"}
        assert steps == {1}
    finally:
        a.close()
        b.close()


def test_launch_field_names_root_run_and_fetches(tmp_path: Path) -> None:
    from trainguard.agent.remote import snapshot_field

    plane = AgentSnapshotPlane(tmp_path, "run", ("n1", "n2"), lambda node, msg: True)
    copy = ShardCopy(3, 5, 1, "0badcafe", "n2", "replica", "/x", 4)
    plane.fetch(3, copy, "n1", 12.0)
    field = snapshot_field(str(HostDirs(tmp_path, "run", "n1").host),
                           plane.launch_fields("n1"))
    assert field == {"root": str(tmp_path), "run": "run", "replicate": True, "fetch": [3],
                     "fetch_timeout_s": 12.0}
    assert plane.launch_fields("n1")["fetch"] == []  # handed to one launch only
    assert snapshot_field("/dev/shm/trainguard/r/n2", {})["replicate"] is False


def test_two_snapshots_between_looks_both_reach_the_buddy(tmp_path: Path) -> None:
    """Pushing only the newest would leave step 2 on one host: no step complete when
    the other hosts' agents happened to look between the two snapshots."""
    a = SnapshotService(HostDirs(tmp_path, "run", "n1"), SECRET, 1)
    b = SnapshotService(HostDirs(tmp_path, "run", "n2"), SECRET, 1)
    try:
        a.start()
        addr = b.start()
        assert addr is not None
        a.set_buddy("n2", addr)
        _own(a.dirs, 0, 2, b"two")
        _own(a.dirs, 0, 4, b"four", slot=1)
        assert a.push_new() == 2
        replicas = {c.step: c for c in scan_copies(b.dirs) if c.kind == "replica"}
        assert set(replicas) == {2, 4}
        assert read_verified(Path(replicas[2].path), None) == b"two"
        assert a.push_new() == 0  # both sent already
        _own(a.dirs, 0, 6, b"six")  # overwrites step 2's slot: only the new one goes
        assert a.push_new() == 1
        assert {c.step for c in scan_copies(b.dirs) if c.kind == "replica"} == {4, 6}
    finally:
        a.close()
        b.close()
