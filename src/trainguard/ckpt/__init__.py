"""Checkpoints: atomic, checksummed checkpoint directories.

    <root>/step-00000040/{rank00000-data-000.bin, ..., tensors.pkl, manifest.json}

`Checkpointer` is the tensor engine: it snapshots a state dict into a reusable page-aligned
buffer, returns, and persists in the background as parallel striped files with per-file
checksums, fsync and an atomic rename; loads read in parallel and name a corrupt file.
`CheckpointDir` saves arbitrary files atomically and finds the newest checkpoint that validates.
The training SDK (`trainguard.train.Checkpoints`) adds event reporting and fault injection on top.
Importing this package does not import torch; the engine imports it when first used.
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
from trainguard.ckpt.engine import Checkpointer, PendingSave, SaveStats
from trainguard.ckpt.manifest import FORMAT, MANIFEST_NAME, FileEntry, Manifest

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "CheckpointDir",
    "CheckpointInfo",
    "Checkpointer",
    "FileEntry",
    "Manifest",
    "PendingSave",
    "SaveStats",
    "SavedCheckpoint",
    "SkippedCheckpoint",
    "Writer",
    "bytes_writer",
    "corrupt_checkpoint",
]
