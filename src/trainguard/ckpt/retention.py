"""Which checkpoints a save may remove: never one this process could not read.

A save removes checkpoints in three ways: retention (beyond the newest ``keep_last``), an
abandoned timeline (every checkpoint newer than the step just saved, e.g. after a rollback to
before a NaN), and a re-save of a step that already has a checkpoint. The rule for all three:

1. A checkpoint this process wrote, or read and verified (a load that checked every byte, or
   `CheckpointDir.validate`), may be removed.
2. A checkpoint it found unreadable (written by a newer version, naming an unknown checksum,
   damaged, or refused by a load, e.g. a restricted unpickle) is never removed: retention and
   timeline pruning leave it in place, and a re-save of its step moves it aside to
   ``unreadable-step-XXXXXXXX-<pid>-<hex>/`` (kept, out of the way of loads).
3. A checkpoint it has not looked at yet (an older one of an earlier run, or one above the
   resume bound) is validated at that moment and treated by 1 or 2.

So a run that starts from scratch over checkpoints it cannot read (``allow_fresh_start``)
leaves them all on disk, and an upgrade/downgrade of trainguard never costs a checkpoint.
What this process knows is a `Ledger`, keyed by the identity of the manifest file (device,
inode, mtime, size), so a directory replaced behind its back is looked at again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Sequence
from pathlib import Path

__all__ = ["UNKNOWN", "Ledger", "doomed_steps"]

UNKNOWN = object()
"""`Ledger.verdict` of a checkpoint this process has not looked at."""

_Identity = tuple[int, ...]


def _identity(path: Path) -> _Identity | None:
    """The manifest's identity, else the directory's (a checkpoint without a manifest)."""
    for target, kind in ((path / "manifest.json", 0), (path, 1)):
        try:
            st = os.stat(target)
        except OSError:
            continue
        return (kind, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    return None


class Ledger:
    """What this process learned about checkpoint directories: valid, or why unreadable.

    >>> import tempfile
    >>> ledger, path = Ledger(), Path(tempfile.mkdtemp())
    >>> ledger.verdict(path) is UNKNOWN
    True
    >>> ledger.note(path, "crc32 mismatch for rank00000-data-000.bin")
    >>> ledger.verdict(path)
    'crc32 mismatch for rank00000-data-000.bin'
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._verdicts: dict[_Identity, str | None] = {}

    def note(self, path: Path, reason: str | None) -> None:
        """Record that the checkpoint at `path` is valid (None) or unreadable (`reason`)."""
        key = _identity(path)
        if key is not None:
            with self._lock:
                self._verdicts[key] = reason

    def verdict(self, path: Path) -> object:
        """None (valid), the reason it is unreadable, or `UNKNOWN`."""
        key = _identity(path)
        with self._lock:
            return UNKNOWN if key is None else self._verdicts.get(key, UNKNOWN)


def doomed_steps(steps: Sequence[int], saved_step: int, keep_last: int,
                 unreadable: Collection[int] = ()) -> list[int]:
    """Steps a save of `saved_step` would remove, before the rule above is applied to each:
    everything newer (abandoned timeline), and of the rest whatever is older than the newest
    `keep_last` that are not known to be `unreadable` (those are kept and not counted).

    >>> doomed_steps([10, 20, 30, 40, 50], 30, 2)
    [40, 50, 10]
    >>> doomed_steps([0, 10, 20, 30, 40], 40, 3, unreadable={10, 20, 30})
    []
    """
    ordered = sorted(steps)
    newer = [s for s in ordered if s > saved_step]
    counted = [s for s in ordered if s <= saved_step and s not in unreadable]
    return newer + counted[: max(0, len(counted) - keep_last)]
