"""The SDK's memory tier: each rank snapshots its state into its host's memory and restores
from the slot the supervisor chose (design: docs/design/recovery-in-seconds.md, "SDK").

    tier = MemoryTier.from_environ(os.environ)
    restored = tier.restore()                    # None unless TRAINGUARD_RESTORE is set
    for step in ...:
        ...
        tier.maybe_snapshot(step + 1, lambda: {"model": model.state_dict(), "step": step + 1})
    tier.wait()                                  # the last commit is done

Only the copy into the slot blocks training: the digest and the header (the commit) are
written by a background thread, and the next snapshot first waits for that commit. The two
slots of a rank stay mapped and pre-faulted (``posix_fallocate`` + ``MADV_POPULATE_WRITE``)
for the life of the process: a copy into a fresh tmpfs file pays page allocation and faults
(~1.7 s/GB measured here), one into a populated mapping runs at memory speed (~0.04 s/GB).
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainguard.errors import ConfigError, SnapshotError
from trainguard.snapshot.interval import IntervalConfig, aligned, choose_every, is_due
from trainguard.snapshot.slot import (
    ALGO,
    HEADER_BYTES,
    Expected,
    SlotHeader,
    commit,
    digest_of,
    next_slot,
    open_verified,
    slot_paths,
)
from trainguard.snapshot.state import load_state, plan_state, write_state

__all__ = ["MemoryTier", "RestoreSpec", "Restored", "SnapshotRecord", "TierSettings",
           "mem_available"]

logger = logging.getLogger(__name__)

_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux >= 5.14
SLOTS_NEEDED = 4
"""Slots of one rank's size a host holds: 2 own (double buffer) + 2 replica of a buddy's."""


@dataclass(frozen=True, slots=True)
class RestoreSpec:
    """``TRAINGUARD_RESTORE``: the slot the supervisor chose for this rank."""

    step: int
    attempt: int
    digest: str
    path: Path
    source: Literal["local", "buddy"]
    holder: str

    @staticmethod
    def parse(text: str) -> RestoreSpec:
        try:
            raw = json.loads(text)
            source = str(raw["source"])
            if source not in ("local", "buddy"):
                raise ValueError(f"source {source!r} is not 'local' or 'buddy'")
            return RestoreSpec(int(raw["step"]), int(raw["attempt"]), str(raw["digest"]),
                               Path(str(raw["path"])), "local" if source == "local" else "buddy",
                               str(raw.get("holder", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"TRAINGUARD_RESTORE is malformed ({exc}): {text[:200]!r}") \
                from None


def _int(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name, "").strip()
    try:
        return int(text) if text else default
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {text!r}") from None


@dataclass(frozen=True, slots=True)
class TierSettings:
    """What the supervisor set for the memory tier of this rank."""

    directory: Path | None = None
    """TRAINGUARD_SNAPSHOT_DIR (the host directory); None: no snapshots."""
    interval: IntervalConfig | None = field(default_factory=IntervalConfig)
    """TRAINGUARD_SNAPSHOT_EVERY (``auto``, an integer K); None when ``off``."""
    restore: RestoreSpec | None = None
    """TRAINGUARD_RESTORE."""
    attempt: int = 0
    rank: int = 0
    world: int = 1
    node: str = ""

    @staticmethod
    def from_environ(environ: Mapping[str, str]) -> TierSettings:
        every = environ.get("TRAINGUARD_SNAPSHOT_EVERY", "auto").strip().lower() or "auto"
        interval: IntervalConfig | None
        if every == "off":
            interval = None
        elif every == "auto":
            interval = IntervalConfig()
        else:
            k = _int(environ, "TRAINGUARD_SNAPSHOT_EVERY", 1)
            if k < 1:
                raise ConfigError(f"TRAINGUARD_SNAPSHOT_EVERY must be auto, off or >= 1, "
                                  f"got {k}")
            interval = IntervalConfig(every=k)
        directory = environ.get("TRAINGUARD_SNAPSHOT_DIR", "").strip()
        restore = environ.get("TRAINGUARD_RESTORE", "").strip()
        return TierSettings(
            directory=Path(directory) if directory else None, interval=interval,
            restore=RestoreSpec.parse(restore) if restore else None,
            attempt=_int(environ, "TRAINGUARD_ATTEMPT", 0), rank=_int(environ, "RANK", 0),
            world=_int(environ, "WORLD_SIZE", 1),
            node=environ.get("TRAINGUARD_NODE", "").strip())


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """One snapshot taken (what a benchmark or a test reads)."""

    step: int
    path: Path
    payload_bytes: int
    blocking_s: float
    """Training stalled this long (the copy, plus ``setup_s`` on a slot's first use)."""
    setup_s: float
    """Of which: sizing, pre-faulting and mapping the slot (first use only)."""


@dataclass(frozen=True, slots=True)
class Restored:
    """A state rebuilt from a memory slot."""

    state: Any
    step: int
    source: Literal["memory", "buddy"]
    path: Path
    restore_s: float


def mem_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable in bytes (None where it cannot be read). tmpfs pages are not counted in
    it, so it bounds what more snapshots can take."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


class _MappedSlot:
    """One slot file kept mapped and pre-faulted for the life of the process."""

    def __init__(self, path: Path, size: int) -> None:
        self.path, self.size = path, size
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            os.posix_fallocate(fd, 0, size)  # allocate the tmpfs pages now, not mid-copy
            self.map = mmap.mmap(fd, size)
        except OSError as exc:
            os.close(fd)
            raise SnapshotError(f"cannot prepare snapshot slot {path}: "
                                f"{exc.strerror or exc}") from exc
        self.fd = fd
        # Populate the page tables too (writable): the copy then takes no faults. Older
        # kernels refuse the advice: the first copy then pays the minor faults.
        with contextlib.suppress(OSError):
            self.map.madvise(_MADV_POPULATE_WRITE, 0, size)

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


AGREE_AFTER_STEPS = 8
"""Steps measured before the ranks agree on the snapshot interval."""


def agree_max(k: int) -> int:
    """The largest ``k`` over the job's process group (``torch.distributed`` all-reduce MAX,
    once per process), or ``k`` when there is no initialized group of more than one rank."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() \
            or dist.get_world_size() <= 1:
        return k
    import torch

    device = torch.device("cpu")
    if dist.get_backend() == "nccl":  # pragma: no cover - needs a GPU
        device = torch.device("cuda", torch.cuda.current_device())
    value = torch.tensor([k], dtype=torch.int64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return int(value.item())


class MemoryTier:
    """Snapshots of one rank into ``<TRAINGUARD_SNAPSHOT_DIR>/own`` and its restore."""

    def __init__(self, settings: TierSettings, *, clock: Callable[[], float] = time.monotonic,
                 statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
                 meminfo: Callable[[], int | None] = mem_available,
                 copy_threads: int = 1,
                 agree: Callable[[int], int] | None = None) -> None:
        """``agree``: makes every rank use the same measured K (default: the largest over
        the process group, `agree_max`); tests inject it."""
        self.settings = settings
        self._agree = agree if agree is not None else agree_max
        self._agreed: int | None = None
        self.copy_threads = copy_threads
        self.history: list[SnapshotRecord] = []
        self.commit_s: list[float] = []
        self._clock, self._statvfs, self._meminfo = clock, statvfs, meminfo
        self._blocking: list[float] = []
        self._steps: list[float] = []
        self._last_step: int | None = None
        self._last_exit: float | None = None
        self._checked_bytes = 0
        self._slots: dict[Path, _MappedSlot] = {}
        self._commit: threading.Thread | None = None
        self._commit_error: BaseException | None = None

    @staticmethod
    def from_environ(environ: Mapping[str, str], **kwargs: Any) -> MemoryTier:
        return MemoryTier(TierSettings.from_environ(environ), **kwargs)

    @property
    def enabled(self) -> bool:
        """Whether this rank snapshots (a snapshot directory is set and K is not ``off``)."""
        return self.settings.directory is not None and self.settings.interval is not None

    @property
    def own(self) -> Path:
        if self.settings.directory is None:
            raise SnapshotError("TRAINGUARD_SNAPSHOT_DIR is not set")
        return self.settings.directory / "own"

    # ---- snapshots -----------------------------------------------------------------------

    def every(self) -> int:
        """The current interval K (measured K rounded up to a power of two, see
        `trainguard.snapshot.interval`; an explicit K as given)."""
        cfg = self.settings.interval or IntervalConfig()
        if cfg.every is not None:
            return cfg.every
        if self._agreed is not None:
            return self._agreed
        if len(self._steps) < AGREE_AFTER_STEPS:
            return cfg.max_every  # measuring: only the first snapshot so far
        size = self.history[-1].payload_bytes if self.history else 0
        # Every rank measures its own times; a restore needs a step that all ranks hold, so
        # they agree once on one K (the largest), at the same step (they all call this
        # every step from the same start).
        self._agreed = max(1, self._agree(aligned(choose_every(self._blocking, self._steps,
                                                               cfg, size))))
        return self._agreed

    def maybe_snapshot(self, step: int, state: object | Callable[[], object]) -> bool:
        """Snapshot `state` (or what the callable returns) as resuming at `step` when due;
        returns whether it did. Cheap when not due (the callable is not called)."""
        if not self.enabled:
            return False
        start = self._clock()
        if self._last_exit is not None:
            self._steps.append(start - self._last_exit)
            del self._steps[:-64]
        if not is_due(step, self._last_step, self.every()):
            self._last_exit = self._clock()
            return False
        self.wait()
        value = state() if callable(state) else state
        plan = plan_state(value)
        size = HEADER_BYTES + max(plan.payload_bytes, 1)
        if plan.payload_bytes > self._checked_bytes:
            self.check_space(plan.payload_bytes)
            self._checked_bytes = plan.payload_bytes
        path = self._target()
        slot = self._slots.get(path)
        if slot is None or slot.size < size:
            if slot is not None:
                slot.close()
            slot = self._slots[path] = _MappedSlot(path, size)
        setup_s = self._clock() - start
        slot.map[:HEADER_BYTES] = bytes(HEADER_BYTES)  # invalid until committed
        with memoryview(slot.map) as whole:
            write_state(plan, whole[HEADER_BYTES:HEADER_BYTES + plan.payload_bytes],
                        self.copy_threads)
        self._last_exit = self._clock()
        blocking = self._last_exit - start
        self._blocking.append(blocking)
        del self._blocking[:-64]
        self._last_step = step
        self.history.append(SnapshotRecord(step, path, plan.payload_bytes, blocking, setup_s))
        self._commit = threading.Thread(target=self._committer, args=(slot, step, plan
                                                                      .payload_bytes),
                                        name="tg-snap-commit", daemon=True)
        self._commit.start()
        return True

    def _target(self) -> Path:
        """The slot to write: alternate between the two. The first snapshot of a process
        spares the newest committed slot (`next_slot`), and later ones do not ask again: a
        newer step left by a failed attempt would otherwise stay "newest" and make every new
        snapshot overwrite the previous one."""
        a, b = slot_paths(self.own, self.settings.rank)
        if not self.history:
            return next_slot(self.own, self.settings.rank)
        return b if self.history[-1].path == a else a

    def _committer(self, slot: _MappedSlot, step: int, payload_bytes: int) -> None:
        """Digest and commit the slot just written, then pre-fault the other slot."""
        started = self._clock()
        s = self.settings
        try:
            with memoryview(slot.map) as whole:
                digest = digest_of(whole[HEADER_BYTES:HEADER_BYTES + payload_bytes])
            commit(slot.path, SlotHeader(s.rank, s.world, step, s.attempt, payload_bytes,
                                         digest, ALGO, s.node, time.time()))
            self.commit_s.append(self._clock() - started)
            for other in slot_paths(self.own, s.rank):
                if other != slot.path and (other not in self._slots
                                           or self._slots[other].size < slot.size):
                    if other in self._slots:
                        self._slots.pop(other).close()
                    # Allocating and mapping never changes the file's bytes: an older
                    # committed snapshot there stays valid until it is overwritten.
                    self._slots[other] = _MappedSlot(other, slot.size)
        except BaseException as exc:  # reported by wait(): a thread cannot raise to training
            self._commit_error = exc

    def wait(self) -> None:
        """Wait until the last snapshot is committed (a failed commit is logged: the slot
        simply stays invalid and is never restored)."""
        if self._commit is not None:
            self._commit.join()
            self._commit = None
        if self._commit_error is not None:
            logger.warning("memory snapshot commit failed: %s", self._commit_error)
            self._commit_error = None

    def check_space(self, payload_bytes: int) -> None:
        """`SnapshotError` with the figures when the snapshot directory's free space or the
        host's MemAvailable cannot hold 2 own + 2 replica slots of this size."""
        slot = HEADER_BYTES + payload_bytes
        held = 0  # this rank's slots already allocated count as free for it
        for path in slot_paths(self.own, self.settings.rank):
            with contextlib.suppress(OSError):
                held += os.stat(path).st_blocks * 512
        need = SLOTS_NEEDED * slot - held
        self.own.mkdir(mode=0o700, parents=True, exist_ok=True)
        vfs = self._statvfs(self.own)
        free = vfs.f_bavail * vfs.f_frsize
        available = self._meminfo()
        problems = []
        if free < need:
            problems.append(f"{self.own} has {_gib(free)} free")
        if available is not None and available < need:
            problems.append(f"MemAvailable is {_gib(available)}")
        if problems:
            raise SnapshotError(
                f"memory snapshots of rank {self.settings.rank} need {SLOTS_NEEDED} x "
                f"{_gib(slot)} = {_gib(SLOTS_NEEDED * slot)} (2 own + 2 replica slots; "
                f"{_gib(max(need, 0))} more than held now) but {' and '.join(problems)}; "
                "set TRAINGUARD_SNAPSHOT_EVERY=off or free memory")

    # ---- restore -------------------------------------------------------------------------

    def restore(self, *, map_location: Any = "cpu", trusted: bool = False) -> Restored | None:
        """The state from the slot ``TRAINGUARD_RESTORE`` names, verified against the step,
        attempt and digest the supervisor chose (None when it is not set); `SnapshotError`
        naming the slot and why when it does not match."""
        spec = self.settings.restore
        if spec is None:
            return None
        started = self._clock()
        expect = Expected(spec.step, spec.attempt, spec.digest)
        with open_verified(spec.path, expect, self.settings.rank) as view:
            state = load_state(view.payload, map_location=map_location,
                               threads=self.copy_threads, trusted=trusted)
        source: Literal["memory", "buddy"] = "memory" if spec.source == "local" else "buddy"
        self._last_step = spec.step  # the restored state is already in a slot
        return Restored(state, spec.step, source, spec.path, self._clock() - started)

    def close(self) -> None:
        """Wait for the last commit and unmap the slots (the files stay)."""
        self.wait()
        for slot in self._slots.values():
            slot.close()
        self._slots.clear()
