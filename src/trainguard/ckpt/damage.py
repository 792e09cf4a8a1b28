"""Deliberate damage for fault injection: make a checkpoint fail validation, keeping its sizes.

Used by the ``corrupt_checkpoint`` fault (training SDK) and ``trainguard inject
corrupt-checkpoint``: the resume logic must then skip the checkpoint and fall back.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from trainguard.ckpt.atomic import CheckpointInfo
from trainguard.ckpt.manifest import MANIFEST_NAME
from trainguard.errors import CheckpointError

__all__ = ["corrupt_checkpoint"]

logger = logging.getLogger(__name__)

_CORRUPT_BYTES = 64


def corrupt_checkpoint(checkpoint: CheckpointInfo | str | os.PathLike[str]) -> Path:
    """Invert up to 64 bytes in the middle of the checkpoint's largest file; returns that file.

    Its size is unchanged, so only the SHA-256 check catches it. `CheckpointError` when the
    checkpoint has no non-empty file or cannot be written.
    """
    directory = checkpoint.path if isinstance(checkpoint, CheckpointInfo) else Path(checkpoint)
    try:
        files = [
            (entry.stat().st_size, entry.name)
            for entry in os.scandir(directory)
            if entry.is_file() and entry.name != MANIFEST_NAME
        ]
        candidates = [(size, name) for size, name in files if size > 0]
        if not candidates:
            raise CheckpointError(f"checkpoint {directory} has no non-empty file to corrupt")
        size, name = max(candidates)
        path = directory / name
        offset = max(0, size // 2 - _CORRUPT_BYTES // 2)
        fd = os.open(path, os.O_RDWR)
        try:
            original = os.pread(fd, _CORRUPT_BYTES, offset)
            os.pwrite(fd, bytes(b ^ 0xFF for b in original), offset)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise CheckpointError(
            f"cannot corrupt checkpoint {directory}: {exc.strerror or exc}"
        ) from exc
    logger.warning("corrupted %d bytes at offset %d of %s", len(original), offset, path)
    return path
