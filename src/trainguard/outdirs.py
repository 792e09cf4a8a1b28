"""Creating the directory an output goes into, without inventing a tree from a typo.

A writer (the event store's SQLite file, `trainguard simulate --out`) creates the one directory
it writes into, never the directories above it: ``--db runs/new/tg.db`` in an existing ``runs/``
creates ``runs/new``, while ``--db /nonexistent/dir/x.db`` (two missing levels) is refused before
anything is created. One level covers a fresh run directory (``--db RUN_DIR/trainguard.db``); a
deeper missing path is far more often a mistyped root than a wish for a new tree, and whoever
means it can create it with ``mkdir -p``.

    >>> make_dir(Path("/tmp/new"))            # doctest: +SKIP
    >>> make_dir(Path("/nonexistent/a/b"))    # doctest: +SKIP
    Traceback (most recent call last):
    ...
    trainguard.outdirs.MissingParent: ...
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MAX_NEW_LEVELS", "MissingParent", "make_dir", "missing_levels"]

MAX_NEW_LEVELS = 1
"""Missing directories a writer may create: the one it writes into."""


class MissingParent(OSError):
    """Creating a directory would need more missing levels than allowed; nothing was created.

    Callers turn it into their own area's error (`StoreError`, `ConfigError`) with ``str()``.
    """


def missing_levels(path: Path) -> list[Path]:
    """The missing directories from the nearest existing ancestor down to `path` (top first)."""
    missing: list[Path] = []
    p = Path(os.path.abspath(path))
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    return missing[::-1]


def make_dir(path: Path, *, max_new: int = MAX_NEW_LEVELS) -> None:
    """Create directory `path` if missing, creating at most `max_new` missing levels in all.

    Raises `MissingParent` (nothing created) when more are missing, `NotADirectoryError` when an
    ancestor is a file, and the `OSError` of a failed ``mkdir`` (permissions, read-only fs).
    """
    missing = missing_levels(path)
    if not missing:
        if not path.is_dir():
            raise NotADirectoryError(f"{path} exists and is not a directory")
        return
    if len(missing) > max_new:
        top = missing[0]
        raise MissingParent(f"{top} does not exist: a typo? trainguard creates only the "
                            f"directory it writes into ({path}), not the ones above it; "
                            f"create {path.parent} first if it is meant")
    parent = missing[0].parent
    if not parent.is_dir():
        raise NotADirectoryError(f"{parent} is not a directory")
    for p in missing:
        p.mkdir()
