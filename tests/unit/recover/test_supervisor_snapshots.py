"""The supervisor with a backend that offers a snapshot plane: the relaunch restores memory,
the records say so, the plane is closed (directories removed) however the run ends."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from test_chain_driver import Backend, Clock, Ranks, _ranks, _spec

from trainguard.recover.launchplan import LaunchPlan
from trainguard.recover.supervisor import Supervisor
from trainguard.snapshot.plane import ShardCopy, SnapshotPlane


class Plane:
    def __init__(self, copies: list[ShardCopy]) -> None:
        self.queued, self.closed, self.begun = copies, [], []  # type: ignore[var-annotated]

    def begin(self, attempt: int, nodes: tuple[str, ...], buddies: Mapping[str, str]) -> None:
        self.begun.append((attempt, nodes))

    def copies(self) -> list[ShardCopy]:
        out, self.queued = self.queued, []
        return out

    def fetch(self, rank: int, copy: ShardCopy, to_node: str, timeout_s: float) -> ShardCopy:
        raise AssertionError("no fetch expected")

    def lost(self, node: str) -> None:
        pass

    def close(self, remove: bool) -> None:
        self.closed.append(remove)


class PlaneBackend(Backend):
    def __init__(self, clock: Clock, make: list[object], plane: Plane) -> None:
        super().__init__(clock, make)
        self.plane = plane
        self.plans: list[LaunchPlan] = []
        self.asked: list[tuple[Path, str, tuple[str, ...]]] = []

    def snapshot_plane(self, root: Path, run_id: str, nodes: tuple[str, ...]) -> SnapshotPlane:
        self.asked.append((root, run_id, nodes))
        return self.plane

    def launch(self, plan: LaunchPlan) -> Ranks:
        self.plans.append(plan)
        return super().launch(plan)


def _copies(step: int) -> list[ShardCopy]:
    out = []
    for rank, (own, buddy) in enumerate((("n1", "n2"), ("n2", "n1"))):
        for holder, kind in ((own, "own"), (buddy, "replica")):
            out.append(ShardCopy(rank, step, 0, f"d{rank}", holder, kind,  # type: ignore[arg-type]
                                 f"/shm/{holder}/{kind}/rank{rank}"))
    return out


def test_a_failed_attempt_is_relaunched_from_memory_and_recorded(tmp_path: Path) -> None:
    clock, plane = Clock(), Plane(_copies(20))
    backend = PlaneBackend(clock, [_ranks(1.0, 1), _ranks(1.0, 0)], plane)
    result = Supervisor(_spec(tmp_path), backend, clock=clock, sleep=clock.sleep).run()
    assert result.status == "succeeded"
    assert backend.asked[0][2] == ("n1", "n2", "n3")
    first, second = backend.plans
    assert "TRAINGUARD_RESTORE" not in first.ranks[0].env
    assert first.ranks[0].env["TRAINGUARD_SNAPSHOT_EVERY"] == "auto"
    assert first.host_dirs["n3"].endswith("/n3")
    restore = {rl.rank: json.loads(rl.env["TRAINGUARD_RESTORE"]) for rl in second.ranks}
    assert {r: (v["step"], v["source"]) for r, v in restore.items()} == {
        0: (20, "local"), 1: (20, "local")}
    records = [a.restore for a in result.attempts]
    # The fake ranks report no resume (as a script without the SDK): where attempt 0 started
    # is unknown, not "from scratch".
    assert records[0] is not None and records[0]["source"] == "unknown"
    assert records[1] is not None and (records[1]["source"], records[1]["step"]) == ("memory", 20)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["attempts"][1]["restore"]["source"] == "memory"
    assert (tmp_path / "run" / "snapshots.json").exists()
    assert plane.closed == [True] and [b[0] for b in plane.begun] == [0, 1]


def test_a_cancelled_run_still_removes_its_snapshots(tmp_path: Path) -> None:
    clock, plane = Clock(), Plane([])
    backend = PlaneBackend(clock, [_ranks(None, 0)], plane)
    sup = Supervisor(_spec(tmp_path), backend, clock=clock, sleep=clock.sleep)
    sup.cancel()
    assert sup.run().status == "cancelled"
    assert plane.closed == [True]


def test_snapshots_off_asks_for_no_plane(tmp_path: Path) -> None:
    clock, plane = Clock(), Plane([])
    backend = PlaneBackend(clock, [_ranks(1.0, 0)], plane)
    Supervisor(_spec(tmp_path, snapshot_every="off", warm=False), backend, clock=clock,
               sleep=clock.sleep).run()
    assert backend.asked == [] and backend.plans[0].host_dirs == {}
    assert not [k for k in backend.plans[0].ranks[0].env if "SNAPSHOT" in k or "WARM" in k]
