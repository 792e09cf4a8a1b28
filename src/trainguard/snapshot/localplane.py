"""The snapshot plane of the local backend: virtual nodes whose directories share this
machine's memory, so replication and fetches are verified file copies.

A background thread (or a test calling :meth:`LocalPlane.pump`) does, every ``poll_s``:

1. touches each live node's ``lease`` once a second (standby interpreters watch it);
2. for each node of the current attempt, finds the newest committed own slot of each rank
   (ranks found by file name in ``own/``);
3. copies a new one to the buddy's ``replica/<node>/`` (:func:`~trainguard.snapshot.slot.
   copy_slot`, which verifies the digest; into :func:`~trainguard.snapshot.slot.next_slot`, so
   at most 2 replica slots per source rank) and reports both copies. A torn slot (no header,
   wrong digest) is never copied nor reported.

    plane = LocalPlane(root, "run1", ("n1", "n2"))
    plane.begin(0, ("n1", "n2"), {"n1": "n2", "n2": "n1"})
    ...
    for copy in plane.copies(): manifest.add(copy)
    plane.close(remove=True)
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainguard.errors import SnapshotError
from trainguard.snapshot.layout import HostDirs, remove_tree
from trainguard.snapshot.plane import ShardCopy
from trainguard.snapshot.slot import (
    SlotHeader,
    copy_slot,
    invalidate,
    newest_slot,
    next_slot,
    open_verified,
)

log = logging.getLogger(__name__)

LEASE_EVERY_S = 1.0
_SLOT_NAME = re.compile(r"^rank(\d{5})\.[ab]$")


@dataclass(frozen=True, slots=True)
class _Seen:
    """The newest own slot of one (node, rank) already handled."""

    key: tuple[int, int, str, float]
    """(step, attempt, digest, created) of the slot."""
    path: Path
    header: SlotHeader | None
    """None: the slot failed verification (torn); it is skipped until a newer one appears."""


def fetched_path(dirs: HostDirs, rank: int) -> Path:
    """Where a shard pulled from a buddy lies on the rank's new host."""
    return dirs.fetched / f"rank{rank:05d}.snap"


class LocalPlane:
    """:class:`~trainguard.snapshot.plane.SnapshotPlane` for virtual nodes on one machine.

    ``nodes``: every virtual host of the run (spares included); their directories are created
    here. ``threaded=False`` runs no thread (tests call :meth:`pump`)."""

    def __init__(self, root: Path, run_id: str, nodes: Sequence[str], *, poll_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic, threaded: bool = True) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.poll_s = poll_s
        self._clock = clock
        self._threaded = threaded
        self._dirs = {n: HostDirs(self.root, run_id, n).create() for n in nodes}
        self._lock = threading.RLock()
        self._active: tuple[str, ...] = ()
        self._buddies: dict[str, str] = {}
        self._attempt = 0
        self._lost: set[str] = set()
        self._seen: dict[tuple[str, int], _Seen] = {}
        self._replicated: set[tuple[str, int, tuple[int, int, str, float], str]] = set()
        self._pending: list[ShardCopy] = []
        self._last_lease: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    # -- SnapshotPlane -------------------------------------------------------------------------

    def begin(self, attempt: int, nodes: tuple[str, ...], buddies: Mapping[str, str]) -> None:
        with self._lock:
            for n in (*nodes, *buddies.values()):
                if n not in self._dirs:
                    self._dirs[n] = HostDirs(self.root, self.run_id, n).create()
            self._attempt = attempt
            self._active = tuple(nodes)
            self._buddies = dict(buddies)
        if self._threaded and self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="snapshot-replicator",
                                            daemon=True)
            self._thread.start()

    def copies(self) -> list[ShardCopy]:
        with self._lock:
            out, self._pending = self._pending, []
        return out

    def fetch(self, rank: int, copy: ShardCopy, to_node: str, timeout_s: float) -> ShardCopy:
        """Copy ``copy`` into ``to_node``'s ``fetched/`` directory (a local copy: the timeout
        only bounds the wait for the replicator's current pass)."""
        if not self._lock.acquire(timeout=max(timeout_s, 0.0)):
            raise SnapshotError(f"fetching rank {rank}'s shard: the replicator is busy for "
                                f"more than {timeout_s:g} s")
        try:
            if copy.holder in self._lost:
                raise SnapshotError(f"rank {rank}'s copy is on {copy.holder}, which is lost")
            if to_node in self._lost:
                raise SnapshotError(f"cannot fetch rank {rank}'s shard to {to_node}: lost")
            dirs = self._dirs.get(to_node) or HostDirs(self.root, self.run_id, to_node).create()
            self._dirs[to_node] = dirs
            dst = fetched_path(dirs, rank)
            header = copy_slot(Path(copy.path), dst)
            if (header.rank, header.step, header.attempt, header.digest) != (
                    rank, copy.step, copy.attempt, copy.digest):
                invalidate(dst)
                raise SnapshotError(
                    f"{copy.path} now holds rank {header.rank} step {header.step} of attempt "
                    f"{header.attempt}, not rank {rank} step {copy.step} of attempt "
                    f"{copy.attempt}: overwritten")
            got = ShardCopy(rank, header.step, header.attempt, header.digest, to_node,
                            "fetched", str(dst), header.payload_bytes)
            self._pending.append(got)
            return got
        finally:
            self._lock.release()

    def lost(self, node: str) -> None:
        with self._lock:
            self._lost.add(node)

    def close(self, remove: bool) -> None:
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if remove:
            remove_tree(HostDirs(self.root, self.run_id, "x").run)

    # -- the replicator ------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.pump()
            except Exception:  # the thread must outlive a bug in one pass
                log.exception("snapshot replicator pass failed")
            self._stop.wait(self.poll_s)

    def pump(self) -> int:
        """One pass (see the module docstring); the number of copies reported."""
        with self._lock:
            if self._closed:
                return 0
            self._touch_leases()
            before = len(self._pending)
            for node in self._active:
                if node not in self._lost:
                    for rank in self._ranks(node):
                        self._one(node, rank)
            return len(self._pending) - before

    def _touch_leases(self) -> None:
        now = self._clock()
        if self._last_lease is not None and now - self._last_lease < LEASE_EVERY_S:
            return
        self._last_lease = now
        for node, dirs in self._dirs.items():
            if node not in self._lost:
                try:
                    dirs.touch_lease()
                except OSError as exc:
                    log.debug("cannot touch the lease of %s: %s", node, exc)

    def _ranks(self, node: str) -> list[int]:
        try:
            names = [p.name for p in self._dirs[node].own.iterdir()]
        except OSError:
            return []
        return sorted({int(m.group(1)) for n in names if (m := _SLOT_NAME.match(n))})

    def _one(self, node: str, rank: int) -> None:
        dirs = self._dirs[node]
        found = newest_slot(dirs.own, rank)
        if found is None:
            return
        path, h = found
        key = (h.step, h.attempt, h.digest, h.created)
        seen = self._seen.get((node, rank))
        if seen is None or seen.key != key or seen.path != path:
            try:  # verify before reporting: a header over a torn payload is not a snapshot
                with open_verified(path, None, rank):
                    pass
            except SnapshotError as exc:
                log.info("snapshot %s skipped: %s", path, exc)
                self._seen[(node, rank)] = _Seen(key, path, None)
                return
            self._seen[(node, rank)] = _Seen(key, path, h)
            self._pending.append(ShardCopy(rank, h.step, h.attempt, h.digest, node, "own",
                                           str(path), h.payload_bytes))
        elif seen.header is None:
            return
        buddy = self._buddies.get(node)
        if buddy is None or buddy in self._lost or (node, rank, key, buddy) in self._replicated:
            return
        self._replicate(node, rank, path, key, buddy)

    def _replicate(self, node: str, rank: int, path: Path,
                   key: tuple[int, int, str, float], buddy: str) -> None:
        target = self._dirs[buddy].replica(node)
        try:
            target.mkdir(mode=0o700, parents=True, exist_ok=True)
            dst = next_slot(target, rank)
            h = copy_slot(path, dst)
        except (SnapshotError, OSError) as exc:
            log.info("replicating %s to %s failed: %s", path, buddy, exc)
            return
        if (h.step, h.attempt, h.digest, h.created) != key:
            # The rank overwrote the slot since we looked: this copy is a newer snapshot,
            # reported when its own slot is seen on the next pass.
            invalidate(dst)
            return
        self._replicated = {r for r in self._replicated if r[:2] != (node, rank)}
        self._replicated.add((node, rank, key, buddy))
        self._pending.append(ShardCopy(rank, h.step, h.attempt, h.digest, buddy, "replica",
                                       str(dst), h.payload_bytes))


__all__ = ["LEASE_EVERY_S", "LocalPlane", "fetched_path"]
