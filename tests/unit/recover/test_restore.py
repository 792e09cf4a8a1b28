"""The supervisor's snapshot coordinator against a fake plane: what each relaunch restores,
and what the records say."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pytest

from trainguard.errors import SnapshotError
from trainguard.recover.launchplan import LaunchPlan, RankLaunch
from trainguard.recover.records import AttemptResult
from trainguard.recover.restore import FIRST, RestoreChoice, SnapshotCoordinator, best_step
from trainguard.recover.spec import JobSpec
from trainguard.snapshot.plane import ShardCopy


class FakePlane:
    """Copies handed out as a test queues them; fetches succeed unless told otherwise."""

    def __init__(self) -> None:
        self.queued: list[ShardCopy] = []
        self.begun: list[tuple[int, tuple[str, ...], dict[str, str]]] = []
        self.fetches: list[tuple[int, str, str]] = []
        self.lost_nodes: list[str] = []
        self.closed: list[bool] = []
        self.copies_calls = 0
        self.fail_fetch = False

    def begin(self, attempt: int, nodes: tuple[str, ...], buddies: Mapping[str, str]) -> None:
        self.begun.append((attempt, nodes, dict(buddies)))

    def copies(self) -> list[ShardCopy]:
        self.copies_calls += 1
        out, self.queued = self.queued, []
        return out

    def fetch(self, rank: int, copy: ShardCopy, to_node: str, timeout_s: float) -> ShardCopy:
        self.fetches.append((rank, copy.holder, to_node))
        if self.fail_fetch:
            raise SnapshotError(f"{copy.holder} did not answer")
        return ShardCopy(rank, copy.step, copy.attempt, copy.digest, to_node, "fetched",
                         f"/shm/r/{to_node}/fetched/rank{rank:05d}.snap")

    def lost(self, node: str) -> None:
        self.lost_nodes.append(node)

    def close(self, remove: bool) -> None:
        self.closed.append(remove)


def _copy(rank: int, step: int, holder: str, kind: str = "own") -> ShardCopy:
    return ShardCopy(rank, step, 0, f"d{rank}{step}", holder, kind,  # type: ignore[arg-type]
                     f"/shm/r/{holder}/{kind}/rank{rank:05d}")


def _replicated(step: int) -> list[ShardCopy]:
    """Rank 0 on n1 (replica on n2), rank 1 on n2 (replica on n1)."""
    return [_copy(0, step, "n1"), _copy(0, step, "n2", "replica"),
            _copy(1, step, "n2"), _copy(1, step, "n1", "replica")]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[SnapshotCoordinator, FakePlane, list[str], list[float]]:
    spec = JobSpec(command=("python", "t.py"), nodes=("n1", "n2"), spares=("n3",),
                   nproc_per_node=1, run_dir=tmp_path)
    plane, said, now = FakePlane(), [], [100.0]
    coord = SnapshotCoordinator(plane, spec, clock=lambda: now[0], status=said.append)
    coord.begin(0, ("n1", "n2"), ("n3",))
    return coord, plane, said, now


def test_a_rank_killed_restores_every_rank_from_its_own_memory(setup) -> None:  # type: ignore[no-untyped-def]
    coord, plane, said, _ = setup
    plane.queued = _replicated(10) + _replicated(20)
    choice = coord.choose(("n1", "n2"), ("n3",))
    assert (choice.source, choice.step) == ("memory", 20)
    env = {r: json.loads(v) for r, v in choice.restore.items()}
    assert env[1] == {"step": 20, "attempt": 0, "digest": "d120", "source": "local",
                      "holder": "n2", "path": env[1]["path"]}
    assert env[1]["path"].startswith("/shm/r/n2/")
    assert plane.fetches == [] and "step 20 (2 shard(s) local)" in said[-1]
    doc = json.loads((coord.spec.run_dir / "snapshots.json").read_text())
    assert doc["format"] == "trainguard-snapshots/1" and doc["manifest"]


def test_a_lost_node_is_replaced_by_the_spare_with_its_shards_from_the_buddy(setup) -> None:  # type: ignore[no-untyped-def]
    coord, plane, said, _ = setup
    plane.queued = _replicated(20)
    coord.poll(force=True)
    coord.lose(["n2"])
    assert plane.lost_nodes == ["n2"] and coord.fenced == {"n2"}
    choice = coord.choose(("n1", "n3"), ())
    assert (choice.source, choice.step) == ("mixed", 20)
    assert plane.fetches == [(1, "n1", "n3")]
    rank1 = json.loads(choice.restore[1])
    assert (rank1["source"], rank1["holder"]) == ("buddy", "n1")
    assert rank1["path"] == "/shm/r/n3/fetched/rank00001.snap"
    assert "fetched from buddies" in said[-1]
    coord.lose(["n2"])  # once is enough
    assert plane.lost_nodes == ["n2"]


def test_a_failed_fetch_falls_back_to_disk_and_says_why(setup) -> None:  # type: ignore[no-untyped-def]
    coord, plane, said, _ = setup
    plane.queued, plane.fail_fetch = _replicated(20), True
    coord.poll(force=True)
    coord.lose(["n2"])
    choice = coord.choose(("n1", "n3"), ())
    assert choice.source == "disk" and choice.restore == {}
    assert "n1 did not answer" in choice.why and said[-1].startswith("restoring from the disk")


def test_without_a_second_copy_nothing_is_complete_so_disk(setup) -> None:  # type: ignore[no-untyped-def]
    coord, plane, _, _ = setup
    plane.queued = [_copy(0, 20, "n1"), _copy(1, 20, "n2")]  # not replicated yet
    coord.lose(["n2"])
    assert coord.choose(("n1", "n3"), ()).source == "disk"


def test_copies_on_a_fenced_host_are_ignored(setup) -> None:  # type: ignore[no-untyped-def]
    coord, plane, _, _ = setup
    coord.lose(["n2"])
    plane.queued = _replicated(20)  # n2 comes back with its copies: fenced
    coord.poll(force=True)
    assert coord.choose(("n1", "n3"), ()).source == "disk"


def test_polls_are_throttled_on_the_injected_clock(setup) -> None:  # type: ignore[no-untyped-def]
    coord, plane, _, now = setup
    coord.poll()
    coord.poll()
    assert plane.copies_calls == 1
    now[0] += 0.3
    coord.poll()
    assert plane.copies_calls == 2


def _result(codes: dict[int, int | None], last_step: int | None = None,
            resumed: int | None = None, source: str | None = None) -> AttemptResult:
    status = "succeeded" if all(c == 0 for c in codes.values()) else "failed"
    return AttemptResult(1, ("n1", "n2"), 0.0, 1.0, status, codes, last_step=last_step,
                         resumed_from_step=resumed, resume_source=source)


def test_a_snapshot_error_tries_another_copy_then_the_disk(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    coord, plane, _, _ = setup
    plane.queued = _replicated(20)
    choice = coord.choose(("n1", "n2"), ("n3",))
    logs = []
    for rank, text in ((0, "ok\n"), (1, "trainguard.errors.SnapshotError: slot torn\n")):
        logs.append(tmp_path / f"rank{rank}.log")
        logs[-1].write_text(text)
    plan = LaunchPlan(1, ("python",), ("n1", "n2"), tuple(
        RankLaunch(r, 0, n, r, {}, logs[r]) for r, n in ((0, "n1"), (1, "n2"))), tmp_path)
    coord.after(plan, _result({0: -15, 1: 1}), choice)
    # First: rank 1's copy that did not verify is forgotten; its buddy's replica of the
    # same snapshot is the next source.
    retry = coord.choose(("n1", "n2"), ("n3",))
    assert retry.step == choice.step
    assert retry.per_rank[1]["holder"] != choice.per_rank[1]["holder"]
    assert retry.per_rank[0] == choice.per_rank[0]
    # Failing again: the disk, for the next attempt only.
    coord.after(plan, _result({0: -15, 1: 1}), retry)
    again = coord.choose(("n1", "n2"), ("n3",))
    assert again.source == "disk" and "rank(s) 1 could not restore" in again.why


@pytest.mark.parametrize(("choice", "result", "best", "expected"), [
    (RestoreChoice("memory", 20), _result({0: 0}), 23, ("memory", 20, 3)),
    (RestoreChoice("memory", 20), _result({0: 0}, resumed=10, source="disk"), 23,
     ("disk", 10, 13)),
    (RestoreChoice("disk", None), _result({0: 0}, resumed=10, source="disk"), 15,
     ("disk", 10, 5)),
    (FIRST, _result({0: 0}, source="disk"), None, ("none", None, None)),
    (RestoreChoice("disk", None), _result({0: 0}, source="disk"), 7, ("none", None, 7)),
    # No rank reported a resume (a script without the SDK): not "from scratch", unknown.
    (FIRST, _result({0: 0}), None, ("unknown", None, None)),
    (RestoreChoice("disk", None), _result({0: 0}), 7, ("unknown", None, 7)),
])
def test_the_record_says_source_step_and_steps_lost(
        choice: RestoreChoice, result: AttemptResult, best: int | None,
        expected: tuple[str, int | None, int | None]) -> None:
    rec = choice.record(result, best)
    assert (rec["source"], rec["step"], rec["steps_lost"]) == expected


def test_best_step_and_close_once(setup) -> None:  # type: ignore[no-untyped-def]
    coord, plane, _, _ = setup
    assert best_step([_result({0: 1}, last_step=12), _result({0: 1}, last_step=9),
                      _result({0: 1})]) == 12
    assert best_step([]) is None
    coord.close()
    coord.close()
    assert plane.closed == [True]
    assert plane.begun[0][:2] == (0, ("n1", "n2"))


def test_a_newer_disk_checkpoint_wins_over_an_older_snapshot(setup) -> None:  # type: ignore[no-untyped-def]
    """A memory snapshot older than the newest disk checkpoint is never restored (e.g. the
    first snapshot, of step 1, after a NaN rollback to the checkpoint of step 10)."""
    coord, plane, _, _ = setup
    plane.queued = _replicated(20)
    assert coord.choose(("n1", "n2"), ("n3",), None, {10}).source == "memory"
    # A tie: memory (the faster read).
    assert coord.choose(("n1", "n2"), ("n3",), None, {20}).source == "memory"
    later = coord.choose(("n1", "n2"), ("n3",), None, {10, 30})
    assert later.source == "disk" and "step 30" in later.why
    # The rollback limit bounds the disk checkpoint too: 20 is above it, the snapshot is not.
    assert coord.choose(("n1", "n2"), ("n3",), 25, {10, 30}).source == "memory"  # 30 > 25


def test_a_complete_snapshot_proves_a_step_the_ranks_never_reported(setup) -> None:  # type: ignore[no-untyped-def]
    """The ranks' last report can lag the controller: a snapshot complete at step 24 counts
    as reached even when the attempt's record says 23, and only for later attempts."""
    coord, plane, _, _ = setup
    plane.queued = _replicated(20)
    coord.poll(force=True)
    plane.queued = [_copy(0, 24, "n1"), _copy(1, 24, "n2")]
    coord.poll(force=True)
    assert coord.reached_before(1) == 20  # step 24 has one copy per rank: not complete
    plane.queued = [_copy(0, 24, "n2", "replica"), _copy(1, 24, "n1", "replica")]
    coord.poll(force=True)
    coord.lose(["n1", "n2"])  # every copy gone: still proved
    assert (coord.reached_before(0), coord.reached_before(1)) == (None, 24)
    assert best_step([_result({0: 1}, last_step=23)], coord.reached_before(1)) == 24
    assert best_step([_result({0: 1}, last_step=30)], coord.reached_before(1)) == 30
