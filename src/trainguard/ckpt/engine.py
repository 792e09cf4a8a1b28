"""`Checkpointer`: save a training state fast, persist it in the background, load it back.

Saving (``Checkpointer.save(step, state) -> PendingSave``):

1. Pickle the state with its tensors set aside (`trainguard.ckpt.tensors.capture`).
2. Snapshot every tensor storage into a reusable host buffer (pinned when CUDA is present),
   laid out as `trainguard.ckpt.layout` says. This is the only part training waits for
   (``blocking_s``); the buffer is kept for the next save, so its pages are faulted in once.
3. Meanwhile ``streams`` writer threads write the buffer's chunks to their files as soon as each
   chunk is copied (`trainguard.ckpt.streams`), checksum them, and fsync.
4. The small files (pickled structure, tensor table) and the manifest follow, then the atomic
   rename of `CheckpointDir.commit`. `PendingSave` tells when that is done (or failed).

Memory is bounded: at most ``max_inflight`` snapshots exist; a save that finds all buffers busy
waits for the oldest persist (that wait is part of its blocking time and is reported).

Files of rank ``r`` are ``rank0000r-state.pkl``, ``rank0000r-tensors.json`` and
``rank0000r-data-NNN.bin``. With ``sharded=True`` every rank of the ``torch.distributed``
group saves its own state into the same checkpoint and rank 0 writes the one manifest (see
`trainguard.ckpt.sharded`).

Loading reads the data files with one thread each, straight into one buffer per storage,
checks every file's checksum and names a corrupt one (`CheckpointError`). The structure is
unpickled restricted to tensors, containers, scalars and arrays unless ``trusted=True``
(`trainguard.ckpt.unpickle`).
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import mmap
import os
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.ckpt import sharded as shard_io
from trainguard.ckpt.atomic import (
    CheckpointDir,
    CheckpointInfo,
    SavedCheckpoint,
    SkippedCheckpoint,
    StagedCheckpoint,
    new_tag,
)
from trainguard.ckpt.digest import check_algorithm, digest_bytes
from trainguard.ckpt.jsonread import parse_json
from trainguard.ckpt.layout import StripeLayout, place
from trainguard.ckpt.manifest import FileEntry, Manifest, read_manifest
from trainguard.ckpt.streams import DIRECT_ALIGN, Progress, anonymous_map, read_stream, write_stream
from trainguard.ckpt.tensors import Captured, capture, import_torch, rebuild
from trainguard.errors import CheckpointError, ConfigError
from trainguard.fileread import UnreadableFile, read_bounded

__all__ = ["KIND", "Checkpointer", "PendingSave", "SaveStats"]

logger = logging.getLogger(__name__)

KIND = "tensors"
"""``meta.kind`` of a checkpoint written by `Checkpointer`."""
_TABLE_FORMAT = "trainguard-tensors/1"
_COPY_PIECE = 64 << 20  # copy large storages in pieces so writers start early


def file_names(rank: int, streams: int) -> tuple[str, str, list[str]]:
    """The structure file, tensor table and data files of `rank`."""
    prefix = f"rank{rank:05d}-"
    return (f"{prefix}state.pkl", f"{prefix}tensors.json",
            [f"{prefix}data-{k:03d}.bin" for k in range(streams)])


@dataclass(frozen=True, slots=True)
class SaveStats:
    """Where the time of one save went."""

    blocking_s: float
    """Seconds `Checkpointer.save` held the caller (all of the following)."""
    wait_s: float
    """Part of it spent waiting for a snapshot buffer still being persisted."""
    capture_s: float
    """Pickling the structure."""
    copy_s: float
    """Copying the tensors into the snapshot buffer (device-to-host for CUDA tensors)."""
    nbytes: int
    """Bytes of tensor data."""


class PendingSave:
    """A save whose snapshot is taken and whose files are being written in the background.

    ``wait()`` returns the `SavedCheckpoint` (``save_s`` is the end-to-end time from the
    `save` call to the committed rename) or raises its `CheckpointError`.
    """

    def __init__(self, step: int, path: Path, stats: SaveStats) -> None:
        self.step = step
        self.path = path
        self.stats = stats
        self._done = threading.Event()
        self._result: SavedCheckpoint | None = None
        self._error: CheckpointError | None = None
        self._callbacks: list[Callable[[PendingSave], None]] = []
        self._lock = threading.Lock()
        self._finished = False  # result or error set; `_done` is set once callbacks have run

    def __repr__(self) -> str:
        state = "done" if self.done() else "persisting"
        return f"PendingSave(step={self.step}, {state})"

    @property
    def blocking_s(self) -> float:
        return self.stats.blocking_s

    def done(self) -> bool:
        return self._done.is_set()

    def exception(self) -> CheckpointError | None:
        """The failure of a finished save (None while running or on success)."""
        return self._error

    def wait(self, timeout_s: float | None = None) -> SavedCheckpoint:
        """Block until persisted; `CheckpointError` if it failed or `timeout_s` passed."""
        if not self._done.wait(timeout_s):
            raise CheckpointError(
                f"checkpoint step {self.step} still persisting after {timeout_s} s"
            )
        return self.result()

    def result(self) -> SavedCheckpoint:
        """The finished save's checkpoint, without waiting (a done-callback calls this);
        raises its `CheckpointError`, or one saying it is still persisting."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise CheckpointError(f"checkpoint step {self.step} is still persisting")
        return self._result

    def add_done_callback(self, fn: Callable[[PendingSave], None]) -> None:
        """Call ``fn(self)`` when done (at once if already done), from the persisting thread,
        before `wait` returns: what a callback records is there when training resumes."""
        with self._lock:
            if not self._finished:
                self._callbacks.append(fn)
                return
        fn(self)

    def _finish(self, result: SavedCheckpoint | None, error: CheckpointError | None) -> None:
        with self._lock:
            self._result, self._error = result, error
            self._finished = True
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:  # a reporting callback must not kill the persist thread
                logger.exception("checkpoint done-callback failed")
        self._done.set()


class _Buffer:
    """A reusable snapshot buffer: a uint8 torch tensor over page-aligned memory (an anonymous
    mmap, or CUDA pinned memory when snapshotting CUDA tensors), so O_DIRECT can write it."""

    def __init__(self) -> None:
        self.tensor: Any = None
        self.view: memoryview | None = None
        self.pinned = False
        self._mmap: mmap.mmap | None = None

    @property
    def nbytes(self) -> int:
        return 0 if self.tensor is None else int(self.tensor.numel())

    @property
    def aligned(self) -> bool:
        return self.tensor is not None and self.tensor.data_ptr() % DIRECT_ALIGN == 0

    def ensure(self, nbytes: int, pinned: bool) -> None:
        """Hold at least `nbytes` (reallocating, old one freed first: bounded memory)."""
        torch = import_torch()
        if self.tensor is not None and self.nbytes >= nbytes and (self.pinned or not pinned):
            return
        self.release()
        size = -(-max(nbytes, 1) // DIRECT_ALIGN) * DIRECT_ALIGN
        if pinned:
            self.tensor = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        else:
            self._mmap = anonymous_map(size)
            with warnings.catch_warnings():  # frombuffer: "buffer is not writable" is wrong here
                warnings.simplefilter("ignore")
                self.tensor = torch.frombuffer(self._mmap, dtype=torch.uint8)
        self.pinned = pinned
        self.view = memoryview(self.tensor.numpy()).cast("B")

    def touch(self) -> None:
        """Fault every page in now (first-touch costs then stay out of the first save)."""
        if self.tensor is not None:
            self.tensor.zero_()

    def release(self) -> None:
        self.tensor = self.view = None
        if self._mmap is not None:
            with contextlib.suppress(BufferError):  # a stray view still holds it: GC frees it
                self._mmap.close()
            self._mmap = None


class Checkpointer:
    """Fast, atomic, checksummed checkpoints of a state dict (tensors + anything picklable).

        ckpt = Checkpointer("ckpt/", keep_last=3)
        pending = ckpt.save(step, {"model": model.state_dict(), "step": step})  # returns fast
        ...                                      # training goes on while it is written
        pending.wait()                           # or ckpt.wait() before exiting
        state, info, skipped = ckpt.load_latest()  # newest checkpoint that validates

    `streams` files are written and read in parallel, `stripe_bytes` at a time each; data
    files are checksummed with `checksum` (``crc32`` or ``sha256``), the rest with SHA-256.
    """

    def __init__(
        self,
        root: str | Path,
        *,
        keep_last: int = 3,
        streams: int = 8,
        stripe_bytes: int = 16 << 20,
        checksum: str = "crc32",
        max_inflight: int = 1,
        sharded: bool = False,
        group: Any = None,
        commit_timeout_s: float = 600.0,
        read_threads: int | None = None,
        direct_io: bool = True,
        attempt: int | None = None,
    ) -> None:
        """``attempt``: the supervisor's attempt this process runs in (``TRAINGUARD_ATTEMPT``);
        saves are then refused once a newer attempt uses the directory
        (`trainguard.ckpt.epoch`). None: no fencing."""
        for key, value, low in (("streams", streams, 1), ("stripe_bytes", stripe_bytes, 4096),
                                ("max_inflight", max_inflight, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"checkpoint {key} must be an integer >= {low}, got {value!r}")
        if stripe_bytes % DIRECT_ALIGN:
            raise ConfigError(
                f"checkpoint stripe_bytes must be a multiple of {DIRECT_ALIGN}, got {stripe_bytes}")
        if not commit_timeout_s > 0:
            raise ConfigError(f"checkpoint commit_timeout_s must be > 0, got {commit_timeout_s}")
        self.dir = CheckpointDir(root, keep_last, attempt=attempt)
        self.streams = streams
        self.stripe_bytes = stripe_bytes
        self.checksum = check_algorithm(checksum)
        self.sharded = sharded
        self.group = group
        self.commit_timeout_s = commit_timeout_s
        self.read_threads = read_threads
        self.direct_io = direct_io
        self._buffers = [_Buffer() for _ in range(max_inflight)]
        self._busy: dict[int, PendingSave] = {}  # buffer index -> save using it
        self._pending: list[PendingSave] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"Checkpointer({str(self.root)!r}, streams={self.streams}, "
                f"stripe_bytes={self.stripe_bytes}, checksum={self.checksum!r})")

    @property
    def root(self) -> Path:
        return self.dir.root

    # ---- saving --------------------------------------------------------------------------

    def save(self, step: int, state: Any) -> PendingSave:
        """Snapshot `state` and persist it in the background as checkpoint `step`.

        Returns once the snapshot is taken: training may then change its tensors. Raises
        `CheckpointError` when the state cannot be captured; errors of the background part
        surface from `PendingSave.wait`. With ``sharded=True`` every rank must call it.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise CheckpointError(f"checkpoint step must be an integer >= 0, got {step!r}")
        torch = import_torch()
        t0 = time.monotonic()
        rank, world = shard_io.rank_world(self.group) if self.sharded else (0, 1)
        tag = shard_io.agree_tag(new_tag(step), self.group) if self.sharded else new_tag(step)
        slot = self._acquire()
        t_wait = time.monotonic()
        captured = capture(state)
        t_capture = time.monotonic()
        offsets, total = place([ref.nbytes for ref in captured.storages])
        layout = StripeLayout.plan(total, self.stripe_bytes, self.streams)
        uses_cuda = any(ref.device.startswith("cuda") for ref in captured.storages)
        buffer = self._buffers[slot]
        try:
            buffer.ensure(total, pinned=uses_cuda and torch.cuda.is_available())
        except RuntimeError as exc:
            self._release(slot)
            raise CheckpointError(
                f"cannot allocate a {total / 2**30:.2f} GiB snapshot buffer: {exc}"
            ) from exc
        progress = Progress()
        pending = PendingSave(step, self.dir.root / f"step-{step:08d}",
                              SaveStats(0.0, t_wait - t0, t_capture - t_wait, 0.0, total))
        job = _Job(self, pending, slot, tag, rank, world, captured, offsets, layout, progress, t0)
        thread = threading.Thread(target=job.run, name=f"tg-ckpt-{step}", daemon=True)
        with self._lock:
            self._busy[slot] = pending
            self._pending.append(pending)
        thread.start()
        try:
            _snapshot(torch, captured, offsets, total, buffer.tensor, progress)
        except BaseException as exc:
            progress.fail(exc)
            thread.join()
            if isinstance(exc, Exception):
                raise CheckpointError(f"cannot snapshot checkpoint step {step}: {exc}") from exc
            raise
        done = time.monotonic()
        pending.stats = SaveStats(done - t0, t_wait - t0, t_capture - t_wait, done - t_capture,
                                  total)
        logger.debug("checkpoint step %d: snapshot of %d bytes in %.3f s", step, total, done - t0)
        return pending

    def prepare(self, state: Any) -> int:
        """Allocate and fault in the snapshot buffer(s) for a state like `state` now, at start
        up, so the first save blocks no longer than later ones. Returns the bytes reserved."""
        torch = import_torch()
        captured = capture(state)
        total = place([ref.nbytes for ref in captured.storages])[1]
        pinned = torch.cuda.is_available() and any(
            ref.device.startswith("cuda") for ref in captured.storages)
        with self._lock:
            idle = [b for slot, b in enumerate(self._buffers) if slot not in self._busy]
        for buffer in idle:
            buffer.ensure(total, pinned)
            buffer.touch()
        return total

    def _acquire(self) -> int:
        """A free snapshot buffer, waiting for the oldest persist when all are busy."""
        while True:
            with self._lock:
                for slot in range(len(self._buffers)):
                    if slot not in self._busy:
                        return slot
                oldest = min(self._busy.values(), key=lambda p: p.step)
            oldest._done.wait()

    def _release(self, slot: int) -> None:
        with self._lock:
            self._busy.pop(slot, None)

    def wait(self, timeout_s: float | None = None) -> builtins.list[SavedCheckpoint]:
        """Wait for every save still persisting; raises the first failure."""
        with self._lock:
            pending, self._pending = self._pending, []
        return [p.wait(timeout_s) for p in pending]

    def pending(self) -> builtins.list[PendingSave]:
        """Saves not yet finished."""
        with self._lock:
            self._pending = [p for p in self._pending if not p.done()]
            return list(self._pending)

    # ---- loading -------------------------------------------------------------------------

    def load(self, checkpoint: CheckpointInfo | Path | str, *, map_location: Any = "cpu",
             rank: int | None = None, trusted: bool = False) -> Any:
        """The state saved in `checkpoint` (this rank's shard when sharded); every file read is
        checked and a corrupt one is named in the `CheckpointError`. Restricted unpickling
        unless `trusted` (`trainguard.ckpt.unpickle`)."""
        path = checkpoint.path if isinstance(checkpoint, CheckpointInfo) else Path(checkpoint)
        if rank is None:
            rank = shard_io.rank_world(self.group)[0] if self.sharded else 0
        return load_state(path, rank=rank, map_location=map_location,
                          threads=self.read_threads, expect_world=self._world(),
                          direct_io=self.direct_io, trusted=trusted)

    def _world(self) -> int | None:
        return shard_io.rank_world(self.group)[1] if self.sharded else None

    def load_latest(
        self, *, max_step: int | None = None, map_location: Any = "cpu", trusted: bool = False
    ) -> tuple[Any, CheckpointInfo | None, tuple[SkippedCheckpoint, ...]]:
        """``(state, info, skipped)`` from the newest checkpoint that loads and validates (for a
        sharded checkpoint: on every rank), else ``(None, None, skipped)``: the caller decides
        whether starting from scratch over `skipped` is acceptable. What each load found goes
        to the directory's ledger, so a save never removes a checkpoint that did not load."""
        if self.sharded:
            def load_shard(info: CheckpointInfo, rank: int) -> Any:
                return self.load(info, map_location=map_location, rank=rank, trusted=trusted)

            return shard_io.load_agreed(self.dir, self.group, load_shard, max_step=max_step)
        skipped: builtins.list[SkippedCheckpoint] = []
        for info, reason in self.dir.iter_newest(max_step, validate=False):
            if reason is None:
                try:
                    state = self.load(info, map_location=map_location, trusted=trusted)
                except CheckpointError as exc:
                    reason = str(exc)
                    self.dir.ledger.note(info.path, reason)
                else:
                    self.dir.ledger.note(info.path, None)
                    return state, info, tuple(skipped)
            logger.warning("skipping checkpoint %s: %s", info.path, reason)
            skipped.append(SkippedCheckpoint(info.step, info.path, reason))
        return None, None, tuple(skipped)


def _snapshot(torch: Any, captured: Captured, offsets: builtins.list[int], total: int,
              buffer: Any, progress: Progress) -> None:
    """Copy every storage into `buffer` at its offset, zero the gaps, and advance `progress`."""
    pos = 0
    for ref, offset in zip(captured.storages, offsets, strict=True):
        if offset > pos:
            buffer[pos:offset].zero_()
        source = torch.empty(0, dtype=torch.uint8, device=ref.storage.device)
        source.set_(ref.storage, 0, (ref.nbytes,), (1,))
        if ref.device.startswith("cuda"):
            buffer[offset : offset + ref.nbytes].copy_(source, non_blocking=True)
            torch.cuda.current_stream(source.device).synchronize()
            progress.advance(offset + ref.nbytes)
        else:
            for start in range(0, ref.nbytes, _COPY_PIECE):
                end = min(ref.nbytes, start + _COPY_PIECE)
                buffer[offset + start : offset + end].copy_(source[start:end])
                progress.advance(offset + end)
        pos = offset + ref.nbytes
    progress.advance(total)


class _Job:
    """The background half of one save."""

    def __init__(self, owner: Checkpointer, pending: PendingSave, slot: int, tag: str,
                 rank: int, world: int, captured: Captured, offsets: builtins.list[int],
                 layout: StripeLayout, progress: Progress, started: float) -> None:
        self.owner, self.pending, self.slot, self.tag = owner, pending, slot, tag
        self.rank, self.world, self.captured = rank, world, captured
        self.offsets, self.layout, self.progress, self.started = offsets, layout, progress, started

    def run(self) -> None:
        owner, step = self.owner, self.pending.step
        staged: StagedCheckpoint | None = None
        try:
            staged = owner.dir.stage(step, tag=self.tag.removeprefix(".tmp-"),
                                     clean=self.rank == 0)
            entries = self._write(staged)
            if owner.sharded:
                saved = shard_io.finish_shard(owner.dir, staged, self.rank, self.world, entries,
                                              self._meta(), self.started,
                                              commit_timeout_s=owner.commit_timeout_s)
            else:
                saved = owner.dir.commit(staged, entries, meta=self._meta(), started=self.started)
        except BaseException as exc:
            self.progress.fail(exc)
            if staged is not None:
                if owner.sharded:
                    shard_io.mark_failed(staged, self.rank, exc)
                else:
                    owner.dir.abort(staged)
            error = exc if isinstance(exc, CheckpointError) else CheckpointError(
                f"cannot save checkpoint step {step}: {type(exc).__name__}: {exc}")
            logger.error("checkpoint step %d failed: %s", step, error)
            owner._release(self.slot)
            self.pending._finish(None, error)
            return
        owner._release(self.slot)
        self.pending._finish(saved, None)

    def _meta(self) -> dict[str, Any]:
        return {"kind": KIND, "world_size": self.world, "checksum": self.owner.checksum,
                "streams": self.owner.streams, "stripe_bytes": self.owner.stripe_bytes}

    def _write(self, staged: StagedCheckpoint) -> dict[str, FileEntry]:
        owner, layout = self.owner, self.layout
        struct_name, table_name, data_names = file_names(self.rank, layout.streams)
        view = owner._buffers[self.slot].view
        if view is None:  # pragma: no cover - ensure() always sets it
            raise CheckpointError("snapshot buffer missing")
        with ThreadPoolExecutor(layout.streams, "tg-ckpt-write") as pool:
            direct = owner.direct_io and owner._buffers[self.slot].aligned
            futures = [pool.submit(write_stream, staged.tmp / name, layout, k, view,
                                   self.progress, owner.checksum, direct=direct)
                       for k, name in enumerate(data_names)]
            entries = {name: f.result() for name, f in zip(data_names, futures, strict=True)}
        table = {
            "format": _TABLE_FORMAT,
            "layout": layout.to_json(),
            "structure": struct_name,
            "data": data_names,
            "storages": [{"offset": o, "nbytes": r.nbytes, "device": r.device}
                         for o, r in zip(self.offsets, self.captured.storages, strict=True)],
        }
        small = {struct_name: self.captured.structure,
                 table_name: json.dumps(table, indent=1).encode()}
        for name, data in small.items():
            entries[name] = _write_small(staged.tmp / name, data)
        return entries


def _write_small(path: Path, data: bytes) -> FileEntry:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return FileEntry(size=len(data), digest=digest_bytes("sha256", data), algo="sha256")


def _read_small(directory: Path, manifest: Manifest, name: str) -> bytes:
    entry = manifest.files.get(name)
    if entry is None:
        raise CheckpointError(f"checkpoint {directory} has no {name} in its manifest")
    try:  # a regular file, read no further than one byte past its manifest size
        data = read_bounded(directory / name, entry.size)
    except UnreadableFile as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            raise CheckpointError(f"missing file {name}") from None
        if exc.too_large:
            raise CheckpointError(
                f"size mismatch for {name}: manifest says {entry.size}, file is larger") from None
        raise CheckpointError(f"cannot read {name}: {exc.reason}") from None
    if len(data) != entry.size:
        raise CheckpointError(
            f"size mismatch for {name}: manifest says {entry.size}, file has {len(data)}")
    if digest_bytes(entry.algo, data) != entry.digest:
        raise CheckpointError(f"{entry.algo} mismatch for {name}: the file is corrupt")
    return data


def _parse_table(data: bytes, name: str) -> tuple[StripeLayout, builtins.list[int],
                                                   builtins.list[int], builtins.list[str],
                                                   builtins.list[str], str]:
    table = parse_json(data, name)
    try:
        layout = StripeLayout.from_json(table["layout"])
        storages = table["storages"]
        offsets = [int(s["offset"]) for s in storages]
        sizes = [int(s["nbytes"]) for s in storages]
        devices = [str(s["device"]) for s in storages]
        data_names = [str(n) for n in table["data"]]
        structure = str(table["structure"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"bad tensor table {name}: {exc!s:.200}") from None
    if table.get("format") != _TABLE_FORMAT or len(data_names) != layout.streams:
        raise CheckpointError(f"bad tensor table {name}: unknown format or stream count")
    return layout, offsets, sizes, devices, data_names, structure


def load_state(path: Path, *, rank: int = 0, map_location: Any = "cpu",
               threads: int | None = None, expect_world: int | None = None,
               direct_io: bool = True, trusted: bool = False) -> Any:
    """Load rank `rank`'s state from the checkpoint directory `path` (see `Checkpointer`);
    only `trusted` lifts the unpickling restriction of `trainguard.ckpt.unpickle`."""
    torch = import_torch()
    manifest = read_manifest(path)
    meta_kind = manifest.meta.get("kind")
    if meta_kind != KIND:
        raise CheckpointError(f"{path} is not a tensor checkpoint (kind {meta_kind!r})")
    world = manifest.meta.get("world_size", 1)
    if expect_world is not None and world != expect_world:
        raise CheckpointError(
            f"{path} holds {world} shard(s) but this job has {expect_world} rank(s); "
            "resharding is not supported")
    if not isinstance(world, int) or not 0 <= rank < world:
        raise CheckpointError(f"{path} has no shard for rank {rank} (world size {world})")
    _, table_name, _ = file_names(rank, 0)
    layout, offsets, sizes, devices, data_names, struct_name = _parse_table(
        _read_small(path, manifest, table_name), table_name)
    structure = _read_small(path, manifest, struct_name)
    entries = []
    for name in data_names:
        entry = manifest.files.get(name)
        if entry is None:
            raise CheckpointError(f"checkpoint {path} has no {name} in its manifest")
        entries.append(entry)
    target_devices = [_target(torch, map_location, d) for d in devices]
    pin = torch.cuda.is_available() and any(d.type == "cuda" for d in target_devices)
    arena = _Buffer()
    arena.ensure(layout.total_bytes, pinned=pin)
    if arena.view is None or arena.tensor is None:  # pragma: no cover - ensure() sets both
        raise CheckpointError("cannot allocate the load buffer")
    workers = max(1, min(threads or layout.streams, layout.streams))
    with ThreadPoolExecutor(workers, "tg-ckpt-read") as pool:
        futures = [pool.submit(read_stream, path / name, entry, layout, k, arena.view,
                               direct=direct_io and arena.aligned)
                   for k, (name, entry) in enumerate(zip(data_names, entries, strict=True))]
        errors = [f.exception() for f in futures]
    failed = [e for e in errors if e is not None]
    if failed:
        first = failed[0]
        if isinstance(first, CheckpointError):
            raise first
        raise CheckpointError(f"cannot load {path}: {first}") from first
    storages = []
    for offset, nbytes, device in zip(offsets, sizes, target_devices, strict=True):
        # Each storage is its own view of the arena: no copy; the arena lives while they do.
        piece = arena.tensor[offset : offset + nbytes]
        if device.type != "cpu":
            storages.append(piece.to(device, non_blocking=pin).untyped_storage())
        elif pin:
            storages.append(piece.clone().untyped_storage())
        else:
            storages.append(_own_storage(torch, arena, offset, nbytes))
    return rebuild(structure, storages, trusted=trusted)


def _own_storage(torch: Any, arena: _Buffer, offset: int, nbytes: int) -> Any:
    """A storage of exactly ``arena[offset:offset + nbytes]`` (``untyped_storage()`` of a
    slice would be the whole arena: saving one tensor later would save all of it)."""
    if arena.view is None:  # pragma: no cover
        raise CheckpointError("load buffer released")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.frombuffer(arena.view[offset : offset + nbytes] if nbytes else b"\0",
                                dtype=torch.uint8).untyped_storage()


def _target(torch: Any, map_location: Any, saved: str) -> Any:
    """The device a storage saved on `saved` is loaded onto."""
    if map_location is None:
        device = torch.device(saved)
    elif isinstance(map_location, dict):
        device = torch.device(map_location.get(saved, saved))
    else:
        device = torch.device(map_location)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CheckpointError(
            f"checkpoint storage was on {saved} but CUDA is not available: "
            "load with map_location='cpu'")
    return device
