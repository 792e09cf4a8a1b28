"""`Checkpoints`: a checkpoint directory that reports saves and resumes and fires checkpoint
faults. Tensor states go through the fast engine (`trainguard.ckpt.engine.Checkpointer`):
`save_state` returns once the snapshot is taken and persists in the background."""

from __future__ import annotations

import builtins
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from trainguard.ckpt import (
    CheckpointDir,
    CheckpointInfo,
    SavedCheckpoint,
    SkippedCheckpoint,
    Writer,
    bytes_writer,
)
from trainguard.ckpt.engine import Checkpointer, PendingSave
from trainguard.ckpt.manifest import read_manifest, step_dirname
from trainguard.ckpt.resume import check_fresh_start
from trainguard.errors import CheckpointError
from trainguard.snapshot.tier import MemoryTier
from trainguard.train import api
from trainguard.train.env import TrainEnv
from trainguard.train.session import Session

__all__ = ["Checkpoints"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Checkpoints:
    """Checkpoint directory of a training script, with reporting and fault injection.

    >>> import tempfile
    >>> ckpts = Checkpoints(tempfile.mkdtemp(), keep_last=3)
    >>> ckpts.save_bytes(10, {"state.bin": b"step 10"}).step
    10
    >>> ckpts.latest().step          # newest checkpoint that validates (a resume record)
    10
    >>> data, info = ckpts.load(lambda info: info.file("state.bin").read_bytes())
    >>> data, info.step
    (b'step 10', 10)

    Never resumes above ``TRAINGUARD_RESUME_MAX_STEP`` (the supervisor's rollback after a NaN).

    Tensor states (``save_state`` / ``load_state``, and `save_torch` / `load_torch`) use the
    fast engine; `streams`, `stripe_bytes`, `checksum` and `sharded` configure it (see
    `trainguard.ckpt.engine.Checkpointer`).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        keep_last: int = 3,
        *,
        session: Session | None = None,
        streams: int = 8,
        stripe_bytes: int = 16 << 20,
        checksum: str = "crc32",
        sharded: bool = False,
        tier: MemoryTier | None = None,
    ) -> None:
        # Under the supervisor, saves carry the attempt: opening the directory raises its epoch
        # so a fenced (lost) host's older attempt can no longer commit here.
        env = session.env if session is not None else TrainEnv.from_environ(os.environ)
        attempt = env.attempt if env.supervised else None
        self.engine = Checkpointer(Path(root), keep_last=keep_last, streams=streams,
                                   stripe_bytes=stripe_bytes, checksum=checksum, sharded=sharded,
                                   attempt=attempt)
        # One directory object for saves and loads: what a load found unreadable, a save of
        # either kind must not prune (its ledger, `trainguard.ckpt.retention`).
        self.dir: CheckpointDir = self.engine.dir
        self._session = session
        self._tier = tier
        self.dir.fence("opening the checkpoint directory")

    def __repr__(self) -> str:
        return f"Checkpoints({str(self.root)!r}, keep_last={self.dir.keep_last})"

    @property
    def root(self) -> Path:
        return self.dir.root

    @property
    def session(self) -> Session:
        """The session that records events: the one given, else the process-global one."""
        return self._session if self._session is not None else api.init()

    # ---- saving --------------------------------------------------------------------------

    def save(self, step: int, writers: Mapping[str, Writer]) -> SavedCheckpoint:
        """`CheckpointDir.save` plus a ``checkpoint`` record (``ok: false`` and re-raise on
        failure) and any due ``corrupt_checkpoint`` fault."""
        session = self.session
        started = time.monotonic()
        try:
            saved = self.dir.save(step, writers)
        except CheckpointError as exc:
            path = self.root / step_dirname(step) if isinstance(step, int) else self.root
            session.checkpoint_failed(step, path, time.monotonic() - started, str(exc))
            raise
        session.checkpoint_saved(saved)
        return saved

    def save_bytes(self, step: int, files: Mapping[str, bytes]) -> SavedCheckpoint:
        """`save` for contents already in memory."""
        return self.save(step, {name: bytes_writer(data) for name, data in files.items()})

    def save_state(self, step: int, state: object) -> PendingSave:
        """Snapshot a tensor state (a state dict, or anything picklable holding tensors) and
        persist it in the background; returns once training may change its tensors again.

        The ``checkpoint`` record (with ``blocking_s``, the stall, and ``save_s``, the end to
        end time) is written when the save is durable, or ``ok: false`` when it failed.
        Call `wait` before the process exits.
        """
        session = self.session
        started = time.monotonic()
        try:
            with session.span("checkpoint"):
                pending = self.engine.save(step, state)
        except CheckpointError as exc:
            path = self.root / step_dirname(step) if isinstance(step, int) else self.root
            session.checkpoint_failed(step, path, time.monotonic() - started, str(exc))
            raise

        def report(done: PendingSave) -> None:
            error = done.exception()
            if error is not None:
                session.checkpoint_failed(step, done.path, time.monotonic() - started,
                                          str(error))
                return
            session.checkpoint_saved(done.result(), blocking_s=done.blocking_s)

        pending.add_done_callback(report)
        return pending

    # ---- memory snapshots (trainguard.snapshot.tier) -------------------------------------

    @property
    def tier(self) -> MemoryTier:
        """This rank's memory tier (from TRAINGUARD_SNAPSHOT_DIR, _EVERY, _RESTORE...)."""
        if self._tier is None:
            self._tier = MemoryTier.from_environ(os.environ)
        return self._tier

    def snapshot(self, step: int, state: object | Callable[[], object]) -> bool:
        """Snapshot `state` (or what a zero-argument callable returns) into host memory when
        due, as resuming at `step`; every rank calls it every step. Returns whether it did.
        Off (returns False at once) unless the supervisor set TRAINGUARD_SNAPSHOT_DIR."""
        return self.tier.maybe_snapshot(step, state)

    def restore_memory(self, *, map_location: object = "cpu",
                       trusted: bool = False) -> tuple[object, CheckpointInfo] | None:
        """The state from the memory slot TRAINGUARD_RESTORE names and writes the ``resume``
        record (``source`` memory or buddy); None when it is not set. `SnapshotError` (the
        supervisor then relaunches from disk) when the slot does not verify."""
        restored = self.tier.restore(map_location=map_location, trusted=trusted)
        if restored is None:
            return None
        self.session.resumed(restored.step, restored.path, [], source=restored.source)
        logger.info("resuming from memory snapshot %s (step %d, %.2f s)", restored.path,
                    restored.step, restored.restore_s)
        return restored.state, CheckpointInfo(restored.step, restored.path, time.time(), ())

    def prepare(self, state: object) -> int:
        """Reserve the snapshot buffer for states like `state` at start-up (see
        `Checkpointer.prepare`); returns the bytes reserved."""
        return self.engine.prepare(state)

    def wait(self, timeout_s: float | None = None) -> builtins.list[SavedCheckpoint]:
        """Wait until every background save is durable (and the last memory snapshot is
        committed); raises the first failure."""
        if self._tier is not None:
            self._tier.wait()
        return self.engine.wait(timeout_s)

    def load_state(
        self, *, map_location: object = "cpu", max_step: int | None = None,
        trusted: bool = False, allow_fresh_start: bool = False,
    ) -> tuple[object, CheckpointInfo] | None:
        """The newest tensor state that loads and verifies (``(state, info)``), falling back
        past corrupt ones, or None when there is no checkpoint; writes one ``resume`` record.
        Sharded checkpoints resume every rank from the same step.

        Unpickling is restricted (tensors, containers, scalars, arrays) unless `trusted`. When
        checkpoints exist but none loads, `CheckpointError` lists them unless
        `allow_fresh_start` (see `trainguard.ckpt.resume`).

        When TRAINGUARD_RESTORE is set, the state comes from that memory slot instead
        (`restore_memory`).
        """
        memory = self.restore_memory(map_location=map_location, trusted=trusted)
        if memory is not None:
            return memory
        if self.engine.sharded:
            bound = self.max_step(max_step)
            state, info, skipped = self.engine.load_latest(
                max_step=bound, map_location=map_location, trusted=trusted)
            self.session.resumed(None if info is None else info.step,
                                 None if info is None else info.path, skipped)
            if info is None:
                check_fresh_start(self.root, skipped, max_step=bound,
                                  allow_fresh_start=allow_fresh_start)
                return None
            return state, info
        return self.load(
            lambda info: self.engine.load(info, map_location=map_location, trusted=trusted),
            max_step=max_step, validate=False, allow_fresh_start=allow_fresh_start)

    def is_tensor_checkpoint(self, info: CheckpointInfo) -> bool:
        """Whether `info` was written by the tensor engine (else: by `save` writers)."""
        try:
            return read_manifest(info.path).meta.get("kind") == "tensors"
        except CheckpointError:
            return False

    # ---- reading -------------------------------------------------------------------------

    def list(self) -> builtins.list[CheckpointInfo]:
        """Checkpoints sorted by step, newest last (not validated)."""
        return self.dir.list()

    def validate(self, info: CheckpointInfo) -> str | None:
        """None when valid, else the reason."""
        return self.dir.validate(info)

    def max_step(self, max_step: int | None = None) -> int | None:
        """The tighter of `max_step` and ``TRAINGUARD_RESUME_MAX_STEP``."""
        env_max = self.session.env.resume_max_step
        bounds = [b for b in (max_step, env_max) if b is not None]
        return min(bounds) if bounds else None

    def latest(
        self, max_step: int | None = None, *, allow_fresh_start: bool = False
    ) -> CheckpointInfo | None:
        """The newest valid checkpoint to resume from (None: start from scratch); writes a
        ``resume`` record listing the newer ones passed over. `CheckpointError` when
        checkpoints exist but none is valid, unless `allow_fresh_start`."""
        found = self.load(lambda info: info, max_step=max_step,
                          allow_fresh_start=allow_fresh_start)
        return None if found is None else found[1]

    def load(
        self,
        loader: Callable[[CheckpointInfo], T],
        *,
        max_step: int | None = None,
        validate: bool = True,
        allow_fresh_start: bool = False,
    ) -> tuple[T, CheckpointInfo] | None:
        """Load the newest valid checkpoint with `loader`, falling back to older ones.

        ``validate=False`` leaves the checking to `loader` (the tensor engine verifies every
        byte as it reads): a `CheckpointError` from it then counts as a damaged checkpoint.

        A checkpoint is passed over when it fails validation, lies above the max step, or when
        `loader` raises on it. Writes one ``resume`` record. Returns None when no checkpoint
        exists (or every one lies above the max step). Raises `CheckpointError` when intact
        checkpoints exist but `loader` failed on every one of them (a bug or an environment
        problem: a missing module, an incompatible version), and, unless
        `allow_fresh_start`, when checkpoints exist but none could be read (newer format,
        damaged): silently starting from scratch would throw the run away. Checkpoints that
        did not load are never pruned by later saves (`trainguard.ckpt.retention`).
        """
        session = self.session
        bound = self.max_step(max_step)
        skipped: builtins.list[SkippedCheckpoint] = []
        load_errors: builtins.list[str] = []
        for info, reason in self.dir.iter_newest(bound, validate=validate):
            if reason is None:
                try:
                    obj = loader(info)
                    self.dir.ledger.note(info.path, None)
                except CheckpointError as exc:
                    if validate:
                        reason = f"load failed: {_one_line(exc)}"
                        load_errors.append(f"step {info.step}: {reason}")
                    else:
                        reason = str(exc)
                except Exception as exc:  # the loader is user code: any failure means "skip"
                    reason = f"load failed: {_one_line(exc)}"
                    load_errors.append(f"step {info.step}: {reason}")
                else:
                    session.resumed(info.step, info.path, skipped)
                    logger.info("resuming from checkpoint %s", info.path)
                    return obj, info
            if bound is None or info.step <= bound:
                self.dir.ledger.note(info.path, reason)
            logger.warning("skipping checkpoint %s: %s", info.path, reason)
            skipped.append(SkippedCheckpoint(info.step, info.path, reason))
        session.resumed(None, None, skipped)
        if load_errors:
            raise CheckpointError(
                f"no checkpoint in {self.root} could be loaded ({'; '.join(load_errors)})"
            )
        check_fresh_start(self.root, skipped, max_step=bound,
                          allow_fresh_start=allow_fresh_start)
        return None
