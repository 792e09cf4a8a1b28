"""`run_profile`: where the time of a checkpoint save and load goes on one filesystem, and the
stream count that is fastest there.

On a synthetic model-shaped state of ``size`` random bytes (`trainguard.ckpt.profile_io.Source`)
it measures, for each stream count:

1. the engine itself (`Checkpointer.save`, `load_state`): the time training is blocked, pickling
   the structure, the snapshot copy (device-to-host for CUDA tensors), end-to-end save and load;
2. the same bytes in the same striped layout, one stage at a time (`striped_pass`), so that
   stages the engine overlaps can be told apart: checksum, write, fsync, cold read, verify;

and, as baselines on the same bytes in the same directory: ``torch.save`` (+ fsync, timed
apart) and ``torch.load``; a raw sequential buffered write + fsync (``dd conv=fsync``) and read;
a raw O_DIRECT single stream (the device ceiling) where the filesystem takes it; the first
touch of fresh memory (which every load pays).

Measuring on a shared machine or VM, where page-cache state and first-touch faults vary:

1. warm up: fault in the snapshot buffer (`Checkpointer.prepare`), one untimed save and load;
2. every repetition runs every method once, in an order rotated by one each time; medians;
3. after each fsync the written files' page cache is dropped (``POSIX_FADV_DONTNEED``) so reads
   are cold where the kernel honours it (`ProfileResult.cold_reads`).

Everything is written under a fresh ``<dir>/.trainguard-profile-<pid>-<hex>/``, one file set at
a time (each deleted right after it is measured, so the peak is one copy of the state), and that
directory is removed at the end, on error and on Ctrl-C. Before anything is written: the
directory must exist and be writable, hold `space_needed` (``1.1 x size + 64 MiB``) free, and
the host must have `memory_needed` (about ``3 x size``) available (state, snapshot buffer, load
buffer); otherwise one clear `CheckpointError`. Then the scratch directory is made and a probe
page written and fsynced there, before the state is generated.

    cfg = ProfileConfig(Path("/mnt/nfs/ckpt"), size_bytes=8 << 30)
    result = run_profile(cfg)
    print(result.recommendation())  # Checkpointer(streams=8, stripe_bytes=16 << 20)
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import stat
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from trainguard.ckpt.digest import check_algorithm
from trainguard.ckpt.engine import Checkpointer, PendingSave, load_state
from trainguard.ckpt.layout import StripeLayout
from trainguard.ckpt.profile_io import (
    MIN_SIZE,
    Source,
    drop_cache,
    filesystem_of,
    first_touch_s,
    make_work_dir,
    mem_available,
    probe_direct,
    remove_tree,
    stream_bytes,
    striped_pass,
    warn_leftovers,
)
from trainguard.ckpt.streams import DIRECT_ALIGN
from trainguard.ckpt.tensors import import_torch
from trainguard.errors import CheckpointError, ConfigError
from trainguard.sizes import format_size

__all__ = ["WORK_PREFIX", "Breakdown", "Comparison", "ProfileConfig", "ProfileResult",
           "StreamProfile", "Timing", "check_target", "default_repeat", "memory_needed",
           "run_profile", "space_needed"]

logger = logging.getLogger(__name__)

WORK_PREFIX = ".trainguard-profile-"
"""Name prefix of the scratch directory the profile writes in (and removes)."""
ProgressFn = Callable[[str, int, int], None]
"""``progress(label, done, total)``: called before each measured method."""

_GiB = 1 << 30
_SPACE_SLACK = 64 << 20
_MEM_SLACK = 256 << 20
_PAR = 1.005

def default_repeat(size_bytes: int) -> int:
    """Repetitions per method: 3 up to 4 GiB, 2 up to 32 GiB, else 1."""
    return 3 if size_bytes <= 4 * _GiB else 2 if size_bytes <= 32 * _GiB else 1


# --- config --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfileConfig:
    """What `run_profile` measures, and where."""

    dir: Path
    """Directory on the filesystem to profile (a scratch subdirectory is made and removed)."""
    size_bytes: int = 2 * _GiB
    """Tensor bytes of the synthetic state."""
    streams: tuple[int, ...] = (1, 2, 4, 8, 16)
    """Stream counts to try (files written and read in parallel)."""
    stripe_bytes: int = 16 << 20
    """Chunk size dealt round-robin to the streams; a multiple of 4096."""
    repeat: int | None = None
    """Repetitions of every method (medians are reported); None: `default_repeat`."""
    checksum: str = "crc32"
    """Checksum of the data files: ``crc32`` or ``sha256``."""
    device: str = "auto"
    """Where the state's tensors live: ``cpu``, ``cuda``, or ``auto`` (CUDA when available)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dir", Path(self.dir))
        if _not_int(self.size_bytes) or self.size_bytes < MIN_SIZE:
            raise ConfigError(f"profile.size_bytes must be >= 1 MiB, got {self.size_bytes!r}")
        if not self.streams:
            raise ConfigError("profile.streams must name at least one stream count")
        for k in self.streams:
            if _not_int(k) or not 1 <= k <= 1024:
                raise ConfigError(f"profile.streams must be integers in 1..1024, got {k!r}")
        if len(set(self.streams)) != len(self.streams):
            raise ConfigError(f"profile.streams has duplicates: {self.streams}")
        object.__setattr__(self, "streams", tuple(sorted(self.streams)))
        if (_not_int(self.stripe_bytes) or self.stripe_bytes < DIRECT_ALIGN
                or self.stripe_bytes % DIRECT_ALIGN or self.stripe_bytes > _GiB):
            raise ConfigError(f"profile.stripe_bytes must be a multiple of {DIRECT_ALIGN} up to "
                              f"1 GiB, got {self.stripe_bytes!r}")
        if self.repeat is not None and (_not_int(self.repeat) or not 1 <= self.repeat <= 100):
            raise ConfigError(f"profile.repeat must be in 1..100, got {self.repeat!r}")
        try:
            check_algorithm(self.checksum)
        except ConfigError as exc:
            raise ConfigError(f"profile.{exc}") from None
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"profile.device must be auto, cpu or cuda, got {self.device!r}")

    @property
    def repetitions(self) -> int:
        return default_repeat(self.size_bytes) if self.repeat is None else self.repeat

    def to_json(self) -> dict[str, Any]:
        return {"dir": str(self.dir), "size_bytes": self.size_bytes, "streams": list(self.streams),
                "stripe_bytes": self.stripe_bytes, "repeat": self.repetitions,
                "checksum": self.checksum, "device": self.device}


def _not_int(value: object) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


# --- results -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Timing:
    """One stage measured once per repetition, over `nbytes` bytes."""

    samples_s: tuple[float, ...]
    nbytes: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def gbps(self) -> float | None:
        """Bytes per second of the median, in GB/s (10^9); None for a zero time."""
        return self.nbytes / self.median_s / 1e9 if self.median_s > 0 else None

    def to_json(self) -> dict[str, Any]:
        gbps = self.gbps
        return {"median_s": round(self.median_s, 6), "gbps": _round(gbps),
                "samples_s": [round(s, 6) for s in self.samples_s]}


STAGES = ("blocking", "serialize", "copy", "d2h", "checksum", "write", "fsync", "save",
          "read", "verify", "load")
"""Stages of `StreamProfile`, in order (see its field docs)."""


@dataclass(frozen=True, slots=True)
class StreamProfile:
    """Every stage with one stream count. Engine timings: blocking, serialize, copy/d2h, save,
    load. Per-stage pass over the same bytes and layout: checksum, write, fsync, read, verify."""

    streams: int
    """Stream count asked for."""
    files: int
    """Data files written (fewer when the state has fewer stripes than `streams`)."""
    blocking: Timing
    """`Checkpointer.save` holding the caller: serialize + snapshot copy."""
    serialize: Timing
    """Pickling the state's structure (tensors set aside)."""
    copy: Timing | None
    """Host-to-host snapshot copy (a CPU state); None for a CUDA state."""
    d2h: Timing | None
    """Device-to-host snapshot copy (a CUDA state); None (n/a) for a CPU state."""
    checksum: Timing
    """Checksumming the files' bytes in memory, all streams in parallel."""
    write: Timing
    """Writing the files, all streams in parallel (O_DIRECT where the filesystem takes it)."""
    fsync: Timing
    """fsync of every file after all writes."""
    save: Timing
    """End to end: the `save` call until the checkpoint is committed (atomic rename)."""
    read: Timing
    """Reading the files back, cache dropped first (cold), all streams in parallel."""
    verify: Timing
    """Checksumming what was read and comparing."""
    load: Timing
    """End to end: `load_state` of the checkpoint, cold, checksums verified."""

    def stage(self, name: str) -> Timing | None:
        value: Timing | None = getattr(self, name)
        return value

    def to_json(self) -> dict[str, Any]:
        stages = {name: None if (t := self.stage(name)) is None else t.to_json()
                  for name in STAGES}
        return {"streams": self.streams, "files": self.files,
                "save_gbps": _round(self.save.gbps), "load_gbps": _round(self.load.gbps),
                "stages": stages}


@dataclass(frozen=True, slots=True)
class Comparison:
    """The engine's best time against a baseline's.

    `speedup` is ``baseline_s / engine_s`` (> 1: the engine is faster); `ratio` is the same
    comparison as a factor >= 1 with `verdict` saying which way: 0.85x faster reads as
    ``1.18x slower``.

    >>> c = Comparison("load vs torch.load", "torch_load", engine_s=1.0, baseline_s=0.85)
    >>> c.summary()
    'load 1.18x slower'
    """

    name: str
    baseline: str
    """Key in `ProfileResult.baselines`."""
    engine_s: float
    baseline_s: float

    @property
    def operation(self) -> str:
        """``save`` or ``load``: the first word of `name`."""
        return self.name.split()[0]

    @property
    def speedup(self) -> float:
        """``baseline_s / engine_s``: > 1 when the engine is faster (inf for a zero time)."""
        return self.baseline_s / self.engine_s if self.engine_s > 0 else math.inf

    @property
    def ratio(self) -> float:
        """How many times faster or slower (see `verdict`): always >= 1."""
        speedup = self.speedup
        return speedup if speedup >= 1 else 1 / speedup if speedup > 0 else math.inf

    @property
    def verdict(self) -> str:
        """``faster``, ``slower``, or ``on par`` (within 0.5%)."""
        if self.ratio < _PAR:
            return "on par"
        return "faster" if self.speedup > 1 else "slower"

    def summary(self) -> str:
        """``save 1.30x faster``, ``load 1.18x slower``, ``save on par``."""
        if self.verdict == "on par":
            return f"{self.operation} on par"
        return f"{self.operation} {self.ratio:.2f}x {self.verdict}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "operation": self.operation, "baseline": self.baseline,
                "engine_s": round(self.engine_s, 6), "baseline_s": round(self.baseline_s, 6),
                "speedup": _finite(self.speedup), "ratio": _finite(self.ratio),
                "verdict": self.verdict, "summary": self.summary()}


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where the time of one operation goes: its stages measured one at a time, and its
    end-to-end time. The engine overlaps stages (copy and checksums with writing), so they may
    sum to more than the end-to-end time (`overlap_s` > 0)."""

    operation: str
    streams: int
    total_s: float
    stages: tuple[tuple[str, float], ...]

    @property
    def stage_sum_s(self) -> float:
        return sum(s for _, s in self.stages)

    @property
    def overlap_s(self) -> float:
        return self.stage_sum_s - self.total_s

    def shares(self) -> list[tuple[str, float, float]]:
        """``(stage, seconds, fraction of the stage sum)``, largest first."""
        total = self.stage_sum_s or 1.0
        return sorted(((n, s, s / total) for n, s in self.stages), key=lambda x: -x[1])

    def to_json(self) -> dict[str, Any]:
        return {"operation": self.operation, "streams": self.streams,
                "total_s": round(self.total_s, 6), "stage_sum_s": round(self.stage_sum_s, 6),
                "stages": [{"stage": n, "seconds": round(s, 6), "percent": round(100 * f, 2)}
                           for n, s, f in self.shares()]}


BASELINES = ("torch_save", "torch_fsync", "torch_total", "torch_load", "raw_write", "raw_fsync",
             "raw_total", "raw_read", "direct_total", "direct_read", "first_touch")
"""Baseline measurements: ``torch.save`` (to the page cache), its fsync, both; ``torch.load``
(cold); raw sequential buffered write, its fsync, both, cold read; raw O_DIRECT write + fsync
and read (absent where O_DIRECT is refused); allocating and faulting in fresh memory."""


@dataclass(frozen=True, slots=True)
class ProfileResult:
    """What `run_profile` measured. Bandwidths are `nbytes` / median time, in GB/s (10^9)."""

    config: ProfileConfig
    nbytes: int
    """Bytes moved by every method: the state's tensor bytes laid out as one stream."""
    n_tensors: int
    device: str
    """Where the state's tensors were (``cpu`` or ``cuda:N``)."""
    filesystem: str
    """Filesystem type and source of `config.dir`, from /proc/self/mounts (or ``unknown``)."""
    direct_io: bool
    """The filesystem takes O_DIRECT (the engine's writes and reads bypass the page cache)."""
    cold_reads: bool
    """Each file's page cache was dropped before reading it back."""
    streams: tuple[StreamProfile, ...]
    baselines: dict[str, Timing] = field(default_factory=dict)
    """By the names of `BASELINES` (missing: not measured here)."""
    wall_s: float = 0.0

    def _best(self, key: Callable[[StreamProfile], float]) -> StreamProfile:
        return min(self.streams, key=lambda s: (key(s), s.streams))  # ties: fewer streams

    @property
    def best_save(self) -> StreamProfile:
        """The stream count with the highest end-to-end save bandwidth."""
        return self._best(lambda s: s.save.median_s)

    @property
    def best_load(self) -> StreamProfile:
        """The stream count with the highest end-to-end load bandwidth."""
        return self._best(lambda s: s.load.median_s)

    def recommendation(self) -> str:
        """The best save configuration as a line to paste."""
        args = f"streams={self.best_save.streams}, stripe_bytes={_shift(self.config.stripe_bytes)}"
        if self.config.checksum != "crc32":
            args += f", checksum={self.config.checksum!r}"
        return f"Checkpointer({args})"

    def comparisons(self) -> list[Comparison]:
        save, load = self.best_save.save.median_s, self.best_load.load.median_s
        pairs = (("save vs torch.save + fsync", save, "torch_total"),
                 ("save vs raw write + fsync (1 stream, buffered)", save, "raw_total"),
                 ("save vs raw O_DIRECT write + fsync (1 stream)", save, "direct_total"),
                 ("load vs torch.load", load, "torch_load"),
                 ("load vs raw read (1 stream, buffered)", load, "raw_read"),
                 ("load vs raw O_DIRECT read (1 stream)", load, "direct_read"))
        return [Comparison(name, key, engine, self.baselines[key].median_s)
                for name, engine, key in pairs if key in self.baselines]

    def breakdowns(self) -> tuple[Breakdown, Breakdown]:
        """Where the time goes for the best save and the best load."""
        s, ld = self.best_save, self.best_load
        copy = ("d2h", s.d2h) if s.d2h is not None else ("copy", s.copy)
        save_stages = [("serialize", s.serialize), copy, ("checksum", s.checksum),
                       ("write", s.write), ("fsync", s.fsync)]
        load_stages = [("allocate", self.baselines.get("first_touch")), ("read", ld.read),
                       ("verify", ld.verify)]
        return (Breakdown("save", s.streams, s.save.median_s,
                          tuple((n, t.median_s) for n, t in save_stages if t is not None)),
                Breakdown("load", ld.streams, ld.load.median_s,
                          tuple((n, t.median_s) for n, t in load_stages if t is not None)))

    def to_json(self) -> dict[str, Any]:
        save, load = self.breakdowns()
        best_save, best_load = self.best_save, self.best_load
        return {
            "config": self.config.to_json(), "nbytes": self.nbytes, "tensors": self.n_tensors,
            "device": self.device, "filesystem": self.filesystem, "direct_io": self.direct_io,
            "cold_reads": self.cold_reads, "wall_s": round(self.wall_s, 3),
            "streams": [s.to_json() for s in self.streams],
            "baselines": {k: v.to_json() for k, v in self.baselines.items()},
            "best": {"save_streams": best_save.streams, "save_gbps": _round(best_save.save.gbps),
                     "load_streams": best_load.streams, "load_gbps": _round(best_load.load.gbps),
                     "recommendation": self.recommendation()},
            "comparisons": [c.to_json() for c in self.comparisons()],
            "where_the_time_goes": [save.to_json(), load.to_json()],
        }


def _round(gbps: float | None) -> float | None:
    return None if gbps is None else round(gbps, 4)


def _finite(value: float) -> float | None:
    """`value` rounded for JSON, None for inf (JSON has no infinity)."""
    return round(value, 4) if math.isfinite(value) else None


def _shift(n: int) -> str:
    """``16 << 20`` for 16 MiB: how a stripe size reads in code."""
    for shift in (30, 20, 10):
        if n % (1 << shift) == 0:
            return f"{n >> shift} << {shift}"
    return str(n)


# --- preflight -----------------------------------------------------------------------------------


def space_needed(size_bytes: int) -> int:
    """Free bytes `run_profile` asks of the directory for a state of `size_bytes`.

    Every method writes one copy of the state and deletes it before the next starts (the
    engine's checkpoint, the per-stage files, torch.save's file, the raw files), so the peak
    is one copy: `stream_bytes` plus block rounding, the engine's small metadata files and
    torch.save's zip headers. 10% + 64 MiB on top leaves room for those and for filesystems
    that free deleted blocks lazily.
    """
    return int(stream_bytes(size_bytes) * 1.1) + _SPACE_SLACK


def memory_needed(size_bytes: int) -> int:
    """Host memory `run_profile` needs for a state of `size_bytes`: the state, the engine's
    snapshot buffer and one loaded copy (torch.load's, the engine's or a first-touch buffer,
    one at a time), plus 256 MiB."""
    return 3 * stream_bytes(size_bytes) + _MEM_SLACK


def check_target(cfg: ProfileConfig) -> None:
    """`CheckpointError` unless `cfg.dir` is an existing directory this process may write, with
    `space_needed` free, on a host with `memory_needed` available. Writes nothing (as root,
    permission bits do not stop writes: `run_profile` also creates its scratch directory and
    writes a probe page there before the long work starts: `make_work_dir`)."""
    d = cfg.dir
    try:
        mode = os.stat(d).st_mode
    except FileNotFoundError:
        raise CheckpointError(f"--dir {d} does not exist") from None
    except NotADirectoryError:
        raise CheckpointError(f"--dir {d} is not a directory (part of the path is a file)"
                              ) from None
    except OSError as exc:
        raise CheckpointError(f"cannot access --dir {d}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(mode):
        raise CheckpointError(f"--dir {d} is not a directory")
    if not os.access(d, os.W_OK | os.X_OK):
        raise CheckpointError(f"--dir {d} is not writable")
    need = space_needed(cfg.size_bytes)
    free = shutil.disk_usage(d).free
    if free < need:
        raise CheckpointError(
            f"not enough free space in {d}: {format_size(free)} free, profiling "
            f"{format_size(cfg.size_bytes)} needs {format_size(need)} (one copy + 10% + "
            "64 MiB); use a smaller --size")
    available = mem_available()
    need = memory_needed(cfg.size_bytes)
    if available is not None and available < need:
        raise CheckpointError(
            f"not enough memory: profiling {format_size(cfg.size_bytes)} needs about "
            f"{format_size(need)} (state, snapshot buffer and load buffer), "
            f"{format_size(available)} available; use a smaller --size")


def _resolve_device(torch: Any, device: str) -> str:
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("profile.device is cuda but CUDA is not available")
        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


def _check_gpu(torch: Any, device: str, size_bytes: int) -> None:
    """The GPU holds the state and one loaded copy."""
    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        if free < 2 * size_bytes + _MEM_SLACK:
            raise CheckpointError(
                f"not enough GPU memory on {device}: {format_size(free)} free, profiling "
                f"{format_size(size_bytes)} needs about {format_size(2 * size_bytes)}")


# --- the run -------------------------------------------------------------------------------------


def run_profile(cfg: ProfileConfig, progress: ProgressFn | None = None) -> ProfileResult:
    """Profile checkpoint saves and loads in `cfg.dir` (see the module docstring).

    Raises `CheckpointError` for an unusable directory, too little space or memory, or an I/O
    failure; `ConfigError` without PyTorch, or for ``device="cuda"`` without CUDA. Nothing is
    left behind, also on Ctrl-C.
    """
    torch = import_torch("trainguard ckpt profile")
    device = _resolve_device(torch, cfg.device)
    check_target(cfg)
    _check_gpu(torch, device, cfg.size_bytes)
    warn_leftovers(cfg.dir, WORK_PREFIX)
    started = time.perf_counter()
    work = make_work_dir(cfg.dir, WORK_PREFIX)
    run = _Run(cfg, torch, device, work, progress or (lambda label, done, total: None))
    try:
        return run.run(started)
    except OSError as exc:
        raise CheckpointError(f"profile failed in {work}: {exc.strerror or exc}") from exc
    except MemoryError as exc:
        raise CheckpointError(f"profile ran out of memory: {exc}; use a smaller --size"
                              ) from exc
    except RuntimeError as exc:  # torch wraps I/O and allocation errors in RuntimeError
        raise CheckpointError(f"profile failed in {work}: {exc}") from exc
    finally:
        try:
            run.close()
        finally:
            remove_tree(work)


class _Run:
    """One profile: owns the synthetic state and the checkpointer; writes in `work` (which
    run_profile makes and removes)."""

    def __init__(self, cfg: ProfileConfig, torch: Any, device: str, work: Path,
                 progress: ProgressFn) -> None:
        self.cfg, self.torch, self.device, self.work = cfg, torch, device, work
        self.progress = progress
        self.source: Source | None = None
        self.pending: PendingSave | None = None  # a save whose files may still be written
        self.step = 0
        self.cold = True
        self.direct = False
        # One Checkpointer, its stream count set per measurement, so every save reuses the one
        # snapshot buffer prepare() faulted in (a Checkpointer per stream count would hold one
        # buffer each, or pay the first touch again in every timed save). Touches no disk yet.
        self.ck = Checkpointer(work / "engine", keep_last=1, streams=max(cfg.streams),
                               stripe_bytes=cfg.stripe_bytes, checksum=cfg.checksum)

    @property
    def state(self) -> Source:
        if self.source is None:  # pragma: no cover - run() makes it first
            raise CheckpointError("profile state not generated")
        return self.source

    def run(self, started: float) -> ProfileResult:
        cfg = self.cfg
        self.direct = probe_direct(self.work)
        methods: list[tuple[str, Callable[[], dict[str, float]]]] = [
            (f"engine, {k} stream{'s' * (k > 1)}", partial(self._streams, k))
            for k in cfg.streams]
        methods += [("torch.save / torch.load", self._torch), ("raw write / read", self._raw),
                     ("first touch", self._first_touch)]
        repeat = cfg.repetitions
        total = 2 + repeat * len(methods)
        self.progress(f"generating {format_size(cfg.size_bytes)} of state", 0, total)
        # Generated after the scratch directory is made (a bad directory fails in a second,
        # not after minutes of generating) and inside run_profile's try (Ctrl-C cleans up).
        self.source = Source(self.torch, cfg.size_bytes, self.device)
        self.progress("warming up", 1, total)
        self.ck.prepare(self.state.state)
        self._engine(max(cfg.streams))
        samples: dict[str, list[float]] = {}
        done = 2
        for rep in range(repeat):
            shift = rep % len(methods)
            for label, measure in methods[shift:] + methods[:shift]:
                self.progress(f"{label} ({rep + 1}/{repeat})", done, total)
                for key, seconds in measure().items():
                    samples.setdefault(key, []).append(seconds)
                done += 1
        self.progress("done", total, total)
        return self._result(samples, time.perf_counter() - started)

    def _result(self, samples: dict[str, list[float]], wall_s: float) -> ProfileResult:
        nbytes = self.state.total

        def timing(key: str) -> Timing | None:
            return Timing(tuple(samples[key]), nbytes) if key in samples else None

        def need(key: str) -> Timing:
            t = timing(key)
            if t is None:  # pragma: no cover - every stream count measures every stage
                raise CheckpointError(f"profile stage {key} was not measured")
            return t

        cuda = self.device.startswith("cuda")
        streams = []
        for k in self.cfg.streams:
            copy = need(f"{k}:copy")
            streams.append(StreamProfile(
                streams=k, files=self._layout(k).streams, blocking=need(f"{k}:blocking"),
                serialize=need(f"{k}:serialize"), copy=None if cuda else copy,
                d2h=copy if cuda else None, checksum=need(f"{k}:checksum"),
                write=need(f"{k}:write"), fsync=need(f"{k}:fsync"), save=need(f"{k}:save"),
                read=need(f"{k}:read"), verify=need(f"{k}:verify"), load=need(f"{k}:load")))
        baselines = {key: t for key in BASELINES if (t := timing(key)) is not None}
        return ProfileResult(
            config=self.cfg, nbytes=nbytes, n_tensors=self.state.n_tensors, device=self.device,
            filesystem=filesystem_of(self.cfg.dir), direct_io=self.direct, cold_reads=self.cold,
            streams=tuple(streams), baselines=baselines, wall_s=wall_s)

    def _layout(self, streams: int) -> StripeLayout:
        return StripeLayout.plan(self.state.total, self.cfg.stripe_bytes, streams)

    # --- methods: each returns {sample key: seconds} -----------------------------------------

    def _streams(self, k: int) -> dict[str, float]:
        """The engine with `k` streams, then the per-stage pass over the same layout."""
        times = {f"{k}:{key}": s for key, s in self._engine(k).items()}
        staged = striped_pass(self.state.view, self._layout(k), self.work, f"stages{k}",
                              direct=self.direct, algo=self.cfg.checksum)
        self.cold &= staged.cold
        times.update({f"{k}:write": staged.write_s, f"{k}:fsync": staged.fsync_s,
                      f"{k}:read": staged.read_s, f"{k}:checksum": staged.checksum_s or 0.0,
                      f"{k}:verify": staged.verify_s or 0.0})
        return times

    def _engine(self, k: int) -> dict[str, float]:
        self.ck.streams = k
        self.step += 1
        pending = self.pending = self.ck.save(self.step, self.state.state)
        stats = pending.stats
        saved = pending.wait()
        self.pending = None
        try:
            for path in saved.path.iterdir():
                self.cold &= drop_cache(path)
            t0 = time.perf_counter()
            loaded = load_state(saved.path, map_location=self.device)
            self._sync()
            load_s = time.perf_counter() - t0
            del loaded
        finally:
            shutil.rmtree(saved.path, ignore_errors=True)
        return {"blocking": stats.blocking_s, "serialize": stats.capture_s,
                "copy": stats.copy_s, "save": saved.save_s, "load": load_s}

    def _torch(self) -> dict[str, float]:
        torch, path = self.torch, self.work / "torch.pt"
        try:
            t0 = time.perf_counter()
            torch.save(self.state.state, path)
            t1 = time.perf_counter()
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            t2 = time.perf_counter()
            self.cold &= drop_cache(path)
            t3 = time.perf_counter()
            loaded = torch.load(path, map_location=self.device, weights_only=True)
            self._sync()
            t4 = time.perf_counter()
            del loaded
        finally:
            path.unlink(missing_ok=True)
        return {"torch_save": t1 - t0, "torch_fsync": t2 - t1, "torch_total": t2 - t0,
                "torch_load": t4 - t3}

    def _raw(self) -> dict[str, float]:
        """One sequential stream in stripe-sized writes, buffered (``dd conv=fsync``) and, where
        the filesystem takes it, O_DIRECT (the device ceiling); each read back cold."""
        layout = self._layout(1)
        raw = striped_pass(self.state.view, layout, self.work, "raw", direct=False, algo=None)
        self.cold &= raw.cold
        times = {"raw_write": raw.write_s, "raw_fsync": raw.fsync_s,
                 "raw_total": raw.write_s + raw.fsync_s, "raw_read": raw.read_s}
        if self.direct:
            d = striped_pass(self.state.view, layout, self.work, "direct", direct=True,
                             algo=None)
            times.update({"direct_total": d.write_s + d.fsync_s, "direct_read": d.read_s})
        return times

    def _first_touch(self) -> dict[str, float]:
        return {"first_touch": first_touch_s(self.state.total)}

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    # --- cleanup -----------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for a save still writing (it would recreate files in the scratch directory)
        and free the state; run_profile then removes the directory."""
        if self.pending is not None:
            with contextlib.suppress(CheckpointError):
                self.pending.wait(timeout_s=600)
            self.pending = None
        if self.source is not None:
            self.source.close()
            self.source = None
