"""How the supervisor drives the snapshot tier of one run, whatever the backend.

The supervisor owns the :class:`~trainguard.snapshot.manifest.Manifest` and the restore
decision; a :class:`SnapshotPlane` moves the bytes:

- the local backend's plane (:mod:`trainguard.snapshot.localplane`) copies slot files between
  the virtual nodes' directories on this machine;
- the agents' plane (:mod:`trainguard.agent.snapplane`) asks each host's agent, over the wire,
  to replicate to its buddy and to fetch shards before a restore.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

CopyKind = Literal["own", "replica", "fetched"]


@dataclass(frozen=True, slots=True)
class ShardCopy:
    """One committed copy of one rank's snapshot, on one host."""

    rank: int
    step: int
    attempt: int
    digest: str
    holder: str
    """The host whose memory holds this copy."""
    kind: CopyKind
    path: str
    """Where the slot file is on ``holder`` (absolute, on that host)."""
    payload_bytes: int = 0


class SnapshotPlane(Protocol):
    """The data path of the snapshot tier, as the supervisor uses it (one per run)."""

    def begin(self, attempt: int, nodes: tuple[str, ...], buddies: Mapping[str, str]) -> None:
        """An attempt is launched on ``nodes``: replicate each node's new snapshots to
        ``buddies[node]`` from now on (a changed map takes effect for the next snapshot)."""
        ...

    def copies(self) -> list[ShardCopy]:
        """Copies that appeared since the last call (own slots committed, replicas stored,
        shards fetched); never the same copy twice."""
        ...

    def fetch(self, rank: int, copy: ShardCopy, to_node: str, timeout_s: float) -> ShardCopy:
        """Copy ``copy`` into ``to_node``'s memory (its ``fetched/`` directory) and return the
        new copy; :class:`~trainguard.errors.SnapshotError` when it cannot."""
        ...

    def lost(self, node: str) -> None:
        """``node`` is gone (or fenced): nothing is sent to it or read from it any more."""
        ...

    def close(self, remove: bool) -> None:
        """The run is over: stop replicating; ``remove`` deletes the run's snapshot
        directories on every reachable host."""
        ...


__all__ = ["CopyKind", "ShardCopy", "SnapshotPlane"]
