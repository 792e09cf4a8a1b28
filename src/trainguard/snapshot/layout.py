"""Where a run's snapshot tier lives on one host (see docs/design/recovery-in-seconds.md).

    <root>/<run id>/<node>/own/            this host's ranks' slots (double-buffered)
    <root>/<run id>/<node>/replica/<src>/  copies of another host's shards
    <root>/<run id>/<node>/fetched/        shards pulled from a buddy before a restore
    <root>/<run id>/<node>/warm/           standby interpreters' sockets
    <root>/<run id>/<node>/lease           touched every second while the run is alive here

    >>> d = HostDirs(Path("/dev/shm/trainguard"), "r1", "node07")
    >>> str(d.replica("node08"))
    '/dev/shm/trainguard/r1/node07/replica/node08'
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from trainguard.errors import SnapshotError

DEFAULT_ROOT = Path("/dev/shm/trainguard")
"""Host memory (tmpfs) on Linux; ``--snapshot-root`` changes it."""

_NAME = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def _safe(what: str, name: str) -> str:
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise SnapshotError(f"{what} {name!r} cannot name a snapshot directory "
                            "(letters, digits, '.', '_' and '-' only)")
    return name


@dataclass(frozen=True, slots=True)
class HostDirs:
    """The snapshot directories of one run on one host."""

    root: Path
    run_id: str
    node: str

    @property
    def run(self) -> Path:
        return self.root / _safe("run id", self.run_id)

    @property
    def host(self) -> Path:
        return self.run / _safe("node", self.node)

    @property
    def own(self) -> Path:
        return self.host / "own"

    def replica(self, src_node: str) -> Path:
        return self.host / "replica" / _safe("node", src_node)

    @property
    def fetched(self) -> Path:
        return self.host / "fetched"

    @property
    def warm(self) -> Path:
        return self.host / "warm"

    @property
    def lease(self) -> Path:
        return self.host / "lease"

    def create(self) -> HostDirs:
        """Make the directories (mode 0700; an existing one must be ours, not a symlink)."""
        for path in (self.root, self.run, self.host, self.own, self.fetched, self.warm):
            try:
                path.mkdir(mode=0o700, exist_ok=True)
            except OSError as exc:
                raise SnapshotError(f"cannot create snapshot directory {path}: "
                                    f"{exc.strerror or exc}") from exc
            if path.is_symlink() or (path != self.root and path.stat().st_uid != os.geteuid()):
                raise SnapshotError(f"snapshot directory {path} is a symlink or not ours")
        return self

    def touch_lease(self) -> None:
        """Mark the run alive on this host (standby interpreters exit when this goes stale)."""
        self.lease.touch(exist_ok=True)


def remove_tree(path: Path, tries: int = 5) -> bool:
    """Remove ``path`` and everything below it (never through a symlink); True when it is gone.

    Two removals may run at once at the end of a run (the supervisor's and the command's
    final sweep), each then failing on what the other just removed: retry until nothing is
    left."""
    for _ in range(tries):
        if path.is_symlink() or not path.exists():
            return not path.exists()
        shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


__all__ = ["DEFAULT_ROOT", "HostDirs", "remove_tree"]
