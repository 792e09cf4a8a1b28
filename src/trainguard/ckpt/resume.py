"""Whether a resume that found no loadable checkpoint may start from step 0.

An empty directory is a fresh run. A directory whose checkpoints all failed to load is not: they
may be from a newer trainguard (format or checksum this version does not know), damaged, or
refused by a restricted unpickle, and silently training from scratch would throw the run
away. So that is refused with one `CheckpointError` that lists every checkpoint and why it could
not be read, unless the caller opted in (``allow_fresh_start=True``); the checkpoints are kept
either way (`trainguard.ckpt.retention`). Checkpoints passed over only because they lie above
the resume bound (a rollback) are readable and do not count.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from trainguard.ckpt.atomic import SkippedCheckpoint
from trainguard.errors import CheckpointError
from trainguard.textsafe import terminal_safe

__all__ = ["FRESH_START_HINT", "check_fresh_start"]

logger = logging.getLogger(__name__)

FRESH_START_HINT = (
    "pass allow_fresh_start=True (examples/train_gpt.py: --allow-fresh-start or "
    "TRAINGUARD_ALLOW_FRESH_START=1) to train from "
    "step 0 anyway; they are never deleted")


def check_fresh_start(root: Path, skipped: Sequence[SkippedCheckpoint], *,
                      max_step: int | None, allow_fresh_start: bool) -> None:
    """Raise `CheckpointError` when `skipped` (the checkpoints a resume passed over, having
    loaded none) holds one at or below `max_step` and not `allow_fresh_start`."""
    unreadable = [s for s in skipped if max_step is None or s.step <= max_step]
    if not unreadable:
        return
    listing = "; ".join(f"step {s.step} ({s.path.name}): {terminal_safe(s.reason)}"
                        for s in unreadable)
    if allow_fresh_start:
        logger.warning("starting from scratch although %s holds %d checkpoint(s) that could "
                       "not be read (allow_fresh_start); they are kept: %s",
                       root, len(unreadable), listing)
        return
    raise CheckpointError(
        f"refusing to start from scratch: none of the {len(unreadable)} checkpoint(s) in "
        f"{terminal_safe(str(root))} could be read: {listing}. Fix or move them, or "
        f"{FRESH_START_HINT}")
