"""The storage probe: does the checkpoint directory work, and how fast is it (write + fsync,
then uncached read-back of a temporary file).

1. A named checkpoint dir that does not work is a failure of the host (ERROR, judged FAIL),
   never a skip: missing, not a directory, not writable, a small probe file that cannot be
   written and fsynced (ENOSPC, EDQUOT, EROFS, EIO), or too little free space for a
   checkpoint (under ``MIN_FREE`` bytes). Only "no checkpoint dir given" is SKIPPED.
2. Size: ``storage_bytes``, at most a quarter of the free space.
3. Write in CHUNK-sized writes with an fsync every SYNC_EVERY bytes, so the time covers the
   data reaching the device, and so a throttled directory shows up as a low figure within the
   probe's budget: writing stops at the budget and the figure is what was written by then.
   The write figure's spread (:attr:`Figure.spread <trainguard.check.model.Figure.spread>`) is
   that between the rates of its first and second half.
4. Read back READ_PASSES times, each pass uncached: with O_DIRECT where the filesystem allows
   it (a page-aligned mmap buffer), else after ``posix_fadvise(DONTNEED)``; the figure is the
   best pass, its spread that of the passes. The page cache must not fake a fast read, so:
   on a memory filesystem (tmpfs, ramfs: its "storage" is the page cache, O_DIRECT or not), or
   where the pages are still cached after DONTNEED (``preadv(RWF_NOWAIT)`` succeeds), the read
   speed is memory speed: it is kept as a fact, not as a figure compared across hosts (on a
   memory filesystem the write speed too: the probe then only shows that the dir works). The
   ``read_mode`` fact says which.
5. Remove the file whatever happens.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import shutil
import tempfile
import time
from pathlib import Path

from trainguard.check.model import Figure, ProbeResult, Status
from trainguard.check.probe_base import (
    Deadline,
    ProbeParams,
    describe,
    errored,
    figure,
    skipped,
)
from trainguard.check.spread import relative_spread

CHUNK = 4 * 2**20
SYNC_EVERY = 8 * 2**20
MIN_BYTES = 8 * 2**20
MIN_FREE = 4 * MIN_BYTES
"""A checkpoint dir with less free space than this fails: it is full for any checkpoint."""
READ_PASSES = 3
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "hugetlbfs"})


class DirUnusable(Exception):
    """The checkpoint dir does not work on this host (the message says why)."""


def probe_write(directory: Path, nbytes: int = 4096) -> None:
    """Create, write, fsync and remove a small file in ``directory``; :class:`DirUnusable`
    naming the error when any step fails (ENOSPC on a full filesystem, EROFS, EDQUOT...)."""
    path: Path | None = None
    try:
        fd, name = tempfile.mkstemp(prefix=".trainguard-probe-", dir=directory)
        path = Path(name)
        try:
            view = memoryview(b"\0" * nbytes)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "")
        raise DirUnusable(f"checkpoint dir {directory}: cannot write a file "
                          f"({name + ': ' if name else ''}{exc.strerror or exc})") from exc
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()


def storage_size(directory: Path, wanted: int) -> int:
    """The bytes to write in ``directory``; :class:`DirUnusable` when it does not work."""
    if not directory.exists():
        raise DirUnusable(f"checkpoint dir {directory} does not exist")
    if not directory.is_dir():
        raise DirUnusable(f"checkpoint dir {directory} is not a directory")
    probe_write(directory)  # first: its error names the cause (EROFS, ENOSPC, EACCES)
    if not os.access(directory, os.W_OK | os.X_OK):
        raise DirUnusable(f"checkpoint dir {directory} is not writable")
    free = shutil.disk_usage(directory).free
    if free < MIN_FREE:
        raise DirUnusable(f"checkpoint dir {directory} is full ({free} bytes free; a check "
                          f"needs {MIN_FREE})")
    return max(min(wanted, free // 4) // CHUNK * CHUNK, MIN_BYTES)


def write_synced(fd: int, size: int, deadline: Deadline,
                 halves: list[float] | None = None) -> tuple[int, float]:
    """Write up to ``size`` bytes with periodic fsync, stopping at ``deadline`` after the first
    synced block. Returns (bytes written, seconds); appends to ``halves`` the rates (bytes/s)
    of the first and second half of what was written, where there were two synced blocks."""
    block = os.urandom(CHUNK)  # incompressible, so compressing filesystems do not flatter
    written = 0
    start = time.perf_counter()
    synced: list[tuple[int, float]] = []
    while written < size:
        os.write(fd, block)
        written += CHUNK
        if written % SYNC_EVERY == 0 or written >= size:
            os.fsync(fd)
            synced.append((written, time.perf_counter() - start))
            if deadline.expired():
                break
    os.fsync(fd)
    seconds = time.perf_counter() - start
    if halves is not None and len(synced) >= 2:
        mid_bytes, mid_s = synced[len(synced) // 2 - 1]
        if mid_s > 0 and seconds > mid_s:
            halves += [mid_bytes / mid_s, (written - mid_bytes) / (seconds - mid_s)]
    return written, seconds


def _open_direct(path: Path) -> int | None:
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_RDONLY | flag)
    except OSError:  # EINVAL on some filesystems
        return None


def filesystem_type(path: Path) -> str:
    """The type of the filesystem ``path`` is on (from /proc/self/mountinfo by device), or ""
    where it cannot be told."""
    try:
        dev = os.stat(path).st_dev
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    found = ""
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[2] == want and " - " in line:
            found = line.split(" - ", 1)[1].split()[0]  # the last mount of it wins
    return found


def still_cached(fd: int) -> bool:
    """Whether the file's first page is in the page cache (a read that does not wait
    succeeds); False where that cannot be told."""
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None:
        return False
    try:
        return os.preadv(fd, [bytearray(4096)], 0, flag) > 0
    except OSError:  # EAGAIN: not cached; EOPNOTSUPP: cannot tell
        return False


def _read_pass(path: Path, size: int, deadline: Deadline, buf: mmap.mmap) -> tuple[int, float,
                                                                                  str, bool]:
    fd = _open_direct(path)
    mode, cached = "O_DIRECT", False
    if fd is None:
        fd = os.open(path, os.O_RDONLY)
        if hasattr(os, "posix_fadvise"):
            mode = "posix_fadvise(DONTNEED)"
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            cached = still_cached(fd)
        else:
            mode, cached = "page cache (no O_DIRECT, no fadvise)", True
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
        return total, time.perf_counter() - start, mode, cached
    finally:
        os.close(fd)


def read_passes(path: Path, size: int, budget_s: float,
                passes: int = READ_PASSES) -> tuple[list[float], str, int]:
    """Read the file back ``passes`` times (each at most ``budget_s / passes``); returns each
    pass's bytes/s, the read mode ("memory ..." or "page cache ..." when the read could not
    avoid memory) and the most bytes one pass read."""
    memory_fs = filesystem_type(path)
    rates: list[float] = []
    mode = ""
    most = 0
    buf = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT requires
    try:
        for _ in range(passes):
            total, seconds, mode, cached = _read_pass(path, size, Deadline(budget_s / passes),
                                                      buf)
            rates.append(total / max(seconds, 1e-9))
            most = max(most, total)
            if cached:
                mode = f"page cache ({mode} did not drop it)"
    finally:
        buf.close()
    if memory_fs in MEMORY_FILESYSTEMS:
        mode = f"memory ({memory_fs}: its files live in the page cache)"
    return rates, mode, most


def _mbps(name: str, rates: list[float]) -> Figure:
    base = figure(name, max(rates) / 1e6)
    return Figure(base.name, base.value, base.unit, base.higher_is_better,
                  relative_spread(rates))


def storage(params: ProbeParams) -> ProbeResult:
    """Write (with fsync) and read-back throughput in MB/s of the checkpoint directory; ERROR
    when the directory does not work."""
    if params.checkpoint_dir is None:
        return skipped("storage", params, "no checkpoint dir given")
    directory = params.checkpoint_dir
    started = time.monotonic()
    try:
        size = storage_size(directory, params.storage_bytes)
    except DirUnusable as exc:
        return errored("storage", params, str(exc), time.monotonic() - started)
    budget = params.time_limit_s * params.budget_fraction / 2
    path: Path | None = None
    halves: list[float] = []
    try:
        fd, name = tempfile.mkstemp(prefix=".trainguard-check-", dir=directory)
        path = Path(name)
        try:
            written, w_s = write_synced(fd, size, Deadline(budget), halves)
        finally:
            os.close(fd)
        rates, mode, read = read_passes(path, written, budget)
    except OSError as exc:
        return errored("storage", params, f"{directory}: {describe(exc)}",
                       time.monotonic() - started)
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
    write = figure("write_mbps", written / max(w_s, 1e-9) / 1e6)
    figures: list[Figure] = []
    facts = [("dir", str(directory)), ("bytes_written", str(written)),
             ("bytes_read", str(read)), ("read_mode", mode),
             ("read_passes", str(len(rates)))]
    # Memory speed is not the storage's: kept as evidence, not compared with other hosts.
    if mode.startswith("memory"):  # a tmpfs: its writes are memory copies too
        facts.append(("write_mbps_to_memory", f"{write.value:.0f}"))
    else:
        figures.append(Figure(write.name, write.value, write.unit, write.higher_is_better,
                              relative_spread(halves)))
    if mode.startswith(("memory", "page cache")):
        facts.append(("read_mbps_from_memory", f"{max(rates) / 1e6:.0f}"))
    else:
        figures.append(_mbps("read_mbps", rates))
    return ProbeResult("storage", params.host, Status.OK, figures=tuple(figures),
                       duration_s=time.monotonic() - started, facts=tuple(facts))


__all__ = ["MIN_FREE", "DirUnusable", "filesystem_type", "probe_write",
           "read_passes", "still_cached", "storage", "storage_size", "write_synced"]
