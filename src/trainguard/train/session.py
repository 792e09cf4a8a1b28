"""One training process's reporting state: phases, step heartbeats, faults, checkpoint events.

The module-level API (``tg.init()``, ``tg.step()``...) drives one process-global `Session`;
tests build their own with a fake clock. Records (one JSON object per line, see `EventLog`)::

    {"t": ..., "rank": 0, "kind": "phase", "name": "dist_init", "start": ..., "end": ...}
    {"t": ..., "rank": 0, "kind": "phase", "name": "first_step", ..., "backend": "gloo"}
    {"t": ..., "rank": 0, "kind": "step", "step": 12, "loss": 2.31, "step_s": 0.05}
    {"t": ..., "rank": 0, "kind": "nonfinite", "step": 31, "loss": "nan"}
    {"t": ..., "rank": 0, "kind": "checkpoint", "step": 40, "path": ..., "size_bytes": ...,
     "save_s": ..., "ok": true}
    {"t": ..., "rank": 0, "kind": "resume", "step": 30, "path": ..., "skipped": [...],
     "source": "disk"}
    {"t": ..., "rank": 0, "kind": "fault", "fault": "nan:step=31", "step": 31}
    {"t": ..., "rank": 0, "kind": "trace", "start": ..., "end": ..., "steps": 92, ...}
    {"t": ..., "rank": 0, "kind": "finish"}

Step records are throttled to one per ``heartbeat_s``: the first step always goes out, a step
that falls inside the interval is held back and written when the interval has passed, before
any other record (so the last good step precedes a ``nonfinite``, ``fault`` or ``finish``) and at
interpreter exit.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NoReturn, SupportsFloat, TextIO

from trainguard.ckpt import SavedCheckpoint, SkippedCheckpoint, corrupt_checkpoint
from trainguard.errors import CheckpointError, TrainguardError
from trainguard.faultspec import FaultKind, FaultSpec, format_fault
from trainguard.train.env import TrainEnv, process_start_time
from trainguard.train.events import EventLog
from trainguard.train.faults import cuda_error_text, is_due, sdk_faults
from trainguard.train.tracing import Tracer, activate, install_stack_dump, trace_collectives

__all__ = ["NonFiniteLossError", "OnNonfinite", "Session"]

logger = logging.getLogger(__name__)

OnNonfinite = Literal["raise", "record"]


class NonFiniteLossError(TrainguardError):
    """The loss given to `Session.step` was NaN or infinite: ``loss is nan at step 31``."""


def _loss_text(loss: float) -> str:
    return "nan" if math.isnan(loss) else ("inf" if loss > 0 else "-inf")


def _start_kind() -> str:
    """``warm`` when this process is a rank run in a pre-warmed standby (the launcher sets
    ``TRAINGUARD_WARM_START``), else ``cold``: recorded with the imports phase, so the report
    need not guess from the phase's length."""
    return "warm" if os.environ.get("TRAINGUARD_WARM_START") == "1" else "cold"

def dist_backend() -> str | None:
    """The default process group's backend (``nccl``, ``gloo``...) when torch.distributed is
    initialized, else None; torch is never imported for this. The supervisor names a hang's
    backend from it."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return str(dist.get_backend())
    except Exception:  # a report, never worth failing the rank
        return None


class Session:
    """Reporting and fault injection for one training process.

    >>> clock = iter(range(100)).__next__
    >>> s = Session(TrainEnv(), clock=lambda: float(clock()))  # unsupervised: writes nothing
    >>> with s.phase("dist_init"):
    ...     pass
    >>> s.step(0, loss=2.5)
    >>> s.finish()
    """

    def __init__(
        self,
        env: TrainEnv,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        stderr: TextIO | None = None,
        exit_process: Callable[[int], NoReturn] = os._exit,
        process_start: Callable[[], float | None] | None = None,
    ) -> None:
        """``process_start`` gives the unix time this process started, the ``imports`` phase's
        start when ``TRAINGUARD_LAUNCH_TIME`` is absent (None: no such phase). By default it is
        read from ``/proc``, but only with the real clock: another clock's times would not be
        comparable with it."""
        self.env = env
        self._clock = clock
        self._sleep = sleep
        self._stderr = stderr
        self._exit = exit_process
        self._log = EventLog(env.events_path) if env.events_path is not None else None
        # A child forked after init (e.g. a DataLoader worker) inherits the fd: it must not
        # write this rank's records.
        self._pid = os.getpid()
        self._record_lock = threading.RLock()
        self._faults = sdk_faults(env.faults, env.attempt, env.rank, env.node)
        self._fired: set[int] = set()
        self.started = clock()
        self._launch_time = env.launch_time if env.launch_time is not None else self.started
        self._last_phase_end = self.started
        self._last_step_call: float | None = None
        self._last_step_record: float | None = None
        self._pending: tuple[float, dict[str, Any]] | None = None
        self._first_step_done = False
        self.finished = False
        self.tracer: Tracer | None = None
        """Step spans and collectives (None when TRAINGUARD_TRACE=0)."""
        self._collectives_traced = False
        if env.trace:
            self.tracer = Tracer(env.rank or 0, state_path=env.trace_path,
                                 window_s=env.trace_window_s)
            activate(self.tracer)
            self._collectives_traced = trace_collectives() > 0
            if env.stacks_path is not None:
                install_stack_dump(env.stacks_path)
        # Without a launch time the imports phase starts when the process did, and goes out
        # with the first startup record (a phase or the first step): a process that only uses
        # the checkpoint helpers reports no startup.
        self._inferred_imports: float | None = None
        if env.launch_time is not None:
            self.record("phase", name="imports", start=env.launch_time, end=self.started,
                        begun=_start_kind())
        else:
            if process_start is None and clock is time.time:
                process_start = process_start_time
            self._inferred_imports = process_start() if process_start is not None else None

    # ---- identity ------------------------------------------------------------------------

    @property
    def supervised(self) -> bool:
        """True when records are written (``TRAINGUARD_EVENTS`` is set)."""
        return self._log is not None

    @property
    def rank(self) -> int:
        return self.env.rank or 0

    @property
    def world_size(self) -> int:
        return self.env.world_size or 1

    # ---- records -------------------------------------------------------------------------

    def record(self, kind: str, *, t: float | None = None, **fields: Any) -> None:
        """Write one record (after any held-back step record); a no-op when unsupervised.
        Thread-safe: background checkpoint persists record from their own thread."""
        with self._record_lock:
            self._record(kind, t, fields)

    def _record(self, kind: str, t: float | None, fields: dict[str, Any]) -> None:
        if self._log is None or os.getpid() != self._pid:
            return
        if kind != "step":
            self._flush_pending()
        record: dict[str, Any] = {
            "t": self._clock() if t is None else t,
            "rank": self.env.rank,
            "kind": kind,
        }
        record.update(fields)
        self._log.write(record)

    def _flush_inferred_imports(self) -> None:
        if self._inferred_imports is not None:
            start, self._inferred_imports = self._inferred_imports, None
            self.record("phase", t=self.started, name="imports", start=start, end=self.started,
                        begun=_start_kind())

    def _flush_pending(self) -> None:
        if self._pending is not None:
            t, fields = self._pending
            self._pending = None
            self.record("step", t=t, **fields)
            self._last_step_record = t

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a startup phase (``dist_init``, ``ckpt_load``...); recorded when it completes."""
        start = self._clock()
        yield
        end = self._clock()
        self._flush_inferred_imports()
        self.record("phase", name=name, start=start, end=end)
        self._last_phase_end = end

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Time a step phase (``data``, ``forward``, ``backward``, ``optimizer``,
        ``checkpoint``...): it goes into the rank's ``trace`` windows."""
        if self.tracer is None:
            yield
            return
        with self.tracer.span(name):
            yield

    def _trace_step(self, step: int) -> None:
        if self.tracer is None:
            return
        if not self._collectives_traced:  # torch imported after init()
            self._collectives_traced = trace_collectives() > 0
        window = self.tracer.on_step(step)
        if window is not None:
            self._record_window(window.to_record())

    def _record_window(self, fields: dict[str, Any]) -> None:
        fields.pop("rank", None)
        self.record("trace", **fields)

    # ---- steps ---------------------------------------------------------------------------

    def step(
        self,
        step: int,
        *,
        loss: SupportsFloat | None = None,
        on_nonfinite: OnNonfinite = "raise",
    ) -> None:
        """Heartbeat for training step `step` with its loss; fires due SDK faults.

        A NaN/inf loss writes a ``nonfinite`` record and raises `NonFiniteLossError` (or, with
        ``on_nonfinite="record"``, only records it).
        """
        if on_nonfinite not in ("raise", "record"):
            raise ValueError(f"on_nonfinite must be 'raise' or 'record', got {on_nonfinite!r}")
        value = None if loss is None else float(loss)
        self._trace_step(step)
        before = self._clock()
        for index, spec in self._due(before, step, (FaultKind.SLOW,)):
            if index not in self._fired:
                self._fired.add(index)
                self._fault(spec, step)
            self._sleep(spec.delay_s)
        now = self._clock()
        for index, spec in self._due(now, step, (FaultKind.NAN,)):
            if index not in self._fired:
                self._fired.add(index)
                self._fault(spec, step)
                value = math.nan
        for index, spec in self._due(now, step, (FaultKind.EXCEPTION, FaultKind.CUDA_ERROR)):
            if index in self._fired:
                continue
            self._fired.add(index)
            self._fault(spec, step)
            if spec.kind is FaultKind.EXCEPTION:
                raise RuntimeError(f"trainguard injected exception at step {step}")
            stderr = self._stderr if self._stderr is not None else sys.stderr
            stderr.write(cuda_error_text(sys.argv[0] or "train.py", step))
            stderr.flush()
            self._exit(spec.exit_code)

        step_s = None if self._last_step_call is None else max(0.0, now - self._last_step_call)
        self._last_step_call = now
        if not self._first_step_done:
            self._first_step_done = True
            self._flush_inferred_imports()
            backend = dist_backend()
            extra = {} if backend is None else {"backend": backend}
            self.record("phase", t=now, name="first_step", start=self._last_phase_end, end=now,
                        **extra)
            self._record_loaded_modules()

        if value is not None and not math.isfinite(value):
            text = _loss_text(value)
            self.record("nonfinite", t=now, step=step, loss=text)
            if on_nonfinite == "raise":
                raise NonFiniteLossError(f"loss is {text} at step {step}")
            value = None
        fields: dict[str, Any] = {"step": step, "loss": value, "step_s": step_s}
        last = self._last_step_record
        if last is None or now - last >= self.env.heartbeat_s:
            self._pending = None
            self.record("step", t=now, **fields)
            self._last_step_record = now
        else:
            self._pending = (now, fields)

    def _record_loaded_modules(self) -> None:
        """With warm standbys (``TRAINGUARD_WARM_DIR``), local rank 0 writes the library modules
        it has loaded by its first step, so the next standbys import them too
        (:mod:`trainguard.warm.loaded`). Never fails the rank."""
        warm_dir = os.environ.get("TRAINGUARD_WARM_DIR")
        if not warm_dir or (self.env.local_rank or 0) != 0 or os.getpid() != self._pid:
            return
        try:
            from trainguard.warm.loaded import record_loaded

            record_loaded(Path(warm_dir))
        except Exception as exc:  # a hint for later standbys: never worth failing the rank
            logger.info("trainguard: loaded modules not recorded for warm standbys: %s", exc)

    def _due(
        self, now: float, step: int, kinds: Iterable[FaultKind]
    ) -> Iterator[tuple[int, FaultSpec]]:
        wanted = frozenset(kinds)
        for index, spec in enumerate(self._faults):
            if spec.kind in wanted and is_due(spec, step, now, self._launch_time):
                yield index, spec

    def _fault(self, spec: FaultSpec, step: int) -> None:
        logger.warning("trainguard: injecting fault %s at step %d", format_fault(spec), step)
        self.record("fault", fault=format_fault(spec), step=step)

    # ---- checkpoints ---------------------------------------------------------------------

    def checkpoint_saved(self, saved: SavedCheckpoint, blocking_s: float | None = None) -> None:
        """Record a successful save (`blocking_s`: the part training waited for, when the rest
        was persisted in the background), then fire a due ``corrupt_checkpoint`` fault on it."""
        extra = {} if blocking_s is None else {"blocking_s": blocking_s}
        self.record(
            "checkpoint",
            step=saved.step,
            path=str(saved.path),
            size_bytes=saved.size_bytes,
            save_s=saved.save_s,
            ok=True,
            **extra,
        )
        now = self._clock()
        for index, spec in self._due(now, saved.step, (FaultKind.CORRUPT_CHECKPOINT,)):
            if index in self._fired:
                continue
            self._fired.add(index)
            self._fault(spec, saved.step)
            try:
                corrupt_checkpoint(saved.path)
            except CheckpointError as exc:
                logger.warning("corrupt_checkpoint fault had no effect: %s", exc)

    def checkpoint_failed(self, step: int, path: Path, save_s: float, error: str) -> None:
        """Record a failed save (the caller re-raises)."""
        self.record(
            "checkpoint",
            step=step,
            path=str(path),
            size_bytes=0,
            save_s=save_s,
            ok=False,
            error=error,
        )

    def resumed(
        self, step: int | None, path: Path | None, skipped: Iterable[SkippedCheckpoint],
        source: Literal["disk", "memory", "buddy"] = "disk",
    ) -> None:
        """Record which checkpoint training resumes from (None: from scratch), what was
        passed over, and where it came from (``disk``; ``memory``/``buddy``: a snapshot slot
        of this host / fetched from another host's memory)."""
        self.record(
            "resume",
            step=step,
            path=None if path is None else str(path),
            skipped=[{"step": s.step, "path": str(s.path), "reason": s.reason} for s in skipped],
            source=source,
        )

    # ---- end -----------------------------------------------------------------------------

    def finish(self) -> None:
        """Record a clean end of training (the last step record first). Idempotent."""
        if self.finished:
            return
        self.finished = True
        if self.tracer is not None:
            window = self.tracer.flush()
            if window is not None:
                self._record_window(window.to_record())
        self.record("finish")

    def close(self) -> None:
        """Write a held-back step record and close the event file (registered at exit)."""
        self._flush_pending()
        if self.tracer is not None:
            activate(None)
            self.tracer.close()
        if self._log is not None:
            self._log.close()
            self._log = None
