"""Buddies, the manifest's completeness rule and the restore decision (pure)."""

from __future__ import annotations

import pytest

from trainguard.errors import SnapshotError
from trainguard.snapshot.manifest import (
    Manifest,
    buddy_map,
    plan_buddies,
    plan_restore,
    steps_lost,
)
from trainguard.snapshot.plane import ShardCopy


def own(rank: int, step: int, node: str, attempt: int = 0, digest: str | None = None,
        slot: str = "a") -> ShardCopy:
    return ShardCopy(rank, step, attempt, digest or f"d{rank}-{step}-{attempt}", node, "own",
                     f"/{node}/own/rank{rank:05d}.{slot}")


def replica(rank: int, step: int, node: str, src: str, attempt: int = 0,
            digest: str | None = None, slot: str = "a") -> ShardCopy:
    return ShardCopy(rank, step, attempt, digest or f"d{rank}-{step}-{attempt}", node,
                     "replica", f"/{node}/replica/{src}/rank{rank:05d}.{slot}")


def snapshot(m: Manifest, step: int, placement: dict[int, str], buddies: dict[str, str],
             attempt: int = 0, slot: str = "a") -> None:
    """Every rank's own copy and its replica on the buddy."""
    for rank, node in placement.items():
        assert m.add(own(rank, step, node, attempt, slot=slot))
        assert m.add(replica(rank, step, buddies[node], node, attempt, slot=slot))


NODES = ["n1", "n2", "n3"]
PLACE = {0: "n1", 1: "n1", 2: "n2", 3: "n2", 4: "n3", 5: "n3"}


# -- buddies -------------------------------------------------------------------------------


def test_ring_without_domains_is_a_deterministic_cycle() -> None:
    m = buddy_map(NODES, [])
    assert m == {"n1": "n2", "n2": "n3", "n3": "n1"}
    assert buddy_map(NODES, []) == m
    assert all(b != n for n, b in m.items())


@pytest.mark.parametrize("domains", [
    {"a": "r1", "b": "r1", "c": "r2", "d": "r2"},
    {"a": "r1", "b": "r2", "c": "r1", "d": "r2"},
    {"a": "r1", "b": "r1", "c": "r1", "d": "r2"},
    {"a": "r1", "b": "r2", "c": "r3", "d": "r3"},
])
def test_buddy_in_another_failure_domain(domains: dict[str, str]) -> None:
    m = buddy_map(["a", "b", "c", "d"], [], domains)
    assert set(m) == {"a", "b", "c", "d"}
    for node, buddy in m.items():
        assert domains[buddy] != domains[node]


def test_balanced_domains_spread_replicas_evenly() -> None:
    domains = {"a": "r1", "b": "r1", "c": "r2", "d": "r2"}
    held = list(buddy_map(["a", "b", "c", "d"], [], domains).values())
    assert sorted(held) == ["a", "b", "c", "d"]


def test_spare_is_a_buddy_only_when_no_node_of_another_domain_can() -> None:
    assert buddy_map(["a", "b"], ["s"]) == {"a": "b", "b": "a"}
    domains = {"a": "r1", "b": "r1", "s": "r2"}
    assert buddy_map(["a", "b"], ["s"], domains) == {"a": "s", "b": "s"}
    assert buddy_map(["a"], ["s"]) == {"a": "s"}


def test_one_domain_falls_back_with_a_note_and_a_lone_node_has_no_buddy() -> None:
    plan = plan_buddies(["a", "b"], [], {"a": "r1", "b": "r1"})
    assert plan.buddies == {"a": "b", "b": "a"}
    assert any("no host outside failure domain 'r1'" in n for n in plan.notes)
    lone = plan_buddies(["a"], [])
    assert lone.buddies == {} and "never complete" in lone.notes[0]


def test_duplicate_host_is_refused() -> None:
    with pytest.raises(SnapshotError, match="named twice"):
        buddy_map(["a", "b"], ["a"])


def test_recomputed_after_a_spare_replaces_a_node() -> None:
    before = buddy_map(NODES, ["s"])
    after = buddy_map(["n1", "s", "n3"], [])
    assert before["n1"] == "n2" and after == {"n1": "s", "s": "n3", "n3": "n1"}


# -- completeness --------------------------------------------------------------------------


def test_complete_needs_two_distinct_holders_for_every_rank() -> None:
    m = Manifest()
    for rank, node in PLACE.items():
        m.add(own(rank, 10, node))
    assert m.complete_steps(6) == []
    # a second copy on the same host does not count
    m.add(ShardCopy(0, 10, 0, "d0-10-0", "n1", "fetched", "/n1/fetched/rank00000.snap"))
    assert m.complete_steps(6) == []
    for rank, node in PLACE.items():
        if rank != 5:
            m.add(replica(rank, 10, buddy_map(NODES, [])[node], node))
    assert m.complete_steps(6) == []
    m.add(replica(5, 10, "n1", "n3"))
    assert m.complete_steps(6) == [10]
    assert m.complete_steps(7) == []  # rank 6 has no copy at all


def test_digest_mismatch_is_refused_and_the_snapshot_never_complete() -> None:
    m = Manifest()
    assert m.add(own(0, 4, "n1", digest="aaaa"))
    assert not m.add(replica(0, 4, "n2", "n1", digest="bbbb"))
    assert "digest bbbb" in m.conflicts[0]
    assert all(c.digest == "aaaa" for c in m.copies())
    assert m.add(replica(0, 4, "n3", "n1", digest="aaaa"))
    assert m.complete_steps(1) == []


def test_double_buffering_keeps_the_two_newest_per_holder() -> None:
    m = Manifest()
    buddies = buddy_map(NODES, [])
    for i, step in enumerate((2, 4, 6)):
        snapshot(m, step, PLACE, buddies, slot="ab"[i % 2] + str(i))
    assert {c.step for c in m.copies()} == {4, 6}
    assert len([c for c in m.copies() if c.rank == 0 and c.holder == "n1"]) == 2
    assert m.complete_steps(6) == [4, 6]


def test_memory_is_bounded_however_many_snapshots() -> None:
    m = Manifest()
    buddies = buddy_map(NODES, [])
    for i, step in enumerate(range(0, 400, 4)):
        snapshot(m, step, PLACE, buddies, slot="ab"[i % 2])
    m.add(own(0, 1, "n1", slot="z"))  # older than both kept: obsolete, not kept
    assert len(m.copies()) == 2 * 2 * len(PLACE)
    assert m.complete_steps(6) == [392, 396]
    assert len(m._seen) == 2 * len(PLACE) and len(m._digest) == 2 * len(PLACE)


def test_a_copy_at_an_overwritten_path_is_gone() -> None:
    m = Manifest()
    m.add(own(0, 2, "n1", slot="a"))
    m.add(own(0, 4, "n1", slot="b"))
    m.add(own(0, 6, "n1", slot="a"))  # slot a rewritten: step 2 is no longer there
    assert [c.step for c in m.copies()] == [4, 6]


def test_to_json_lists_where_each_shard_lives() -> None:
    m = Manifest()
    snapshot(m, 8, {0: "n1", 1: "n2"}, {"n1": "n2", "n2": "n1"})
    doc = m.to_json(world=2)
    assert doc["complete"] == [{"step": 8, "attempt": 0}]
    assert {(c["rank"], c["holder"], c["kind"]) for c in doc["copies"]} == {
        (0, "n1", "own"), (0, "n2", "replica"), (1, "n2", "own"), (1, "n1", "replica")}


# -- restore -------------------------------------------------------------------------------


def _run(steps: tuple[int, ...] = (10, 20)) -> Manifest:
    m = Manifest()
    buddies = buddy_map(NODES, [])
    for i, step in enumerate(steps):
        snapshot(m, step, PLACE, buddies, slot="ab"[i % 2])
    return m


def test_all_hosts_alive_restores_the_newest_complete_step_locally() -> None:
    m = _run()
    m.add(own(0, 30, "n1", slot="a"))  # step 30 taken by rank 0 only: not complete
    plan = plan_restore(m, PLACE, set(NODES), 6)
    assert plan.step == 20 and plan.attempt == 0
    assert {s.kind for s in plan.per_rank.values()} == {"local"}
    assert plan.per_rank[2].holder == "n2" and plan.per_rank[2].copy.kind == "own"
    assert plan.per_rank[2].digest == "d2-20-0"


def test_host_lost_its_ranks_read_the_buddy() -> None:
    m = _run()
    m.drop_holder("n2")
    placement = {**PLACE, 2: "s", 3: "s"}  # the spare replaces n2
    plan = plan_restore(m, placement, {"n1", "n3", "s"}, 6, {"n2"})
    assert plan.step == 20
    assert plan.per_rank[2].kind == "buddy" and plan.per_rank[2].holder == "n3"
    assert plan.per_rank[2].copy.kind == "replica"
    assert plan.per_rank[0].kind == "local"


def test_spare_that_held_the_replicas_restores_locally() -> None:
    m = Manifest()
    buddies = buddy_map(["a", "b"], ["s"], {"a": "r1", "b": "r1", "s": "r2"})
    snapshot(m, 5, {0: "a", 1: "b"}, buddies)
    m.drop_holder("a")
    plan = plan_restore(m, {0: "s", 1: "b"}, {"b", "s"}, 2, {"a"})
    assert plan.step == 5 and plan.per_rank[0].kind == "local" and plan.per_rank[0].holder == "s"


def test_host_and_its_buddy_lost_means_disk_with_a_clear_why() -> None:
    m = _run()
    m.drop_holder("n2")
    m.drop_holder("n3")  # n2's buddy
    plan = plan_restore(m, {**PLACE, 2: "s", 3: "s", 4: "t", 5: "t"}, {"n1", "s", "t"}, 6,
                        {"n2", "n3"})
    assert plan.step is None and plan.per_rank == {}
    assert "lost rank 2" in plan.why and "restoring from disk" in plan.why


def test_no_complete_snapshot_says_so() -> None:
    m = Manifest()
    m.add(own(0, 3, "n1"))
    plan = plan_restore(m, {0: "n1"}, {"n1"}, 1)
    assert plan.step is None and "no memory snapshot was complete" in plan.why


def test_older_complete_step_used_when_the_newest_lost_a_rank() -> None:
    # step 30's replicas of n2 went to n3; step 20's (an earlier buddy map) to n1. With n2
    # and n3 lost, only step 20 has a live copy of every rank.
    m = Manifest()
    snapshot(m, 20, PLACE, {"n1": "n2", "n2": "n1", "n3": "n1"}, slot="a")
    snapshot(m, 30, PLACE, {"n1": "n2", "n2": "n3", "n3": "n1"}, slot="b")
    m.drop_holder("n2")
    m.drop_holder("n3")
    plan = plan_restore(m, {**PLACE, 2: "n1", 3: "n1", 4: "n1", 5: "n1"}, {"n1"}, 6,
                        {"n2", "n3"})
    assert plan.step == 20
    assert "step 30" in plan.why and all(s.holder == "n1" for s in plan.per_rank.values())


def test_fenced_hosts_copies_are_never_a_source() -> None:
    m = _run()
    # n2 came back stale: it is live but fenced; its own copies must not be read
    plan = plan_restore(m, PLACE, set(NODES), 6, fenced={"n2"})
    assert plan.step == 20
    assert all(s.holder != "n2" for s in plan.per_rank.values())
    assert plan.per_rank[2].kind == "buddy" and plan.per_rank[2].holder == "n3"
    # fencing n2 and n3 leaves rank 2 (own on n2, replica on n3) without a source
    assert plan_restore(m, PLACE, set(NODES), 6, fenced={"n2", "n3"}).step is None


def test_completeness_survives_dropping_a_holder_but_not_unknown_ranks() -> None:
    m = _run((10,))
    m.drop_holder("n1")
    assert m.complete_steps(6) == []
    assert m.complete(6, ever=True) == [(10, 0)]


def test_newer_attempt_preferred_at_the_same_step() -> None:
    m = Manifest()
    snapshot(m, 10, {0: "n1"}, {"n1": "n2"}, attempt=0, slot="a")
    snapshot(m, 10, {0: "n1"}, {"n1": "n2"}, attempt=1, slot="b")
    plan = plan_restore(m, {0: "n1"}, {"n1", "n2"}, 1)
    assert (plan.step, plan.attempt) == (10, 1)


@pytest.mark.parametrize(("reached", "restored", "lost"),
                         [(43, 40, 3), (40, 40, 0), (43, None, None), (None, 4, None),
                          (5, 8, 0)])
def test_steps_lost(reached: int | None, restored: int | None, lost: int | None) -> None:
    assert steps_lost(reached, restored) == lost


def test_a_rollback_limit_excludes_newer_snapshots() -> None:
    """After a NaN loss the supervisor rolls back below the bad step: the snapshots taken
    after it hold the bad state and must never be restored."""
    m = _run()  # complete at steps 10 and 20
    assert plan_restore(m, PLACE, set(NODES), 6).step == 20
    assert plan_restore(m, PLACE, set(NODES), 6, max_step=19).step == 10
    plan = plan_restore(m, PLACE, set(NODES), 6, max_step=5)
    assert plan.step is None and "at or below step 5" in plan.why
