"""One in-memory snapshot slot: a file in host memory (tmpfs) holding one rank's state.

A slot is a 4096-byte header block, then the payload. The header block is ``MAGIC``, a 4-byte
little-endian length and a JSON object (:class:`SlotHeader`), the rest zero. A write first
zeroes the header (the slot is then invalid), writes the payload, computes its digest and
writes the header last: a copy killed midway leaves a slot with no header, or one whose digest
does not match, and such a slot is never restored.

Each rank has two slots (``.a`` and ``.b``): a new snapshot goes into the one that does not hold
the newest committed snapshot (double buffering), so a torn write never costs the last good one.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> h = write_slot(d / "rank00000.a", b"state", rank=0, world=2, step=5, attempt=0, node="n1")
    >>> (h.step, h.payload_bytes, bytes(read_verified(d / "rank00000.a", None)))
    (5, 5, b'state')
    >>> newest_slot(d, 0)[1].step
    5
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainguard.errors import SnapshotError

MAGIC = b"TGSNAP1\n"
HEADER_BYTES = 4096
ALGO = "crc32"
_LEN = struct.Struct("<I")
_DIGEST_CHUNK = 64 << 20


@dataclass(frozen=True, slots=True)
class SlotHeader:
    """What a committed slot holds."""

    rank: int
    world: int
    step: int
    """The step the state resumes at (the next step to run)."""
    attempt: int
    """The supervisor's attempt that took it (the fencing epoch)."""
    payload_bytes: int
    digest: str
    """``zlib.crc32`` of the payload, 8 hex digits."""
    algo: str
    node: str
    """The host whose rank took it."""
    created: float
    """Unix time of the commit."""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "committed": True}


@dataclass(frozen=True, slots=True)
class Expected:
    """The snapshot the controller chose for a rank: a slot must match it exactly."""

    step: int
    attempt: int
    digest: str


def digest_of(data: memoryview | bytes) -> str:
    """The payload digest (crc32, hex), computed in 64 MiB pieces."""
    view = memoryview(data).cast("B")
    crc = 0
    for start in range(0, len(view), _DIGEST_CHUNK):
        crc = zlib.crc32(view[start:start + _DIGEST_CHUNK], crc)
    return f"{crc & 0xFFFFFFFF:08x}"


def slot_paths(directory: Path, rank: int) -> tuple[Path, Path]:
    """The two slots of ``rank`` in ``directory``."""
    base = f"rank{rank:05d}"
    return directory / f"{base}.a", directory / f"{base}.b"


def _parse_header(block: bytes) -> SlotHeader | None:
    if len(block) < len(MAGIC) + _LEN.size or not block.startswith(MAGIC):
        return None
    (length,) = _LEN.unpack_from(block, len(MAGIC))
    start = len(MAGIC) + _LEN.size
    if length <= 0 or start + length > HEADER_BYTES:
        return None
    try:
        raw = json.loads(block[start:start + length])
        if not isinstance(raw, dict) or raw.get("committed") is not True:
            return None
        return SlotHeader(
            rank=int(raw["rank"]), world=int(raw["world"]), step=int(raw["step"]),
            attempt=int(raw["attempt"]), payload_bytes=int(raw["payload_bytes"]),
            digest=str(raw["digest"]), algo=str(raw["algo"]), node=str(raw["node"]),
            created=float(raw["created"]))
    except (ValueError, KeyError, TypeError):
        return None


def _header_block(header: SlotHeader) -> bytes:
    body = json.dumps(header.to_json(), sort_keys=True).encode()
    block = MAGIC + _LEN.pack(len(body)) + body
    if len(block) > HEADER_BYTES:
        raise SnapshotError(f"snapshot header too long ({len(block)} bytes)")
    return block + bytes(HEADER_BYTES - len(block))


def read_header(path: Path) -> SlotHeader | None:
    """The slot's header; None when the slot is missing, torn or not committed, or shorter
    than its header says."""
    try:
        with open(path, "rb") as f:
            header = _parse_header(f.read(HEADER_BYTES))
            if header is None:
                return None
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    if size < HEADER_BYTES + header.payload_bytes:
        return None
    return header


def newest_slot(directory: Path, rank: int) -> tuple[Path, SlotHeader] | None:
    """The committed slot of ``rank`` with the highest (step, attempt, created)."""
    found = [(p, h) for p in slot_paths(directory, rank) if (h := read_header(p)) is not None]
    if not found:
        return None
    return max(found, key=lambda ph: (ph[1].step, ph[1].attempt, ph[1].created))


def next_slot(directory: Path, rank: int) -> Path:
    """The slot to write next: the one not holding the newest committed snapshot."""
    a, b = slot_paths(directory, rank)
    newest = newest_slot(directory, rank)
    return b if newest is not None and newest[0] == a else a


def _open_sized(path: Path, size: int) -> int:
    """The slot file open for writing, at least ``size`` bytes, never through a symlink."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return fd


def invalidate(path: Path) -> None:
    """Zero the slot's header: from now on it is not a snapshot (before overwriting it)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.pwrite(fd, bytes(HEADER_BYTES), 0)
    finally:
        os.close(fd)


def commit(path: Path, header: SlotHeader) -> None:
    """Write ``header``: the slot is a snapshot from now on (the payload is already there)."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.pwrite(fd, _header_block(header), 0)
    finally:
        os.close(fd)


class SlotWriter:
    """An open, invalidated slot whose payload is written through a writable memory map.

        with SlotWriter(path, payload_bytes) as w:
            w.payload[0:5] = b"state"          # or numpy/torch views over w.payload
            header = w.commit(rank=0, world=1, step=5, attempt=0, node="n1")

    :meth:`commit` computes the digest over the mapped payload and writes the header last.
    Leaving the block without committing leaves the slot invalid (never restored)."""

    def __init__(self, path: Path, payload_bytes: int) -> None:
        self.path = path
        self.payload_bytes = payload_bytes
        try:
            self._fd = _open_sized(path, HEADER_BYTES + max(payload_bytes, 1))
            os.pwrite(self._fd, bytes(HEADER_BYTES), 0)  # invalid until committed
            self._map = mmap.mmap(self._fd, HEADER_BYTES + max(payload_bytes, 1))
        except OSError as exc:
            raise SnapshotError(f"cannot write snapshot slot {path}: {exc.strerror or exc}") \
                from exc
        self.payload = memoryview(self._map)[HEADER_BYTES:HEADER_BYTES + payload_bytes]

    def commit(self, *, rank: int, world: int, step: int, attempt: int, node: str,
               clock: Callable[[], float] = time.time) -> SlotHeader:
        header = SlotHeader(rank, world, step, attempt, self.payload_bytes,
                            digest_of(self.payload), ALGO, node, clock())
        # Through the file, not the map: a write() is what an inotify watch of the directory
        # sees (the agent looks at its slots when one is committed).
        os.pwrite(self._fd, _header_block(header), 0)
        return header

    def close(self) -> None:
        self.payload.release()
        self._map.close()
        os.close(self._fd)

    def __enter__(self) -> SlotWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_slot(path: Path, payload: bytes | memoryview, *, rank: int, world: int, step: int,
               attempt: int, node: str) -> SlotHeader:
    """Write a whole payload into ``path`` and commit it (tests, replicas, fetched copies)."""
    view = memoryview(payload).cast("B")
    with SlotWriter(path, len(view)) as w:
        w.payload[:] = view
        return w.commit(rank=rank, world=world, step=step, attempt=attempt, node=node)


class SlotView:
    """A committed slot's payload, mapped read-only (:func:`read_verified`); close it (or use
    ``with``) when done."""

    def __init__(self, path: Path, header: SlotHeader) -> None:
        self.header = header
        with open(path, "rb") as f:
            size = HEADER_BYTES + max(header.payload_bytes, 1)
            self._map = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        self.payload = memoryview(self._map)[HEADER_BYTES:HEADER_BYTES + header.payload_bytes]

    def close(self) -> None:
        self.payload.release()
        self._map.close()

    def __enter__(self) -> SlotView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_verified(path: Path, expect: Expected | None, rank: int | None = None) -> SlotView:
    """The slot's payload after checking its header, its digest, and (when given) the step,
    attempt and digest the controller chose and the rank. :class:`SnapshotError` naming the
    slot and the reason otherwise: a torn, stale or foreign slot is never restored."""
    header = read_header(path)
    if header is None:
        raise SnapshotError(f"snapshot slot {path} is missing, torn or not committed")
    if rank is not None and header.rank != rank:
        raise SnapshotError(f"snapshot slot {path} holds rank {header.rank}, not rank {rank}")
    if expect is not None and (header.step, header.attempt, header.digest) != (
            expect.step, expect.attempt, expect.digest):
        raise SnapshotError(
            f"snapshot slot {path} holds step {header.step} of attempt {header.attempt} "
            f"(digest {header.digest}), not the chosen step {expect.step} of attempt "
            f"{expect.attempt} (digest {expect.digest}): stale or overwritten")
    try:
        view = SlotView(path, header)
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"cannot read snapshot slot {path}: {exc}") from exc
    actual = digest_of(view.payload)
    if actual != header.digest:
        view.close()
        raise SnapshotError(f"snapshot slot {path}: digest {actual} does not match the "
                            f"header's {header.digest} (torn or corrupted)")
    return view


def read_verified(path: Path, expect: Expected | None, rank: int | None = None) -> bytes:
    """:func:`open_verified`, the payload copied out (small states, tests)."""
    with open_verified(path, expect, rank) as view:
        return bytes(view.payload)


def copy_slot(src: Path, dst: Path) -> SlotHeader:
    """A verified copy of a committed slot (replicas, fetched shards): the source's digest is
    checked, the copy is committed only after its own digest matches."""
    with open_verified(src, None) as view:
        h = view.header
        written = write_slot(dst, view.payload, rank=h.rank, world=h.world, step=h.step,
                             attempt=h.attempt, node=h.node)
    if written.digest != h.digest:  # pragma: no cover - memory corruption during the copy
        invalidate(dst)
        raise SnapshotError(f"copy of {src} to {dst} does not match its digest")
    return h


__all__ = ["ALGO", "HEADER_BYTES", "MAGIC", "Expected", "SlotHeader", "SlotView", "SlotWriter",
           "commit", "copy_slot", "digest_of", "invalidate", "newest_slot", "next_slot",
           "open_verified", "read_header", "read_verified", "slot_paths", "write_slot"]
