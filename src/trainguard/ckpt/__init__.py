"""Checkpoints: atomic, hash-checked checkpoint directories (stdlib only, no torch).

    <root>/step-00000040/{model.pt, ..., manifest.json}

`CheckpointDir` saves atomically and finds the newest checkpoint that validates; the training SDK
(`trainguard.train.Checkpoints`) adds event reporting and fault injection on top.
"""

from __future__ import annotations

from trainguard.ckpt.atomic import (
    CheckpointDir,
    CheckpointInfo,
    SavedCheckpoint,
    SkippedCheckpoint,
    Writer,
    bytes_writer,
)
from trainguard.ckpt.damage import corrupt_checkpoint
from trainguard.ckpt.manifest import FORMAT, MANIFEST_NAME, FileEntry, Manifest

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "CheckpointDir",
    "CheckpointInfo",
    "FileEntry",
    "Manifest",
    "SavedCheckpoint",
    "SkippedCheckpoint",
    "Writer",
    "bytes_writer",
    "corrupt_checkpoint",
]
