"""The manifest of one checkpoint directory and its validation.

A checkpoint is a directory ``step-00000040/`` holding the checkpoint's files and, written last,
``manifest.json``::

    {"format": "trainguard-checkpoint/1", "step": 40, "created": 1718000000.0,
     "files": {"model.pt": {"size": 123, "sha256": "..."},
               "rank00000-data-000.bin": {"size": 456, "crc32": "..."}},
     "meta": {"kind": "tensors", "world_size": 1}}

The manifest checksums itself (``manifest_sha256``). Each file carries one checksum, SHA-256
or CRC-32 (`trainguard.ckpt.digest`); ``meta`` is optional and free-form (the tensor writer
records its layout kind and world size there).
Validation re-hashes every file, in parallel threads, so a truncated, partially written or
bit-flipped checkpoint is never loaded. Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.ckpt.digest import ALGORITHMS, hex_length, new_digest
from trainguard.ckpt.jsonread import MAX_JSON_BYTES, parse_json
from trainguard.errors import CheckpointError
from trainguard.fileread import UnreadableFile, read_bounded

__all__ = [
    "FORMAT",
    "MANIFEST_NAME",
    "FileEntry",
    "Manifest",
    "check_file_name",
    "check_sizes",
    "file_digest",
    "parse_step_dirname",
    "read_manifest",
    "sha256_file",
    "step_dirname",
    "validate_manifest",
]

FORMAT = "trainguard-checkpoint/1"
SELF_KEY = "manifest_sha256"
"""The manifest's checksum of its own content (canonical JSON of every other key), so a
flipped byte in the manifest itself is caught too; manifests without it are still read."""
MANIFEST_NAME = "manifest.json"
_STEP_DIR_RE = re.compile(r"step-([0-9]{8,})")
_CHUNK = 1 << 20


def _self_digest(data: Mapping[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k != SELF_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


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


def file_digest(path: Path, algo: str = "sha256") -> str:
    """Hex checksum (`algo`) of a file's content."""
    digest = new_digest(algo)
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's content."""
    return file_digest(path, "sha256")


@dataclass(frozen=True, slots=True)
class FileEntry:
    """Size and checksum of one file of a checkpoint."""

    size: int
    """Bytes."""
    digest: str
    """Hex checksum of the content."""
    algo: str = "sha256"
    """Checksum algorithm: ``sha256`` or ``crc32``."""

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, self.algo: self.digest}


@dataclass(frozen=True, slots=True)
class Manifest:
    """What ``manifest.json`` says about a checkpoint.

    >>> m = Manifest(step=40, created=0.0, files={"a.bin": FileEntry(1, "0" * 64)})
    >>> Manifest.from_json(m.to_json()) == m
    True
    >>> Manifest.from_json(m.to_json()).files["a.bin"].algo
    'sha256'
    """

    step: int
    """Training step the checkpoint was saved at."""
    created: float
    """Unix time of the save."""
    files: Mapping[str, FileEntry]
    """File name -> size and checksum, for every file of the checkpoint except the manifest."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form JSON-able facts about the checkpoint (e.g. ``{"kind": "tensors"}``)."""

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "format": FORMAT,
            "step": self.step,
            "created": self.created,
            "files": {name: entry.to_json() for name, entry in sorted(self.files.items())},
        }
        if self.meta:
            data["meta"] = dict(self.meta)
        data[SELF_KEY] = _self_digest(data)
        return json.dumps(data, indent=1)

    @staticmethod
    def from_json(text: str) -> Manifest:
        """Parse manifest text; `CheckpointError` says what is wrong (the reason is its message)."""
        data: Any = parse_json(text, MANIFEST_NAME)
        if not isinstance(data, dict):
            raise CheckpointError(f"unparsable {MANIFEST_NAME}: not a JSON object")
        if SELF_KEY in data and data[SELF_KEY] != _self_digest(data):
            raise CheckpointError(f"{MANIFEST_NAME} is corrupt: its own checksum does not match")
        if data.get("format") != FORMAT:
            raise CheckpointError(
                f"{MANIFEST_NAME}: wrong format {data.get('format')!r:.80} (expected {FORMAT!r})")
        step, created, files = data.get("step"), data.get("created"), data.get("files")
        meta = data.get("meta", {})
        if not isinstance(meta, dict):
            raise CheckpointError(f"unparsable {MANIFEST_NAME}: 'meta' is not an object")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise CheckpointError(f"unparsable {MANIFEST_NAME}: bad step {step!r:.80}")
        if isinstance(created, bool) or not isinstance(created, int | float):
            raise CheckpointError(f"unparsable {MANIFEST_NAME}: bad created {created!r:.80}")
        if not isinstance(files, dict):
            raise CheckpointError(f"unparsable {MANIFEST_NAME}: 'files' is not an object")
        entries: dict[str, FileEntry] = {}
        for name, entry in files.items():
            try:
                check_file_name(name)
            except CheckpointError:
                raise CheckpointError(
                    f"unparsable {MANIFEST_NAME}: bad file name {name!r:.80}") from None
            entries[name] = _entry(name, entry)
        return Manifest(step=step, created=float(created), files=entries, meta=meta)


def _entry(name: str, entry: Any) -> FileEntry:
    """One ``files`` item: a size and exactly one checksum of a known algorithm."""
    if not isinstance(entry, dict):
        raise CheckpointError(f"unparsable {MANIFEST_NAME}: entry for {name!r} is not an object")
    size = entry.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise CheckpointError(f"unparsable {MANIFEST_NAME}: bad size for {name!r}")
    algos = [algo for algo in ALGORITHMS if algo in entry]
    if len(algos) != 1:
        raise CheckpointError(
            f"unparsable {MANIFEST_NAME}: {name!r} needs exactly one checksum of "
            f"{', '.join(ALGORITHMS)}"
        )
    algo = algos[0]
    digest = entry[algo]
    if not isinstance(digest, str) or not re.fullmatch(f"[0-9a-f]{{{hex_length(algo)}}}", digest):
        raise CheckpointError(f"unparsable {MANIFEST_NAME}: bad {algo} for {name!r}")
    return FileEntry(size=size, digest=digest, algo=algo)


def read_manifest(directory: Path) -> Manifest:
    """The manifest of a checkpoint directory; `CheckpointError` with the reason otherwise."""
    try:  # a regular file, read no further than the bound
        data = read_bounded(directory / MANIFEST_NAME, MAX_JSON_BYTES)
    except UnreadableFile as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            raise CheckpointError(f"missing {MANIFEST_NAME}") from None
        what = "unparsable" if exc.too_large else "cannot read"
        raise CheckpointError(f"{what} {MANIFEST_NAME}: {exc.reason}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"unparsable {MANIFEST_NAME}: {exc}") from None
    return Manifest.from_json(text)


def check_sizes(directory: Path, files: Mapping[str, FileEntry]) -> str | None:
    """None when every file exists with its manifest size, else the first reason (sorted)."""
    for name, entry in sorted(files.items()):
        try:
            size = os.stat(directory / name).st_size
        except FileNotFoundError:
            return f"missing file {name}"
        except OSError as exc:
            return f"cannot stat {name}: {exc.strerror or exc}"
        if size != entry.size:
            return f"size mismatch for {name}: manifest says {entry.size}, file has {size}"
    return None


def _check_digest(directory: Path, name: str, entry: FileEntry) -> str | None:
    try:
        digest = file_digest(directory / name, entry.algo)
    except OSError as exc:
        return f"cannot read {name}: {exc.strerror or exc}"
    return None if digest == entry.digest else f"{entry.algo} mismatch for {name}"


def validate_manifest(
    directory: Path, manifest: Manifest, *, threads: int = 8, only: frozenset[str] | None = None
) -> str | None:
    """None when every file matches `manifest` (size, then checksum), else the first reason
    in file-name order. Files are hashed in up to `threads` threads; `only` restricts the check
    to some files (a rank validating its own shard)."""
    files = {n: e for n, e in manifest.files.items() if only is None or n in only}
    reason = check_sizes(directory, files)
    if reason is not None:
        return reason
    names = sorted(files)
    if len(names) <= 1 or threads <= 1:
        results = [_check_digest(directory, n, files[n]) for n in names]
    else:
        with ThreadPoolExecutor(min(threads, len(names)), "tg-validate") as pool:
            results = list(pool.map(lambda n: _check_digest(directory, n, files[n]), names))
    return next((r for r in results if r is not None), None)
