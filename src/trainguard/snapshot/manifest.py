"""Where each rank's snapshot lives, and what a restart restores (controller side, pure).

- :func:`buddy_map`: each node's buddy, the host that holds its replicas.
- :class:`Manifest`: the copies the plane reported, double-buffered like the slots.
- :func:`plan_restore`: the newest snapshot complete for all ranks that still has a live copy
  of every rank, and where each rank reads it.

A snapshot is identified by ``(step, attempt)``. It is *complete* when every rank's shard was
in the memory of two distinct hosts (own slot + replica). Completeness is remembered when a
holder is dropped: a host lost after its snapshot was complete leaves the buddy's copy, which
is exactly what a restore reads.

    >>> m = Manifest()
    >>> for rank, node, buddy in ((0, "n1", "n2"), (1, "n2", "n1")):
    ...     _ = m.add(ShardCopy(rank, 8, 0, f"d{rank}", node, "own", f"/{node}/own/{rank}.a"))
    ...     _ = m.add(ShardCopy(rank, 8, 0, f"d{rank}", buddy, "replica", f"/{buddy}/r/{rank}"))
    >>> m.complete_steps(2)
    [8]
    >>> m.drop_holder("n1")
    >>> plan = plan_restore(m, {0: "n3", 1: "n2"}, {"n2", "n3"}, 2)
    >>> plan.step, plan.per_rank[0].kind, plan.per_rank[0].holder, plan.per_rank[1].kind
    (8, 'buddy', 'n2', 'local')
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trainguard.errors import SnapshotError
from trainguard.snapshot.plane import ShardCopy

SnapKey = tuple[int, int]
"""A snapshot: (step, attempt)."""

_KIND_ORDER = {"own": 0, "replica": 1, "fetched": 2}


# -- buddies -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BuddyPlan:
    """Each node's buddy, and why a rule could not be met (empty when all went well)."""

    buddies: Mapping[str, str]
    notes: tuple[str, ...] = ()


def plan_buddies(nodes: Sequence[str], spares: Sequence[str] = (),
                 domains: Mapping[str, str] | None = None) -> BuddyPlan:
    """Each node's buddy (see :func:`buddy_map` for the rules), with notes on fallbacks.

    >>> plan_buddies(["a"], []).notes
    ('a has no other host to replicate to: its snapshots never complete',)
    """
    _check_unique(nodes, spares)
    dom = {n: (domains.get(n, f"\0{n}") if domains is not None else f"\0{n}")
           for n in (*nodes, *spares)}
    ring = _interleave(nodes, dom)
    buddies: dict[str, str] = {}
    notes: list[str] = []
    for i, node in enumerate(ring):
        candidates = [*ring[i + 1:], *ring[:i], *spares]
        other = [c for c in candidates if dom[c] != dom[node]]
        if other:
            buddies[node] = other[0]
        elif candidates:
            buddies[node] = candidates[0]
            notes.append(f"{node}: no host outside failure domain {dom[node]!r}; "
                         f"replicating to {candidates[0]} in the same domain")
        else:
            notes.append(f"{node} has no other host to replicate to: its snapshots never "
                         "complete")
    return BuddyPlan({n: buddies[n] for n in nodes if n in buddies}, tuple(notes))


def buddy_map(nodes: Sequence[str], spares: Sequence[str] = (),
              domains: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each node -> the host that holds its replicas. Deterministic for the same arguments.

    Rules:
    1. A ring over ``nodes``, interleaved by failure domain (round robin over the domains in
       the order they first appear), so replicas spread evenly when domains are balanced.
    2. A node's buddy is the next host after it in the ring in *another* failure domain;
       ``spares`` come after every node (a spare holds replicas only when no running node of
       another domain can; an idle spare has the memory for it, and a spare that then replaces
       the node it backs restores locally).
    3. Without ``domains`` each host is its own domain (buddy = next node in the ring). A host
       missing from ``domains`` is its own domain too.
    4. When every other host shares the node's domain, the next host is used anyway (a copy in
       the same domain still survives a host loss); :func:`plan_buddies` says so in ``notes``.
       A lone node with no spare has no buddy (absent from the map): its snapshots never
       complete and restarts read the disk.
    After a node is replaced (by a spare or otherwise), call it again with the new nodes.

    >>> buddy_map(["a", "b", "c"], [])
    {'a': 'b', 'b': 'c', 'c': 'a'}
    >>> buddy_map(["a", "b", "c", "d"], [], {"a": "r1", "b": "r1", "c": "r2", "d": "r2"})
    {'a': 'c', 'b': 'd', 'c': 'b', 'd': 'a'}
    >>> buddy_map(["a", "b"], ["s"], {"a": "r1", "b": "r1", "s": "r2"})
    {'a': 's', 'b': 's'}
    """
    return dict(plan_buddies(nodes, spares, domains).buddies)


def _check_unique(nodes: Sequence[str], spares: Sequence[str]) -> None:
    seen: set[str] = set()
    for n in (*nodes, *spares):
        if n in seen:
            raise SnapshotError(f"host {n!r} is named twice among the nodes and spares")
        seen.add(n)


def _interleave(nodes: Sequence[str], dom: Mapping[str, str]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for n in nodes:
        groups.setdefault(dom[n], []).append(n)
    out: list[str] = []
    lists = list(groups.values())
    for i in range(max((len(g) for g in lists), default=0)):
        out.extend(g[i] for g in lists if i < len(g))
    return out


# -- the manifest ------------------------------------------------------------------------------


@dataclass
class Manifest:
    """The copies of each rank's snapshots, by holder (the supervisor owns one per run).

    - :meth:`add` keeps at most the 2 newest snapshots per (rank, holder, kind), like the
      slots; a copy at the same (holder, path) as an older one replaces it (the slot was
      overwritten).
    - The first digest recorded for a (rank, step, attempt) is its reference; a copy with
      another digest is refused, noted in ``conflicts``, and that snapshot never counts as
      complete (two writers claimed the same shard: neither is trusted).
    """

    _copies: dict[tuple[int, str, str], list[ShardCopy]] = field(default_factory=dict)
    _digest: dict[tuple[int, int, int], str] = field(default_factory=dict)
    _seen: dict[tuple[int, int, int], set[str]] = field(default_factory=dict)
    """(rank, step, attempt) -> every holder that ever had a verified copy (completeness)."""
    _disputed: set[tuple[int, int, int]] = field(default_factory=set)
    _where: dict[tuple[str, str], tuple[int, str, str]] = field(default_factory=dict)
    """(holder, path) -> the key of the copy stored there."""
    _live: dict[SnapKey, int] = field(default_factory=dict)
    """Snapshot -> how many copies of it are stored."""
    _idents: dict[SnapKey, set[tuple[int, int, int]]] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)

    def add(self, copy: ShardCopy) -> bool:
        """Record ``copy``; False when it was refused (digest conflict)."""
        ident = (copy.rank, copy.step, copy.attempt)
        ref = self._digest.setdefault(ident, copy.digest)
        if ref != copy.digest:
            self._disputed.add(ident)
            self.conflicts.append(
                f"rank {copy.rank} step {copy.step} attempt {copy.attempt}: {copy.kind} copy "
                f"on {copy.holder} has digest {copy.digest}, another copy has {ref}: refused")
            return False
        if (old := self._where.get((copy.holder, copy.path))) is not None:
            # the slot at this path was rewritten: the copy it held is gone
            self._set(old, [c for c in self._copies.get(old, []) if c.path != copy.path])
        key = (copy.rank, copy.holder, copy.kind)
        kept = [c for c in self._copies.get(key, []) if (c.step, c.attempt) != (
            copy.step, copy.attempt)]
        kept.append(copy)
        kept.sort(key=lambda c: (c.attempt, c.step), reverse=True)
        self._set(key, kept[:2])
        if copy not in kept[:2]:  # older than the 2 newest already held: obsolete
            if (copy.step, copy.attempt) not in self._live:
                self._digest.pop(ident, None)
            return True
        self._seen.setdefault(ident, set()).add(copy.holder)
        self._idents.setdefault((copy.step, copy.attempt), set()).add(ident)
        return True

    def discard(self, holder: str, path: str) -> bool:
        """The copy at ``path`` on ``holder`` did not verify (torn, overwritten): forget it
        (the snapshot's other copies stay usable). False when no such copy is held."""
        key = self._where.get((holder, path))
        if key is None:
            return False
        self._set(key, [c for c in self._copies.get(key, []) if c.path != path])
        return True

    def drop_holder(self, node: str) -> None:
        """``node`` is lost: its copies are gone (completeness already reached is kept)."""
        for key in [k for k in self._copies if k[1] == node]:
            self._set(key, [])

    def copies(self) -> list[ShardCopy]:
        """Every copy held now, sorted."""
        return sorted((c for kept in self._copies.values() for c in kept), key=_copy_order)

    def copies_of(self, rank: int, snap: SnapKey) -> list[ShardCopy]:
        """The copies of one rank's shard of snapshot ``snap`` (step, attempt)."""
        return self.by_rank(snap).get(rank, [])

    def by_rank(self, snap: SnapKey) -> dict[int, list[ShardCopy]]:
        """The copies of snapshot ``snap`` (step, attempt), by rank."""
        out: dict[int, list[ShardCopy]] = {}
        for c in self.copies():
            if (c.step, c.attempt) == snap:
                out.setdefault(c.rank, []).append(c)
        return out

    def complete(self, world: int, *, ever: bool = False) -> list[SnapKey]:
        """Snapshots (step, attempt), oldest first, where every rank 0..world-1 has copies on
        >= 2 distinct holders now (``ever``: at some time, and at least one copy is left)."""
        held: dict[tuple[int, int, int], set[str]] = {}
        for c in self.copies():
            held.setdefault((c.rank, c.step, c.attempt), set()).add(c.holder)
        source = self._seen if ever else held
        snaps = {(step, attempt) for (_, step, attempt) in held}
        return sorted(
            (s for s in snaps
             if all(len(source.get((r, *s), ())) >= 2 and (r, *s) not in self._disputed
                    for r in range(world))),
            key=lambda s: (s[0], s[1]))

    def complete_steps(self, world: int) -> list[int]:
        """The steps of :meth:`complete` snapshots, sorted."""
        return sorted({step for step, _ in self.complete(world)})

    def to_json(self, world: int | None = None) -> dict[str, Any]:
        """Where each shard lives (``run_dir/snapshots.json``); ``world`` adds the complete
        snapshots."""
        doc: dict[str, Any] = {
            "copies": [{"rank": c.rank, "step": c.step, "attempt": c.attempt,
                        "digest": c.digest, "holder": c.holder, "kind": c.kind,
                        "path": c.path, "payload_bytes": c.payload_bytes}
                       for c in self.copies()],
            "conflicts": list(self.conflicts)}
        if world is not None:
            doc["complete"] = [{"step": s, "attempt": a} for s, a in self.complete(world)]
        return doc

    def _set(self, key: tuple[int, str, str], copies: list[ShardCopy]) -> None:
        """Store ``copies`` under ``key``, keeping the indexes; a snapshot no copy of which
        is left has its history forgotten (bounded memory)."""
        before = self._copies.get(key, [])
        for c in copies:
            if c not in before:
                self._where[(c.holder, c.path)] = key
                snap = (c.step, c.attempt)
                self._live[snap] = self._live.get(snap, 0) + 1
        for c in before:
            if c in copies:
                continue
            if self._where.get((c.holder, c.path)) == key:
                del self._where[(c.holder, c.path)]
            snap = (c.step, c.attempt)
            self._live[snap] -= 1
            if not self._live[snap]:
                del self._live[snap]
                for ident in self._idents.pop(snap, set()):
                    self._seen.pop(ident, None)
                    self._digest.pop(ident, None)
                    self._disputed.discard(ident)
        if copies:
            self._copies[key] = copies
        else:
            self._copies.pop(key, None)


def _copy_order(c: ShardCopy) -> tuple[int, int, int, str, int, str]:
    return (c.step, c.attempt, c.rank, c.holder, _KIND_ORDER.get(c.kind, 9), c.path)


# -- restore -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankSource:
    """Where one rank reads its shard: ``local`` (a copy on its new host) or ``buddy`` (a
    copy on another live host, fetched to the new host before launch)."""

    kind: Literal["local", "buddy"]
    holder: str
    copy: ShardCopy

    @property
    def digest(self) -> str:
        return self.copy.digest


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """What the next attempt restores: ``step`` None means the disk checkpoint (``why``)."""

    step: int | None
    per_rank: Mapping[int, RankSource]
    why: str
    attempt: int | None = None
    """The attempt that took the chosen snapshot (its fencing epoch)."""


def plan_restore(manifest: Manifest, placement: Mapping[int, str], live: Collection[str],
                 world: int, fenced: Collection[str] = (),
                 max_step: int | None = None) -> RestorePlan:
    """The newest snapshot that was complete for all ranks and still has a copy of every
    rank on a live, unfenced host; each rank reads the copy on its new node (``placement``:
    rank -> node of the next attempt) when there is one, else one on another live host.

    1. Candidates: :meth:`Manifest.complete` with ``ever=True`` (2 holders when taken),
       newest (step, attempt) first.
    2. Usable copies: holder in ``live`` and not in ``fenced`` (a stale host's copies never
       count as a source).
    3. The first candidate with a usable copy for every rank wins; none: ``step`` None and
       ``why`` says what was missing (the supervisor reads the disk).

    ``max_step``: no snapshot above it (the supervisor's rollback after a NaN loss: the
    snapshots taken after the bad step hold the bad state)."""
    if world <= 0:
        return RestorePlan(None, {}, "no ranks to restore")
    usable_hosts = set(live) - set(fenced)
    candidates = manifest.complete(world, ever=True)
    if max_step is not None:
        newer = len(candidates)
        candidates = [c for c in candidates if c[0] <= max_step]
        if not candidates and newer:
            return RestorePlan(None, {}, f"no complete memory snapshot at or below step "
                               f"{max_step} (the rollback's limit): restoring from disk")
    if not candidates:
        return RestorePlan(None, {}, "no memory snapshot was complete for all ranks (each "
                           "shard on 2 hosts): restoring from disk")
    first_miss = ""
    for snap in reversed(candidates):
        per_rank: dict[int, RankSource] = {}
        held = manifest.by_rank(snap)
        for rank in range(world):
            copies = held.get(rank, [])
            source = _source(copies, placement.get(rank), usable_hosts)
            if source is None:
                if not first_miss:
                    where = ", ".join(sorted({c.holder for c in copies})) or "no host"
                    first_miss = (f"the newest complete snapshot (step {snap[0]}, attempt "
                                  f"{snap[1]}) lost rank {rank}: its copies were on {where}, "
                                  "none live")
                break
            per_rank[rank] = source
        else:
            local = sum(1 for s in per_rank.values() if s.kind == "local")
            why = (f"step {snap[0]} of attempt {snap[1]}: {local} rank(s) local, "
                   f"{world - local} from a buddy")
            if first_miss:
                why += f" ({first_miss})"
            return RestorePlan(snap[0], per_rank, why, snap[1])
    return RestorePlan(None, {}, f"{first_miss}; no older complete snapshot has a live copy "
                       "of every rank: restoring from disk")


def _source(copies: Iterable[ShardCopy], node: str | None,
            usable: set[str]) -> RankSource | None:
    ok = sorted((c for c in copies if c.holder in usable),
                key=lambda c: (c.holder != node, _KIND_ORDER.get(c.kind, 9), c.holder, c.path))
    if not ok:
        return None
    best = ok[0]
    return RankSource("local" if best.holder == node else "buddy", best.holder, best)


def steps_lost(reached: int | None, restored: int | None) -> int | None:
    """Steps redone after a restart: the step the job had reached (the next step it would
    have run) minus the step restored (the next step the restored state runs); None when
    either is unknown. Never negative.

    >>> steps_lost(43, 40), steps_lost(43, None), steps_lost(5, 8)
    (3, None, 0)
    """
    if reached is None or restored is None:
        return None
    return max(0, reached - restored)


__all__ = ["BuddyPlan", "Manifest", "RankSource", "RestorePlan", "buddy_map", "plan_buddies",
           "plan_restore", "steps_lost"]
