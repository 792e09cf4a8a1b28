"""The timed pieces of `trainguard.ckpt.profile`: a synthetic model-shaped state and plain I/O
passes over its bytes (striped like the engine's writers, or one sequential stream like ``dd``).

The passes do one stage at a time (checksum, write, fsync, cold read, verify) so that stages the
engine overlaps can be told apart. Each file is written and read by its own thread with the
engine's pattern: whole-page chunks through O_DIRECT when asked (the source is page aligned),
the rest through the page cache. These functions raise `OSError` as the system does; the
profile wraps it. The scratch-directory helpers (`make_work_dir`, `remove_tree`,
`warn_leftovers`) and the host facts (`mem_available`, `filesystem_of`) live here too, so that
`trainguard.ckpt.profile` keeps the config, the results and the order of the run.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import mmap
import os
import secrets
import shutil
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from trainguard.ckpt.digest import new_digest
from trainguard.ckpt.layout import StripeLayout, place
from trainguard.ckpt.streams import DIRECT_ALIGN, anonymous_map, open_direct
from trainguard.errors import CheckpointError, ConfigError

__all__ = ["MIN_SIZE", "Source", "StripedTimes", "drop_cache", "filesystem_of", "first_touch_s",
           "make_work_dir", "mem_available", "model_shapes", "probe_direct", "remove_tree",
           "stream_bytes", "striped_pass", "warn_leftovers"]

logger = logging.getLogger(__name__)

MIN_SIZE = 1 << 20
"""Smallest synthetic state (bytes)."""
_MiB = 1 << 20
_FILL_PIECE = 64 << 20
_ITEMSIZE = {"bfloat16": 2, "float32": 4, "uint8": 1}
_T = TypeVar("_T")

now = time.perf_counter


def model_shapes(size_bytes: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(name, dtype, shape)`` of a transformer-like state of exactly `size_bytes` tensor bytes.

    Per layer four bf16 weight matrices (qkv, out, up, down: ``24 h^2`` bytes) and four fp32
    norm vectors; 2 to 32 layers take about 90% of the bytes, an fp32 embedding the rest, and a
    uint8 tail (as an RNG state would be) the last bytes when `size_bytes` is not a multiple of 4.

    >>> shapes = model_shapes(1 << 20)
    >>> sum(math.prod(s) * _ITEMSIZE[d] for _, d, s in shapes) == 1 << 20
    True
    """
    if size_bytes < MIN_SIZE:
        raise ConfigError(f"profile.size_bytes must be >= {MIN_SIZE}, got {size_bytes}")
    layers = max(2, min(32, size_bytes // (64 * _MiB)))
    hidden = max(64, math.isqrt(size_bytes * 9 // 10 // layers // 24) // 64 * 64)
    h = hidden
    shapes: list[tuple[str, str, tuple[int, ...]]] = []
    for i in range(layers):
        p = f"layers.{i}."
        shapes += [(p + "attn.qkv.weight", "bfloat16", (3 * h, h)),
                   (p + "attn.out.weight", "bfloat16", (h, h)),
                   (p + "mlp.up.weight", "bfloat16", (4 * h, h)),
                   (p + "mlp.down.weight", "bfloat16", (h, 4 * h)),
                   (p + "norm1.weight", "float32", (h,)), (p + "norm1.bias", "float32", (h,)),
                   (p + "norm2.weight", "float32", (h,)), (p + "norm2.bias", "float32", (h,))]
    rest = size_bytes - sum(math.prod(s) * _ITEMSIZE[d] for _, d, s in shapes)
    rows, tail = divmod(rest, 4 * h)
    if rows:
        shapes.append(("embed.weight", "float32", (rows, h)))
    if tail:
        shapes.append(("rng_state", "uint8", (tail,)))
    return shapes


def _placed(size_bytes: int) -> tuple[list[tuple[str, str, tuple[int, ...]]], list[int],
                                      list[int], int]:
    """`model_shapes`, each tensor's bytes, its offset in the logical stream, the stream's end."""
    shapes = model_shapes(size_bytes)
    sizes = [math.prod(shape) * _ITEMSIZE[dtype] for _, dtype, shape in shapes]
    offsets, total = place(sizes)
    return shapes, sizes, offsets, total


def stream_bytes(size_bytes: int) -> int:
    """Bytes every method writes for a state of `size_bytes`: its tensors laid out as the
    engine's logical stream (a little more than `size_bytes`: tensors start on page or 64-byte
    boundaries). Cheap: nothing is allocated.

    >>> stream_bytes(1 << 20) >= 1 << 20
    True
    """
    return _placed(size_bytes)[3]


class Source:
    """The synthetic state and its bytes, generated once (not timed).

    The bytes live in one page-aligned buffer laid out exactly as the engine's logical stream
    (`place` of the tensor sizes, zero gaps), and each tensor is a view of its own slice (its
    own storage, as in a real model). So the raw and per-stage passes write this very buffer:
    every method moves the same random bytes (random, so a compressing filesystem cannot
    cheat), and host memory holds one copy. With `device` ``cuda`` the state's tensors are
    copies on the GPU; the buffer stays on the host for the raw passes.
    """

    def __init__(self, torch: Any, size_bytes: int, device: str, seed: int = 0) -> None:
        shapes, sizes, offsets, self.total = _placed(size_bytes)
        self.tensor_bytes = sum(sizes)
        length = max(DIRECT_ALIGN, -(-self.total // DIRECT_ALIGN) * DIRECT_ALIGN)
        self._mmap: mmap.mmap | None = anonymous_map(length)
        self.view = memoryview(self._mmap)[: self.total]
        words = np.frombuffer(self._mmap, dtype=np.uint8)
        rng = np.random.default_rng(seed)
        for offset, nbytes in zip(offsets, sizes, strict=True):
            for start in range(offset, offset + nbytes, _FILL_PIECE):
                n = min(_FILL_PIECE, offset + nbytes - start)
                words[start : start + n] = rng.bit_generator.random_raw(-(-n // 8)).view(
                    np.uint8)[:n]
        del words
        model: dict[str, Any] = {}
        with warnings.catch_warnings():  # frombuffer warns about nothing useful on an mmap
            warnings.simplefilter("ignore")
            for (name, dtype, shape), offset, nbytes in zip(shapes, offsets, sizes, strict=True):
                t = torch.frombuffer(self._mmap, dtype=getattr(torch, dtype),
                                     count=nbytes // _ITEMSIZE[dtype], offset=offset)
                model[name] = t.view(shape) if device == "cpu" else t.view(shape).to(device)
        self.n_tensors = len(model)
        self.state: dict[str, Any] | None = {
            "model": model, "step": 1000, "config": {"layers": len(shapes) // 8, "seed": seed}}

    def close(self) -> None:
        """Drop the state and free the buffer (a view still held elsewhere keeps it: GC frees)."""
        self.state = None
        self.view.release()
        if self._mmap is not None:
            with contextlib.suppress(BufferError):
                self._mmap.close()
            self._mmap = None


def first_touch_s(nbytes: int) -> float:
    """Seconds to allocate `nbytes` of fresh memory and fault in every page: part of every load
    (the engine and ``torch.load`` both read into fresh memory), and slow on some VMs."""
    t0 = now()
    buf = anonymous_map(max(nbytes, 1))
    pages = np.frombuffer(buf, dtype=np.uint8)
    pages[::mmap.PAGESIZE] = 1
    took = now() - t0
    del pages
    buf.close()
    return took


# --- the scratch directory and the host -----------------------------------------------------------


def make_work_dir(directory: Path, prefix: str) -> Path:
    """Create the scratch directory and write (and fsync) a page in it: a directory that
    cannot take writes (read-only mount, no space left, no permission) fails here, before the
    state is generated, with nothing left behind."""
    work = directory / f"{prefix}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        work.mkdir()
    except OSError as exc:
        raise CheckpointError(f"cannot write to --dir {directory}: {exc.strerror or exc}"
                              ) from None
    try:
        fd = os.open(work / "write-probe.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, bytes(DIRECT_ALIGN))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.unlink(work / "write-probe.bin")
    except OSError as exc:
        remove_tree(work)
        raise CheckpointError(f"cannot write to --dir {directory}: {exc.strerror or exc}"
                              ) from None
    except BaseException:
        remove_tree(work)
        raise
    return work


def remove_tree(work: Path) -> None:
    """Remove `work` and all in it; a failure is logged (naming the path), not raised: it runs
    in a ``finally`` and must not hide the error that got there."""
    try:
        shutil.rmtree(work)
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("could not remove the profile's scratch directory %s: %s; remove it "
                       "by hand", work, exc.strerror or exc)


def warn_leftovers(directory: Path, prefix: str) -> None:
    """Name scratch directories of profiles that were killed (SIGKILL, power loss): not removed
    here, as another profile may be running in the same directory."""
    with contextlib.suppress(OSError):
        old = sorted(p.name for p in directory.iterdir() if p.name.startswith(prefix))
        if old:
            logger.warning("%s holds scratch directories of earlier profiles that did not "
                           "finish: %s; remove them if no profile is running there",
                           directory, ", ".join(old))


def mem_available() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def filesystem_of(path: Path) -> str:
    """``ext4 /dev/vda`` for the mount holding `path` (longest matching mount point)."""
    try:
        real = os.path.realpath(path)
        best: tuple[int, str] = (-1, "unknown")
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) > best[0]:
                    best = (len(point), f"{parts[2]} {parts[0].replace(chr(92) + '040', ' ')}")
        return best[1]
    except OSError:
        return "unknown"


def probe_direct(directory: Path) -> bool:
    """Whether files in `directory` take O_DIRECT writes (open, one aligned page, fsync)."""
    path = directory / "direct-probe.bin"
    page = anonymous_map(DIRECT_ALIGN)
    try:
        fd = open_direct(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        if fd is None:
            return False
        try:
            os.pwrite(fd, page, 0)
            os.fsync(fd)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                return False
            raise
        finally:
            os.close(fd)
    finally:
        page.close()
        path.unlink(missing_ok=True)
    return True


def drop_cache(path: Path) -> bool:
    """Ask the kernel to drop `path`'s cached pages (clean after fsync), so the next read comes
    from the storage; False where ``posix_fadvise`` does not exist."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


@dataclass(frozen=True, slots=True)
class StripedTimes:
    """Seconds of each stage of one `striped_pass` (checksum and verify are None without one)."""

    write_s: float
    fsync_s: float
    read_s: float
    checksum_s: float | None
    verify_s: float | None
    cold: bool
    """The page cache of every file was dropped before reading it back."""


def striped_pass(view: memoryview, layout: StripeLayout, directory: Path, name: str, *,
                 direct: bool, algo: str | None) -> StripedTimes:
    """Write `view` as `layout`'s files, fsync, drop their cache, read them back into `view`
    (the same bytes land where they were), and delete them; with `algo`, checksum the files
    before writing and verify what was read. Each stage runs all streams in parallel and
    is timed wall clock, start to last stream done."""
    paths = [directory / f"{name}-{k:03d}.bin" for k in range(layout.streams)]
    chunks = [layout.chunks(k) for k in range(layout.streams)]
    checksum_s = verify_s = None
    try:
        with ThreadPoolExecutor(layout.streams, thread_name_prefix="tg-profile") as pool:
            if algo is not None:
                t0 = now()
                expected = _gather(pool, [partial(_digest, view, c, algo) for c in chunks])
                checksum_s = now() - t0
            write_s, fsync_s = _write_files(pool, paths, chunks, view, direct)
            cold = all([drop_cache(p) for p in paths])
            t0 = now()
            _gather(pool, [partial(_read_file, p, view, c, direct)
                           for p, c in zip(paths, chunks, strict=True)])
            read_s = now() - t0
            if algo is not None:
                t0 = now()
                got = _gather(pool, [partial(_digest, view, c, algo) for c in chunks])
                verify_s = now() - t0
                if got != expected:
                    raise CheckpointError(
                        f"read back of {name} files in {directory} differs from what was "
                        "written: the storage returned wrong bytes")
    finally:
        for path in paths:
            path.unlink(missing_ok=True)
    return StripedTimes(write_s, fsync_s, read_s, checksum_s, verify_s, cold)


def _gather(pool: ThreadPoolExecutor, jobs: Sequence[Callable[[], _T]]) -> list[_T]:
    """Run `jobs` in parallel and wait for all; raise the first real error (a stream that only
    gave up because another failed raises `threading.BrokenBarrierError`, not the cause)."""
    futures: list[Future[_T]] = [pool.submit(job) for job in jobs]
    wait(futures)
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    if errors:
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]
    return [f.result() for f in futures]


def _digest(view: memoryview, chunks: list[tuple[int, int]], algo: str) -> str:
    digest = new_digest(algo)
    for start, length in chunks:
        digest.update(view[start : start + length])
    return digest.hexdigest()


def _write_files(pool: ThreadPoolExecutor, paths: list[Path], chunks: list[list[tuple[int, int]]],
                 view: memoryview, direct: bool) -> tuple[float, float]:
    """(write_s, fsync_s): every stream writes, all meet at a barrier, then all fsync; each
    stream's descriptors live inside its own thread, so nothing leaks on failure."""
    released: list[float] = []
    barrier = threading.Barrier(len(paths), action=lambda: released.append(now()))
    t0 = now()
    ends = _gather(pool, [partial(_write_file, p, view, c, direct, barrier)
                          for p, c in zip(paths, chunks, strict=True)])
    return released[0] - t0, max(ends) - released[0]


def _open_pair(path: Path, flags: int, direct: bool) -> tuple[int | None, int]:
    """A buffered descriptor and, with `direct`, an O_DIRECT one (whole pages only)."""
    fd = os.open(path, flags, 0o644)
    if not direct:
        return None, fd
    try:
        return os.open(path, (flags & ~os.O_TRUNC) | os.O_DIRECT), fd
    except BaseException:
        os.close(fd)
        raise


def _write_file(path: Path, view: memoryview, chunks: list[tuple[int, int]], direct: bool,
                barrier: threading.Barrier) -> float:
    try:
        direct_fd, fd = _open_pair(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, direct)
    except BaseException:
        barrier.abort()
        raise
    try:
        position = 0
        for start, length in chunks:
            target = fd if direct_fd is None or length % DIRECT_ALIGN else direct_fd
            data = view[start : start + length]
            while data:
                written = os.pwrite(target, data, position)
                data, position = data[written:], position + written
        barrier.wait()
        for each in (direct_fd, fd):
            if each is not None:
                os.fsync(each)
        return now()
    except BaseException:
        barrier.abort()
        raise
    finally:
        for each in (direct_fd, fd):
            if each is not None:
                os.close(each)


def _read_file(path: Path, view: memoryview, chunks: list[tuple[int, int]], direct: bool) -> None:
    direct_fd, fd = _open_pair(path, os.O_RDONLY, direct)
    try:
        position = 0
        for start, length in chunks:
            source = fd if direct_fd is None or length % DIRECT_ALIGN else direct_fd
            target = view[start : start + length]
            while target:
                got = os.preadv(source, [target], position)
                if got == 0:
                    raise CheckpointError(f"{path.name} ends early: read back a short file")
                target, position = target[got:], position + got
    finally:
        for each in (direct_fd, fd):
            if each is not None:
                os.close(each)
