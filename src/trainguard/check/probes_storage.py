"""The storage probe: write + fsync, then uncached read-back throughput of a temporary file in
the checkpoint directory.

1. Size: ``storage_bytes``, at most a quarter of the free space; SKIPPED below MIN_BYTES, and
   when the directory is missing or not writable.
2. Write in CHUNK-sized writes with an fsync every SYNC_EVERY bytes, so the time covers the
   data reaching the device, and so a throttled directory shows up as a low figure within the
   probe's budget: writing stops at the budget and the figure is what was written by then.
3. Read back with O_DIRECT where the filesystem allows it (a page-aligned mmap buffer), else
   after ``posix_fadvise(DONTNEED)`` so the page cache does not fake a fast read; the
   ``read_mode`` fact says which (on tmpfs neither bypasses memory: the figure is RAM speed).
4. Remove the file whatever happens.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import tempfile
import time
from pathlib import Path

from trainguard.check.model import ProbeResult, Status
from trainguard.check.probe_base import (
    Deadline,
    ProbeParams,
    describe,
    errored,
    figure,
    skipped,
)

CHUNK = 4 * 2**20
SYNC_EVERY = 8 * 2**20
MIN_BYTES = 8 * 2**20


def storage_size(directory: Path, wanted: int) -> tuple[int, str]:
    """The bytes to write in ``directory`` (0 when not possible) and, if 0, why."""
    if not directory.exists():
        return 0, f"checkpoint dir {directory} does not exist"
    if not directory.is_dir():
        return 0, f"checkpoint dir {directory} is not a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return 0, f"checkpoint dir {directory} is not writable"
    free = shutil.disk_usage(directory).free
    size = min(wanted, free // 4) // CHUNK * CHUNK
    if size < MIN_BYTES:
        return 0, (f"checkpoint dir {directory}: too little free space ({free} bytes; "
                   f"needs {4 * MIN_BYTES})")
    return size, ""


def write_synced(fd: int, size: int, deadline: Deadline) -> tuple[int, float]:
    """Write up to ``size`` bytes with periodic fsync, stopping at ``deadline`` after the first
    synced block. Returns (bytes written, seconds)."""
    block = os.urandom(CHUNK)  # incompressible, so compressing filesystems do not flatter
    written = 0
    start = time.perf_counter()
    while written < size:
        os.write(fd, block)
        written += CHUNK
        if written % SYNC_EVERY == 0 or written >= size:
            os.fsync(fd)
            if deadline.expired():
                break
    os.fsync(fd)
    return written, time.perf_counter() - start


def _open_direct(path: Path) -> int | None:
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_RDONLY | flag)
    except OSError:  # EINVAL on tmpfs and some FUSE filesystems
        return None


def read_back(path: Path, size: int, deadline: Deadline) -> tuple[int, float, str]:
    """Read the file back uncached; returns (bytes read, seconds, read mode)."""
    fd = _open_direct(path)
    mode = "O_DIRECT"
    if fd is None:
        fd = os.open(path, os.O_RDONLY)
        mode = "posix_fadvise(DONTNEED)"
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        else:
            mode = "page cache (no O_DIRECT, no fadvise)"
    buf = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT requires
    total = 0
    start = time.perf_counter()
    try:
        while total < size:
            got = os.preadv(fd, [buf], total)
            if got <= 0:
                break
            total += got
            if deadline.expired():
                break
        return total, time.perf_counter() - start, mode
    finally:
        buf.close()
        os.close(fd)


def storage(params: ProbeParams) -> ProbeResult:
    """Write (with fsync) and read-back throughput in MB/s of the checkpoint directory."""
    if params.checkpoint_dir is None:
        return skipped("storage", params, "no checkpoint dir given")
    directory = params.checkpoint_dir
    size, why = storage_size(directory, params.storage_bytes)
    if not size:
        return skipped("storage", params, why)
    started = time.monotonic()
    budget = params.time_limit_s * params.budget_fraction / 2
    path: Path | None = None
    try:
        fd, name = tempfile.mkstemp(prefix=".trainguard-check-", dir=directory)
        path = Path(name)
        try:
            written, w_s = write_synced(fd, size, Deadline(budget))
        finally:
            os.close(fd)
        read, r_s, mode = read_back(path, written, Deadline(budget))
    except OSError as exc:
        return errored("storage", params, f"{directory}: {describe(exc)}",
                       time.monotonic() - started)
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
    return ProbeResult(
        "storage", params.host, Status.OK,
        figures=(figure("write_mbps", written / max(w_s, 1e-9) / 1e6),
                 figure("read_mbps", read / max(r_s, 1e-9) / 1e6)),
        duration_s=time.monotonic() - started,
        facts=(("dir", str(directory)), ("bytes_written", str(written)),
               ("bytes_read", str(read)), ("read_mode", mode)))


__all__ = ["read_back", "storage", "storage_size", "write_synced"]
