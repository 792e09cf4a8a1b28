"""The manifest of one checkpoint directory and its validation.

A checkpoint is a directory ``step-00000040/`` holding the checkpoint's files and, written last,
``manifest.json``::

    {"format": "trainguard-checkpoint/1", "step": 40, "created": 1718000000.0,
     "files": {"model.pt": {"size": 123, "sha256": "..."}}}

Validation re-hashes every file, so a truncated, partially written or bit-flipped checkpoint is
never loaded. Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.errors import CheckpointError

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "FileEntry",
    "Manifest",
    "check_file_name",
    "parse_step_dirname",
    "read_manifest",
    "sha256_file",
    "step_dirname",
    "validate_manifest",
]

FORMAT = "trainguard-checkpoint/1"
MANIFEST_NAME = "manifest.json"
_STEP_DIR_RE = re.compile(r"step-([0-9]{8,})")
_CHUNK = 1 << 20


def step_dirname(step: int) -> str:
    """``step-00000040`` for step 40 (zero padded so names sort by step)."""
    return f"step-{step:08d}"


def parse_step_dirname(name: str) -> int | None:
    """The step of a final checkpoint directory name, None for anything else."""
    match = _STEP_DIR_RE.fullmatch(name)
    return int(match.group(1)) if match else None


def check_file_name(name: str) -> None:
    """Raise `CheckpointError` unless `name` is a plain file name usable inside a checkpoint."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..", MANIFEST_NAME)
        or name.startswith(".")
        or "/" in name
        or "\\" in name
        or "\0" in name
    ):
        raise CheckpointError(
            f"invalid checkpoint file name {name!r}: use a plain name such as 'model.pt' "
            f"(no '/', no leading '.', not {MANIFEST_NAME!r})"
        )


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's content."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class FileEntry:
    """Size and hash of one file of a checkpoint."""

    size: int
    """Bytes."""
    sha256: str
    """Hex SHA-256 of the content."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """What ``manifest.json`` says about a checkpoint.

    >>> m = Manifest(step=40, created=0.0, files={"a.bin": FileEntry(1, "0" * 64)})
    >>> Manifest.from_json(m.to_json()) == m
    True
    """

    step: int
    """Training step the checkpoint was saved at."""
    created: float
    """Unix time of the save."""
    files: Mapping[str, FileEntry]
    """File name -> size and hash, for every file of the checkpoint except the manifest."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "step": self.step,
                "created": self.created,
                "files": {
                    name: {"size": entry.size, "sha256": entry.sha256}
                    for name, entry in sorted(self.files.items())
                },
            },
            indent=1,
        )

    @staticmethod
    def from_json(text: str) -> Manifest:
        """Parse manifest text; `CheckpointError` says what is wrong (the reason is its message)."""
        try:
            data: Any = json.loads(text)
        except ValueError as exc:
            raise CheckpointError(f"unparsable manifest: {exc}") from None
        if not isinstance(data, dict):
            raise CheckpointError("unparsable manifest: not a JSON object")
        if data.get("format") != FORMAT:
            raise CheckpointError(f"wrong format {data.get('format')!r} (expected {FORMAT!r})")
        step, created, files = data.get("step"), data.get("created"), data.get("files")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise CheckpointError(f"unparsable manifest: bad step {step!r}")
        if isinstance(created, bool) or not isinstance(created, int | float):
            raise CheckpointError(f"unparsable manifest: bad created {created!r}")
        if not isinstance(files, dict):
            raise CheckpointError("unparsable manifest: 'files' is not an object")
        entries: dict[str, FileEntry] = {}
        for name, entry in files.items():
            try:
                check_file_name(name)
            except CheckpointError:
                raise CheckpointError(f"unparsable manifest: bad file name {name!r}") from None
            size = entry.get("size") if isinstance(entry, dict) else None
            sha = entry.get("sha256") if isinstance(entry, dict) else None
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise CheckpointError(f"unparsable manifest: bad size for {name!r}")
            if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise CheckpointError(f"unparsable manifest: bad sha256 for {name!r}")
            entries[name] = FileEntry(size=size, sha256=sha)
        return Manifest(step=step, created=float(created), files=entries)


def read_manifest(directory: Path) -> Manifest:
    """The manifest of a checkpoint directory; `CheckpointError` with the reason otherwise."""
    path = directory / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CheckpointError("missing manifest") from None
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"unparsable manifest: {exc}") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read manifest: {exc.strerror or exc}") from None
    return Manifest.from_json(text)


def validate_manifest(directory: Path, manifest: Manifest) -> str | None:
    """None when every file matches `manifest` (size, then SHA-256), else the first reason."""
    for name, entry in sorted(manifest.files.items()):
        path = directory / name
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return f"missing file {name}"
        except OSError as exc:
            return f"cannot stat {name}: {exc.strerror or exc}"
        if size != entry.size:
            return f"size mismatch for {name}: manifest says {entry.size}, file has {size}"
        try:
            digest = sha256_file(path)
        except OSError as exc:
            return f"cannot read {name}: {exc.strerror or exc}"
        if digest != entry.sha256:
            return f"sha256 mismatch for {name}"
    return None
