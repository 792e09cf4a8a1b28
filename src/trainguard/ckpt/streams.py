"""One data file of a striped checkpoint, written or read front to back by one thread.

Both directions checksum the bytes as they pass (no second read of the file): the writer from
the snapshot in memory, the reader from the buffer it just filled. `os.write`, `readinto`,
`zlib.crc32` and `hashlib` release the GIL, so the streams of one checkpoint run in parallel.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from pathlib import Path

from trainguard.ckpt.digest import new_digest
from trainguard.ckpt.layout import StripeLayout
from trainguard.ckpt.manifest import FileEntry
from trainguard.errors import CheckpointError

__all__ = ["DIRECT_ALIGN", "Progress", "anonymous_map", "open_direct", "read_stream", "write_all",
           "write_stream"]


class Progress:
    """How much of the snapshot is ready: writers wait for their chunk; a failure on either
    side wakes everyone up.

    >>> p = Progress(); p.advance(10); p.wait_for(10)
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._ready = 0
        self._error: BaseException | None = None

    def advance(self, ready: int) -> None:
        with self._cond:
            if ready > self._ready:
                self._ready = ready
                self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._cond.notify_all()

    @property
    def error(self) -> BaseException | None:
        return self._error

    def wait_for(self, ready: int) -> None:
        """Block until `ready` bytes are in the snapshot; `CheckpointError` once anyone failed."""
        with self._cond:
            self._cond.wait_for(lambda: self._ready >= ready or self._error is not None)
            if self._error is not None:
                raise CheckpointError(f"save abandoned: {self._error}")


def write_all(fd: int, data: memoryview) -> None:
    """Write all of `data` (os.write may write less than asked)."""
    while data:
        written = os.write(fd, data)
        data = data[written:]


DIRECT_ALIGN = 4096


def anonymous_map(nbytes: int) -> mmap.mmap:
    """`nbytes` of page-aligned private anonymous memory (O_DIRECT can use it). Private, not
    the default shared mapping: shared anonymous memory is shmem and is slower to fault in."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
"""O_DIRECT needs buffer addresses, file offsets and lengths that are multiples of this."""


def _lower_priority() -> None:
    """Nice this thread: writers must not starve the snapshot copy that training waits for."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


def open_direct(path: Path, flags: int) -> int | None:
    """``os.open(path, flags | O_DIRECT)``, or None where the platform or the filesystem
    refuses O_DIRECT (the caller falls back to buffered I/O)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, flags | flag, 0o644)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return None
        raise


def write_stream(
    path: Path, layout: StripeLayout, stream: int, snapshot: memoryview, progress: Progress,
    algo: str, *, direct: bool = False,
) -> FileEntry:
    """Write file `stream` of `layout` from `snapshot` as its chunks become ready, fsync it, and
    return its size and checksum. Stops early (raising) when `progress` records a failure.

    With `direct`, whole-page chunks go through O_DIRECT (no page-cache copy: the snapshot
    buffer is DMA'd to the device; the caller guarantees page alignment) and a short last
    chunk through the page cache; a filesystem that refuses O_DIRECT gets buffered writes.
    """
    _lower_priority()
    digest = new_digest(algo)
    size = 0
    direct_fd = (open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if direct
                 else None)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (0 if direct_fd is not None else os.O_TRUNC),
                 0o644)
    try:
        for start, length in layout.chunks(stream):
            progress.wait_for(start + length)
            view = snapshot[start : start + length]
            if direct_fd is not None and length % DIRECT_ALIGN == 0:
                try:
                    _pwrite_all(direct_fd, view, size)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    os.close(direct_fd)  # accepted at open, refused on write: go buffered
                    direct_fd = None
                    _pwrite_all(fd, view, size)
            else:
                _pwrite_all(fd, view, size)
            digest.update(view)
            size += length
        if direct_fd is not None:
            os.fsync(direct_fd)
        os.fsync(fd)
    except BaseException as exc:
        progress.fail(exc)
        raise
    finally:
        if direct_fd is not None:
            os.close(direct_fd)
        os.close(fd)
    return FileEntry(size=size, digest=digest.hexdigest(), algo=algo)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while data:
        written = os.pwrite(fd, data, offset)
        data, offset = data[written:], offset + written


def _pread_all(fd: int, view: memoryview, offset: int, name: str) -> None:
    while view:
        got = os.preadv(fd, [view], offset)
        if got == 0:
            raise CheckpointError(f"{name} ends early: the file is truncated")
        view, offset = view[got:], offset + got


def read_stream(
    path: Path, entry: FileEntry, layout: StripeLayout, stream: int, arena: memoryview,
    *, direct: bool = False,
) -> None:
    """Read file `stream` of `layout` into `arena` (the logical stream: chunk at offset ``o``
    goes to ``arena[o:]``) and check it against `entry`; `CheckpointError` naming the file
    when it is missing, has the wrong size, or its checksum does not match.

    With `direct` (the arena is page aligned) whole-page chunks are read with O_DIRECT,
    bypassing the page cache; the short last chunk and filesystems without O_DIRECT read
    through the page cache.
    """
    name = path.name
    expected = layout.file_size(stream)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise CheckpointError(f"missing file {name}") from None
    except OSError as exc:
        raise CheckpointError(f"cannot read {name}: {exc.strerror or exc}") from exc
    direct_fd: int | None = None
    try:
        actual = os.fstat(fd).st_size
        if actual != entry.size or actual != expected:
            raise CheckpointError(
                f"size mismatch for {name}: manifest says {entry.size}, layout {expected}, "
                f"file has {actual}"
            )
        direct_fd = open_direct(path, os.O_RDONLY) if direct else None
        digest = new_digest(entry.algo)
        position = 0
        for start, length in layout.chunks(stream):
            view = arena[start : start + length]
            if direct_fd is not None and length % DIRECT_ALIGN == 0:
                try:
                    _pread_all(direct_fd, view, position, name)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    os.close(direct_fd)
                    direct_fd = None
                    _pread_all(fd, view, position, name)
            else:
                _pread_all(fd, view, position, name)
            digest.update(view)
            position += length
    except OSError as exc:
        raise CheckpointError(f"cannot read {name}: {exc.strerror or exc}") from exc
    finally:
        if direct_fd is not None:
            os.close(direct_fd)
        os.close(fd)
    if digest.hexdigest() != entry.digest:
        raise CheckpointError(f"{entry.algo} mismatch for {name}: the file is corrupt")
