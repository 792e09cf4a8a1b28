"""The local backend's snapshot plane on real slot files (no torch)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from trainguard.errors import SnapshotError
from trainguard.snapshot.layout import HostDirs
from trainguard.snapshot.localplane import LocalPlane, fetched_path
from trainguard.snapshot.manifest import Manifest, plan_restore
from trainguard.snapshot.plane import ShardCopy
from trainguard.snapshot.slot import (
    HEADER_BYTES,
    Expected,
    invalidate,
    next_slot,
    read_verified,
    write_slot,
)

BUDDIES = {"n1": "n2", "n2": "n1"}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def plane(tmp_path: Path, clock: Clock | None = None) -> LocalPlane:
    p = LocalPlane(tmp_path, "run1", ("n1", "n2", "s"), poll_s=0.01,
                   clock=clock or Clock(), threaded=False)
    p.begin(0, ("n1", "n2"), BUDDIES)
    return p


def snap(tmp_path: Path, node: str, rank: int, step: int, payload: bytes = b"",
         attempt: int = 0) -> Path:
    own = HostDirs(tmp_path, "run1", node).own
    path = next_slot(own, rank)
    write_slot(path, payload or f"state {rank} {step}".encode(), rank=rank, world=2, step=step,
               attempt=attempt, node=node)
    return path


def test_committed_own_slot_is_replicated_to_the_buddy(tmp_path: Path) -> None:
    p = plane(tmp_path)
    snap(tmp_path, "n1", 0, 5)
    snap(tmp_path, "n2", 1, 5)
    assert p.pump() == 4
    got = {(c.rank, c.holder, c.kind) for c in p.copies()}
    assert got == {(0, "n1", "own"), (0, "n2", "replica"), (1, "n2", "own"),
                   (1, "n1", "replica")}
    assert p.copies() == []  # never the same copy twice
    assert p.pump() == 0
    replica = tmp_path / "run1" / "n2" / "replica" / "n1" / "rank00000.a"
    assert read_verified(replica, None, 0) == b"state 0 5"


def test_manifest_fed_by_the_plane_is_complete(tmp_path: Path) -> None:
    p = plane(tmp_path)
    m = Manifest()
    snap(tmp_path, "n1", 0, 5)
    snap(tmp_path, "n2", 1, 5)
    p.pump()
    for c in p.copies():
        assert m.add(c)
    assert m.complete_steps(2) == [5]


@pytest.mark.parametrize("damage", ["header zeroed", "payload changed"])
def test_torn_slot_is_never_replicated_nor_reported(tmp_path: Path, damage: str) -> None:
    p = plane(tmp_path)
    path = snap(tmp_path, "n1", 0, 5, b"x" * 100)
    if damage == "header zeroed":
        invalidate(path)
    else:
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, b"y", HEADER_BYTES + 10)
        os.close(fd)
    assert p.pump() == 0
    assert p.copies() == []
    assert not (tmp_path / "run1" / "n2" / "replica" / "n1" / "rank00000.a").exists()
    # a good snapshot written after it is handled
    snap(tmp_path, "n1", 0, 6)
    p.pump()
    assert {(c.step, c.kind) for c in p.copies()} == {(6, "own"), (6, "replica")}


def test_replicas_are_bounded_to_two_slots_per_source_rank(tmp_path: Path) -> None:
    p = plane(tmp_path)
    for step in range(1, 6):
        snap(tmp_path, "n1", 0, step)
        p.pump()
    replicas = [c for c in p.copies() if c.kind == "replica"]
    assert [c.step for c in replicas] == [1, 2, 3, 4, 5]
    files = sorted(f.name for f in (tmp_path / "run1" / "n2" / "replica" / "n1").iterdir())
    assert files == ["rank00000.a", "rank00000.b"]
    assert read_verified(Path(replicas[-1].path), Expected(5, 0, replicas[-1].digest)) == \
        b"state 0 5"


def test_new_buddy_gets_the_current_snapshot(tmp_path: Path) -> None:
    p = plane(tmp_path)
    snap(tmp_path, "n1", 0, 5)
    p.pump()
    p.copies()
    p.lost("n2")
    p.begin(1, ("n1",), {"n1": "s"})
    p.pump()
    assert [(c.holder, c.kind, c.step) for c in p.copies()] == [("s", "replica", 5)]


def test_fetch_copies_into_the_new_nodes_fetched_dir(tmp_path: Path) -> None:
    p = plane(tmp_path)
    m = Manifest()
    snap(tmp_path, "n1", 0, 5)
    snap(tmp_path, "n2", 1, 5)
    p.pump()
    for c in p.copies():
        m.add(c)
    p.lost("n1")
    m.drop_holder("n1")
    plan = plan_restore(m, {0: "s", 1: "n2"}, {"n2", "s"}, 2, {"n1"})
    src = plan.per_rank[0]
    assert src.kind == "buddy" and src.holder == "n2"
    got = p.fetch(0, src.copy, "s", timeout_s=5)
    assert got.kind == "fetched" and got.holder == "s"
    assert Path(got.path) == fetched_path(HostDirs(tmp_path, "run1", "s"), 0)
    assert read_verified(Path(got.path), Expected(5, 0, src.digest), 0) == b"state 0 5"
    assert p.copies() == [got]


def test_fetch_refuses_a_lost_holder_and_an_overwritten_slot(tmp_path: Path) -> None:
    p = plane(tmp_path)
    path = snap(tmp_path, "n1", 0, 5)
    p.pump()
    own = next(c for c in p.copies() if c.kind == "own")
    write_slot(path, b"newer", rank=0, world=2, step=9, attempt=0, node="n1")
    with pytest.raises(SnapshotError, match="overwritten"):
        p.fetch(0, own, "s", timeout_s=5)
    p.lost("n1")
    with pytest.raises(SnapshotError, match="lost"):
        p.fetch(0, own, "s", timeout_s=5)
    stale = ShardCopy(0, 5, 0, "0", "n2", "replica", str(tmp_path / "missing"))
    with pytest.raises(SnapshotError, match="missing"):
        p.fetch(0, stale, "s", timeout_s=5)


def test_leases_touched_every_second_on_the_injected_clock(tmp_path: Path) -> None:
    clock = Clock()
    p = plane(tmp_path, clock)
    lease = HostDirs(tmp_path, "run1", "s").lease
    p.pump()
    assert lease.exists()
    os.utime(lease, (1, 1))
    clock.t = 0.5
    p.pump()
    assert lease.stat().st_mtime == 1
    clock.t = 1.0
    p.pump()
    assert lease.stat().st_mtime > 1
    p.lost("s")
    os.utime(lease, (1, 1))
    clock.t = 5.0
    p.pump()
    assert lease.stat().st_mtime == 1


def test_thread_replicates_and_close_removes_the_run(tmp_path: Path) -> None:
    p = LocalPlane(tmp_path, "run1", ("n1", "n2"), poll_s=0.01)
    snap(tmp_path, "n1", 0, 5)
    p.begin(0, ("n1", "n2"), BUDDIES)
    done = threading.Event()
    seen: list[ShardCopy] = []
    for _ in range(3000):  # up to 30 s on a loaded machine
        seen += p.copies()
        if any(c.kind == "replica" for c in seen):
            done.set()
            break
        done.wait(0.01)
    assert done.is_set()
    p.close(remove=True)
    assert not (tmp_path / "run1").exists()
    assert [t for t in threading.enumerate() if t.name == "snapshot-replicator"] == []
    p.close(remove=True)  # idempotent


def test_close_without_remove_keeps_the_files(tmp_path: Path) -> None:
    p = plane(tmp_path)
    snap(tmp_path, "n1", 0, 5)
    p.close(remove=False)
    assert p.pump() == 0
    assert (tmp_path / "run1" / "n1" / "own" / "rank00000.a").exists()
