"""Attempt epochs of a checkpoint directory: a fenced host's late commit is refused.

When the supervisor declares a host lost and relaunches, the lost host may still run (a cut
link, a stopped agent): its ranks can go on writing the shared checkpoint directory next to the
new attempt's. Every supervised save carries its attempt number (``TRAINGUARD_ATTEMPT``), and
the directory records the newest attempt that has started using it::

    <root>/.trainguard-epoch/attempt-00000003     (empty marker files, one per attempt seen)

The recorded epoch is the highest marker. A rank raises it when it opens the directory
(`raise_epoch`, called by the SDK at start), so once the new attempt's ranks run, every stage
and commit of an older attempt is refused (`StaleEpochError`) and never becomes the latest
checkpoint. Markers are created, never rewritten: concurrent raisers on several hosts cannot
lower the epoch (no lock that a stopped process could hold), and the epoch only grows.

This fences writers that go through trainguard's checkpoint code; a script writing its own
files is fenced only by its agent (which kills its ranks when it loses the controller) or by
the scheduler (docs/multi-host.md, "Fencing a lost host").
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from trainguard.errors import CheckpointError

__all__ = ["EPOCH_DIR", "StaleEpochError", "check_epoch", "claim_epoch", "raise_epoch",
           "read_epoch", "withdraw_if_fenced"]

EPOCH_DIR = ".trainguard-epoch"
_MARKER_RE = re.compile(r"attempt-([0-9]{8,})")
_KEEP_MARKERS = 4
"""Markers below the newest few are removed by raisers (the maximum is all that counts)."""


class StaleEpochError(CheckpointError):
    """A save of an attempt older than the directory's epoch: its host was fenced."""


def _marker(attempt: int) -> str:
    return f"attempt-{attempt:08d}"


def _markers(root: Path) -> list[int]:
    try:
        names = os.listdir(root / EPOCH_DIR)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise CheckpointError(
            f"cannot read the attempt epoch of {root}: {exc.strerror or exc}") from exc
    return sorted(int(m.group(1)) for n in names if (m := _MARKER_RE.fullmatch(n)))


def read_epoch(root: Path) -> int | None:
    """The newest attempt recorded in ``root`` (None: no supervised save or start yet)."""
    found = _markers(root)
    return found[-1] if found else None


def raise_epoch(root: Path, attempt: int) -> int:
    """Record that ``attempt`` uses ``root``; returns the epoch after (never below what was
    recorded: raising with an older attempt changes nothing). `CheckpointError` when the
    directory cannot be written."""
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise CheckpointError(f"attempt must be an integer >= 0, got {attempt!r}")
    current = read_epoch(root)
    if current is not None and current >= attempt:
        return current
    folder = root / EPOCH_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / _marker(attempt), os.O_WRONLY | os.O_CREAT, 0o644)
        os.fsync(fd)
        os.close(fd)
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise CheckpointError(
            f"cannot record attempt {attempt} in {folder}: {exc.strerror or exc}") from exc
    found = _markers(root)
    for old in found[:-_KEEP_MARKERS]:
        with contextlib.suppress(OSError):
            os.unlink(folder / _marker(old))
    return max(found[-1] if found else attempt, attempt)


def check_epoch(root: Path, attempt: int | None, what: str) -> None:
    """`StaleEpochError` when ``root`` records an attempt newer than ``attempt`` (None: not
    supervised, nothing to check). ``what`` names the refused operation."""
    if attempt is None:
        return
    current = read_epoch(root)
    if current is not None and current > attempt:
        raise StaleEpochError(
            f"{what} refused: it belongs to attempt {attempt}, but attempt {current} has "
            f"started using {root} (this host was declared lost and fenced)")


def claim_epoch(root: Path, attempt: int | None, what: str) -> None:
    """`check_epoch`, then record ``attempt`` as the epoch (None: unsupervised, a no-op)."""
    if attempt is not None:
        check_epoch(root, attempt, what)
        raise_epoch(root, attempt)


def withdraw_if_fenced(root: Path, attempt: int | None, final: Path, grave: Path) -> None:
    """Right after a commit renamed its checkpoint to ``final``: if a newer attempt raised the
    epoch between the commit's check and its rename, take the checkpoint back out (renamed to
    ``grave`` and removed) and raise `StaleEpochError`; the caller restores a copy it
    replaced."""
    try:
        check_epoch(root, attempt, f"checkpoint {final.name}")
    except StaleEpochError:
        with contextlib.suppress(OSError):
            os.rename(final, grave)
            shutil.rmtree(grave, ignore_errors=True)
        raise
