"""The supervisor's side of the memory snapshot tier: where each shard lives, and what the next
attempt restores (design: docs/design/recovery-in-seconds.md).

:class:`SnapshotCoordinator` owns the run's :class:`~trainguard.snapshot.manifest.Manifest`;
a :class:`~trainguard.snapshot.plane.SnapshotPlane` (the backend's) moves the bytes. Per run:

1. :meth:`~SnapshotCoordinator.begin` at each launch: buddies chosen (another failure domain),
   the plane told;
2. :meth:`~SnapshotCoordinator.poll` while the attempt runs: new copies into the manifest,
   ``run_dir/snapshots.json`` rewritten;
3. :meth:`~SnapshotCoordinator.lose` for each node lost or excluded: its copies dropped, the
   node fenced;
4. :meth:`~SnapshotCoordinator.choose` before a relaunch: the newest snapshot complete for all
   ranks on live hosts (:func:`~trainguard.snapshot.manifest.plan_restore`), buddy shards
   fetched to the new nodes, one ``TRAINGUARD_RESTORE`` per rank; disk otherwise, with why;
5. :meth:`~SnapshotCoordinator.close` at the end: the run's snapshot directories removed.

    coord = SnapshotCoordinator(plane, spec, status=print)
    coord.begin(0, ("n1", "n2"), ("n3",))
    choice = coord.choose(1, ("n1", "n3"), previous)      # n2 lost: its shards come from n1
    choice.restore                                        # rank -> TRAINGUARD_RESTORE JSON
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard.atomicjson import write_json_atomic
from trainguard.errors import SnapshotError, TrainguardError
from trainguard.filetail import read_tail
from trainguard.recover.backend import Backend, HasSnapshotPlane
from trainguard.recover.launchplan import LaunchPlan, MemoryTier, PlanInputs, build_plan
from trainguard.recover.records import AttemptResult
from trainguard.recover.spec import JobSpec
from trainguard.snapshot.layout import HostDirs, remove_tree
from trainguard.snapshot.plane import ShardCopy, SnapshotPlane

if TYPE_CHECKING:
    from trainguard.recover.chain import Chain
    from trainguard.snapshot.manifest import Manifest

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 60.0
POLL_EVERY_S = 0.25
"""How often the running attempt's new copies are pulled from the plane."""
_SNAPSHOT_ERROR = b"SnapshotError"


@dataclass(frozen=True, slots=True)
class RestoreChoice:
    """What one attempt restores: per rank ``TRAINGUARD_RESTORE`` (empty: from disk)."""

    source: str
    """``memory`` (every rank from its own host), ``buddy``, ``mixed``, or ``disk``."""
    step: int | None
    """The snapshot's step (None for disk: the SDK reports the checkpoint it loaded)."""
    per_rank: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    why: str = ""

    @property
    def restore(self) -> dict[int, str]:
        """Rank -> the ``TRAINGUARD_RESTORE`` value."""
        return {r: json.dumps(dict(v), sort_keys=True) for r, v in self.per_rank.items()}

    def record(self, result: AttemptResult, best_before: int | None) -> dict[str, Any]:
        """The attempt record's ``restore``: the source as it turned out (a rank that
        reported a disk resume read the disk), the step and the steps lost to the fault."""
        source, step = self.source, self.step
        reported = result.resume_source
        if source in ("memory", "buddy", "mixed") and reported == "disk":
            source, step = "disk", result.resumed_from_step
        elif source == "disk":
            step = result.resumed_from_step
            if step is None:  # no rank reported a resume: a script without the SDK
                source = "none" if reported is not None else "unknown"
        lost = None if best_before is None else max(0, best_before - (step or 0))
        return {"source": source, "step": step, "steps_lost": lost,
                "per_rank": {str(r): dict(v) for r, v in sorted(self.per_rank.items())},
                "why": self.why}


FIRST = RestoreChoice("disk", None, why="first attempt")


def rank_source(kind: str) -> str:
    return "memory" if kind == "local" else "buddy"


def overall_source(kinds: Iterable[str]) -> str:
    sources = {rank_source(k) for k in kinds}
    return sources.pop() if len(sources) == 1 else "mixed"


def failed_restoring(plan: LaunchPlan, result: AttemptResult) -> list[int]:
    """Ranks of a failed attempt whose output ends in a ``SnapshotError`` (the chosen snapshot
    could not be restored): the next attempt reads the disk."""
    bad = []
    outputs = {rl.rank: rl.output for rl in plan.ranks}
    for rank, code in sorted(result.exit_codes.items()):
        if code in (None, 0) or rank not in outputs:
            continue
        try:
            data, _ = read_tail(outputs[rank], 64 << 10, 200)
        except OSError:
            continue
        if _SNAPSHOT_ERROR in data:
            bad.append(rank)
    return bad


class SnapshotCoordinator:
    """The run's manifest and restore decisions (see the module docstring)."""

    def __init__(self, plane: SnapshotPlane, spec: JobSpec, *,
                 clock: Callable[[], float] = time.monotonic,
                 status: Callable[[str], None] = lambda msg: None,
                 fetch_timeout_s: float = FETCH_TIMEOUT_S) -> None:
        self.plane = plane
        self.spec = spec
        from trainguard.snapshot.manifest import Manifest

        self.manifest: Manifest = Manifest()
        self.fenced: set[str] = set()
        self._clock = clock
        self._status = status
        self._fetch_timeout_s = fetch_timeout_s
        self._last_poll: float | None = None
        self._disk_next: str | None = None
        self._bad_restores = 0
        """Attempts whose ranks could not restore the chosen copies (the second: disk)."""
        self._closed = False
        self._seen = 0
        self._world = spec.world_size
        self._reached: dict[int, int] = {}
        """Attempt -> the newest step a snapshot of it was complete at."""
        self.path = spec.run_dir / "snapshots.json"

    def memory(self, choice: RestoreChoice) -> MemoryTier:
        """The ranks' variables for an attempt that restores ``choice``."""
        every = self.spec.snapshot_every
        return MemoryTier(self.spec.snapshot_root, str(every), self.spec.warm, choice.restore)

    # -- 1. launch ---------------------------------------------------------------------------

    def begin(self, attempt: int, nodes: tuple[str, ...], spares: tuple[str, ...]) -> None:
        """Attempt ``attempt`` runs on ``nodes``: each node's buddy chosen among the live
        nodes and spares (another failure domain where one is given)."""
        from trainguard.snapshot.manifest import buddy_map

        live_spares = tuple(s for s in spares if s not in self.fenced)
        buddies = buddy_map(nodes, live_spares, self.spec.failure_domains)
        self._world = len(nodes) * self.spec.nproc_per_node
        self.plane.begin(attempt, nodes, buddies)
        self._write()

    # -- 2. while it runs --------------------------------------------------------------------

    def poll(self, force: bool = False) -> None:
        """New copies into the manifest (at most every ``POLL_EVERY_S`` unless ``force``)."""
        now = self._clock()
        if not force and self._last_poll is not None and now - self._last_poll < POLL_EVERY_S:
            return
        self._last_poll = now
        try:
            copies = self.plane.copies()
        except TrainguardError as exc:
            self._status(f"snapshots: cannot list copies: {exc}")
            return
        added = [c for c in copies if c.holder not in self.fenced]
        self._seen += len(copies)
        for c in added:
            self.manifest.add(c)
        if added:
            self._write()

    # -- 3. nodes lost -----------------------------------------------------------------------

    def lose(self, nodes: Iterable[str]) -> None:
        """``nodes`` are lost or excluded: their copies are never read again."""
        changed = False
        for node in nodes:
            if node in self.fenced:
                continue
            self.fenced.add(node)
            self.plane.lost(node)
            self.manifest.drop_holder(node)
            changed = True
        if changed:
            self._write()

    def after(self, plan: LaunchPlan, result: AttemptResult, choice: RestoreChoice) -> None:
        """After an attempt: when its ranks could not restore the chosen snapshot, the next
        attempt reads the disk."""
        if choice.source in ("disk", "none") or result.status == "succeeded":
            return
        bad = failed_restoring(plan, result)
        if not bad:
            return
        self._bad_restores += 1
        why = (f"rank(s) {', '.join(map(str, bad))} could not restore the memory snapshot of "
               f"step {choice.step} (SnapshotError)")
        if self._bad_restores > 1:  # the second time: the disk, whatever copies are left
            self._disk_next = why
            return
        # The copies that did not verify are forgotten; the next attempt takes another copy
        # of the same snapshot (a buddy's replica) if one is left, else the disk.
        for rank in bad:
            used = choice.per_rank.get(rank, {})
            holder, path = used.get("holder"), used.get("path")
            if isinstance(holder, str) and isinstance(path, str):
                self.manifest.discard(holder, path)
        self._status(f"snapshots: {why}: trying another copy")

    # -- 4. before a relaunch ----------------------------------------------------------------

    def choose(self, nodes: tuple[str, ...], spares: tuple[str, ...],
               max_step: int | None = None,
               disk_steps: Collection[int] = ()) -> RestoreChoice:
        """What the attempt about to launch on ``nodes`` restores; buddy shards are fetched
        to the ranks' new hosts first. Any failure: disk, said in the status line."""
        from trainguard.snapshot.manifest import plan_restore

        self.poll(force=True)
        if self._disk_next is not None:
            why, self._disk_next = self._disk_next, None
            return self._disk(why)
        if not self._seen:  # the script never snapshots: nothing to say
            return RestoreChoice("disk", None, why="the job took no memory snapshot")
        nproc = self.spec.nproc_per_node
        placement = {i * nproc + local: node for i, node in enumerate(nodes)
                     for local in range(nproc)}
        live = {n for n in (*nodes, *spares) if n not in self.fenced}
        plan = plan_restore(self.manifest, placement, live, len(placement), set(self.fenced),
                            max_step=max_step)
        if plan.step is None:
            return self._disk(plan.why or "no snapshot is complete on live hosts")
        disk = max((d for d in disk_steps if max_step is None or d <= max_step), default=None)
        if disk is not None and disk > plan.step:
            return self._disk(f"the disk checkpoint of step {disk} is newer than the "
                              f"newest complete memory snapshot (step {plan.step})")
        per_rank: dict[int, dict[str, Any]] = {}
        for rank, src in sorted(plan.per_rank.items()):
            copy = src.copy
            if src.kind == "buddy":
                try:
                    copy = self._fetch(rank, copy, placement[rank])
                except SnapshotError as exc:
                    return self._disk(f"fetching rank {rank}'s shard from {src.holder} "
                                      f"failed: {exc}")
            per_rank[rank] = {"step": copy.step, "attempt": copy.attempt,
                              "digest": copy.digest, "path": copy.path, "source": src.kind,
                              "holder": src.holder}
        source = overall_source(v["source"] for v in per_rank.values())
        buddies = sum(1 for v in per_rank.values() if v["source"] == "buddy")
        note = f", {buddies} fetched from buddies" if buddies else ""
        self._status(f"restoring the memory snapshot of step {plan.step} "
                     f"({len(per_rank) - buddies} shard(s) local{note})")
        self._write()
        return RestoreChoice(source, plan.step, per_rank, plan.why)

    def _fetch(self, rank: int, copy: ShardCopy, to_node: str) -> ShardCopy:
        fetched = self.plane.fetch(rank, copy, to_node, self._fetch_timeout_s)
        self.manifest.add(fetched)
        return fetched

    def _disk(self, why: str) -> RestoreChoice:
        self._status(f"restoring from the disk checkpoint: {why}")
        return RestoreChoice("disk", None, why=why)

    # -- 5. end of the run -------------------------------------------------------------------

    def close(self) -> None:
        """Stop replicating and remove the run's snapshot directories (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.plane.close(remove=True)
        except (TrainguardError, OSError) as exc:
            self._status(f"snapshots: could not remove the run's snapshot directories: {exc}")

    def reached_before(self, attempt: int) -> int | None:
        """The newest step a complete snapshot of an attempt before ``attempt`` proved
        reached; a rank's last report can lag it."""
        steps = [step for a, step in self._reached.items() if a < attempt]
        return max(steps) if steps else None

    def _write(self) -> None:
        manifest = self.manifest.to_json(self._world)
        doc = {"format": "trainguard-snapshots/1", "fenced": sorted(self.fenced),
               "manifest": manifest}
        for snap in manifest["complete"]:
            attempt, step = snap["attempt"], snap["step"]
            self._reached[attempt] = max(step, self._reached.get(attempt, step))
        try:
            write_json_atomic(self.path, doc)
        except TrainguardError as exc:
            self._status(f"snapshots: {exc}")


def best_step(attempts: Iterable[AttemptResult], proved: int | None = None) -> int | None:
    """The highest step any attempt reached (before the next one's fault): the steps they
    reported, and ``proved``, a complete snapshot's step
    (:meth:`SnapshotCoordinator.reached_before`).

    >>> best_step([], 24), best_step([], None)
    (24, None)
    """
    steps = [a.last_step for a in attempts if a.last_step is not None]
    if proved is not None:
        steps.append(proved)
    return max(steps) if steps else None


def start_coordinator(spec: JobSpec, backend: Backend, run_id: str, *,
                      clock: Callable[[], float] = time.monotonic,
                      status: Callable[[str], None] = lambda msg: None,
                      ) -> SnapshotCoordinator | None:
    """The run's coordinator, or None (said once) when snapshots are off or the backend has no
    snapshot plane."""
    if not spec.snapshots:
        return None
    if not isinstance(backend, HasSnapshotPlane):
        # Debug only: most scripts never snapshot, a line on every run would be noise.
        log.debug("memory snapshots off: the %s backend has no snapshot plane", backend.name)
        return None
    try:
        plane = backend.snapshot_plane(spec.snapshot_root, run_id, (*spec.nodes, *spec.spares))
    except TrainguardError as exc:
        status(f"memory snapshots off: {exc}")
        return None
    return SnapshotCoordinator(plane, spec, clock=clock, status=status)


def memory_tier(spec: JobSpec, coord: SnapshotCoordinator | None,
                choice: RestoreChoice) -> MemoryTier | None:
    """The ranks' memory-tier variables: snapshots when a coordinator runs, warm standbys
    when ``spec.warm``; None when neither."""
    if coord is not None:
        return coord.memory(choice)
    return MemoryTier(spec.snapshot_root, "off", True) if spec.warm else None


def run_snapshot_dir(spec: JobSpec, run_id: str) -> Path:
    """Where the run's snapshots live on a host (every node's directory below it)."""
    return HostDirs(spec.snapshot_root, run_id, "_").run


def remove_local_snapshots(spec: JobSpec, run_id: str) -> None:
    """Remove the run's snapshot directory on this machine (never through a symlink)."""
    path = run_snapshot_dir(spec, run_id)
    remove_tree(path)


def plan_attempt(spec: JobSpec, backend: Backend, chain: Chain,
                 coord: SnapshotCoordinator | None, run_id: str,
                 now: float) -> tuple[RestoreChoice, LaunchPlan]:
    """The next attempt's (``len(chain.attempts)``) source of restore and launch plan; the
    coordinator, if any, is told the attempt begins. A relaunch asks it where each rank
    restores from; the first attempt restores from nothing (:data:`FIRST`)."""
    index, spares = len(chain.attempts), tuple(chain.spares)
    choice = FIRST
    if coord is not None:
        if index:
            choice = coord.choose(chain.nodes, spares, chain.resume_max_step,
                                  chain.checkpoint_steps)
        coord.begin(index, chain.nodes, spares)
    port = spec.master_port or backend.free_port(chain.nodes)
    plan = build_plan(spec, PlanInputs(
        index, chain.nodes, spares, backend.master_addr(chain.nodes), port, run_id, now,
        chain.resume_max_step, memory=memory_tier(spec, coord, choice)), os.environ)
    return choice, plan


__all__ = ["FETCH_TIMEOUT_S", "FIRST", "POLL_EVERY_S", "RestoreChoice", "SnapshotCoordinator",
           "best_step", "failed_restoring", "memory_tier", "overall_source", "plan_attempt",
           "rank_source",
           "remove_local_snapshots", "run_snapshot_dir", "start_coordinator"]
