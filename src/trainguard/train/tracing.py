"""Per-rank tracing, on by default: step spans, torch.distributed collectives, stack dumps.

- ``with tg.span("forward"): ...`` times a step phase (``data``, ``forward``, ``backward``,
  ``optimizer``, ``checkpoint``, or any name);
- every call of the ``torch.distributed`` collective API (``all_reduce``, ``all_gather``,
  ``barrier``, ``send`` ...) is timed: op, process group, per-group sequence number, input
  bytes, entry and completion (wall clock; CUDA events add the device time for CUDA tensors);
- each rank's position in its collectives goes to a memory-mapped state file
  (`trainguard.trace.statefile`) on every call, so the supervisor can read where a rank stands
  while it is stopped or stuck in C code;
- every ``window_s`` (at a step boundary) the window's aggregates go out as one ``trace``
  record (`trainguard.trace.model.TraceWindow`); the last calls stay in a bounded ring;
- a signal (SIGUSR2 by default) makes the process write every thread's Python stack to its
  stacks file (``faulthandler``: works while the main thread is blocked in a collective).

Cost: a few microseconds per collective and per span (a lock, two clock reads, a few struct
writes into the mapped page); no thread, no syscall. ``TRAINGUARD_TRACE=0`` turns it off.
Only code that calls the API through the module (``dist.all_reduce(...)``) is seen; a name
imported before tracing started (``from torch.distributed import all_reduce``) is not, and
neither are collectives DDP issues from C++ (its default all-reduce): register a Python comm
hook, or rely on the time they add to ``backward``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import inspect
import logging
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from trainguard.trace.model import WORLD, CollectiveCall, OpTime, TraceWindow
from trainguard.trace.statefile import StateWriter

__all__ = ["COLLECTIVES", "DEFAULT_WINDOW_S", "Tracer", "activate", "install_stack_dump",
           "trace_collectives"]

logger = logging.getLogger(__name__)

DEFAULT_WINDOW_S = 5.0
COLLECTIVES: dict[str, int] = {
    # op name -> index of the argument whose tensor(s) are the input (for the byte count)
    "all_reduce": 0, "all_gather": 1, "all_gather_into_tensor": 1, "all_gather_object": 1,
    "all_to_all": 1, "all_to_all_single": 1, "barrier": -1, "monitored_barrier": -1,
    "broadcast": 0, "broadcast_object_list": 0, "gather": 0, "gather_object": 0, "reduce": 0,
    "reduce_scatter": 1, "reduce_scatter_tensor": 1, "scatter": 0, "scatter_object_list": 0,
    "send": 0, "recv": 0, "isend": 0, "irecv": 0, "batch_isend_irecv": -1,
    # DDP broadcasts its buffers before every forward (broadcast_buffers=True) through this
    "_broadcast_coalesced": 1,
}
_GROUP_AT = {"_broadcast_coalesced": 0}
"""Where the process group is for functions without an inspectable signature."""
_ALWAYS_ASYNC = frozenset({"isend", "irecv", "batch_isend_irecv"})


@dataclass(slots=True)
class _Window:
    start_wall: float
    start_perf: float
    steps: int = 0
    step_s: float = 0.0
    collective_s: float = 0.0
    first_step: int | None = None
    last_step: int | None = None
    spans: dict[str, list[float]] = field(default_factory=dict)
    collectives: dict[str, list[float]] = field(default_factory=dict)


@dataclass(slots=True)
class _Open:
    op: str
    group: str
    size: int
    nbytes: int
    seq: int
    slot: int
    wall: float
    perf: float
    blocking: bool
    outer: bool
    """The outermost blocking call of its thread: its time counts as time blocked."""
    events: tuple[Any, Any] | None = None


def _add(table: dict[str, list[float]], name: str, seconds: float, nbytes: int = 0) -> None:
    row = table.get(name)
    if row is None:
        table[name] = [1, seconds, nbytes]
    else:
        row[0] += 1
        row[1] += seconds
        row[2] += nbytes


class Tracer:
    """One rank's tracer (the SDK's session owns one; tests build their own with fake clocks).

    >>> t = Tracer(rank=0, window_s=0.0)
    >>> with t.span("forward"):
    ...     pass
    >>> t.on_step(1), t.on_step(2) is not None
    (None, True)
    """

    def __init__(
        self,
        rank: int,
        *,
        state_path: Path | None = None,
        window_s: float = DEFAULT_WINDOW_S,
        wall: Callable[[], float] = time.time,
        perf: Callable[[], float] = time.perf_counter,
        recent: int = 256,
    ) -> None:
        self.rank = rank
        self.window_s = window_s
        self._wall = wall
        self._perf = perf
        self._lock = threading.Lock()
        self._local = threading.local()
        self._writer: StateWriter | None = None
        if state_path is not None:
            try:
                self._writer = StateWriter(state_path, rank)
            except OSError as exc:  # tracing must never stop training
                logger.warning("trainguard: no trace state file %s: %s", state_path, exc)
        self._seq: dict[str, int] = {}
        self._win = _Window(wall(), perf())
        self._last_step: float | None = None
        self._pending_cuda: list[tuple[str, Any, Any]] = []
        self.recent: deque[CollectiveCall] = deque(maxlen=recent)
        """The last collectives this rank completed (or left with an error), oldest first."""

    # ---- spans ---------------------------------------------------------------------------

    def _stack(self) -> list[str]:
        stack: list[str] | None = getattr(self._local, "spans", None)
        if stack is None:
            stack = self._local.spans = []
        return stack

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Time a step phase; spans nest (the state file shows the innermost)."""
        stack = self._stack()
        stack.append(name)
        t0 = self._perf()
        if self._writer is not None:
            with self._lock:
                self._writer.span(name, self._wall())
        try:
            yield
        finally:
            dt = self._perf() - t0
            stack.pop()
            with self._lock:
                _add(self._win.spans, name, dt)
                if self._writer is not None:
                    self._writer.span(stack[-1] if stack else None, self._wall())

    # ---- collectives ---------------------------------------------------------------------

    def enter(self, op: str, group: str, size: int, nbytes: int, blocking: bool,
              cuda: bool = False) -> _Open:
        """A collective call starts (called by the torch.distributed wrappers)."""
        depth = getattr(self._local, "depth", 0)
        if blocking:
            self._local.depth = depth + 1
        wall = self._wall()
        with self._lock:
            seq = self._seq[group] = self._seq.get(group, 0) + 1
            slot = -1
            if self._writer is not None:
                slot = self._writer.group(group, size)
                self._writer.enter(slot, seq, op, nbytes, wall)
        events = _cuda_events() if cuda else None
        # Only the outermost blocking call counts towards the time blocked (all_gather_object
        # calls all_gather inside).
        return _Open(op, group, size, nbytes, seq, slot, wall, self._perf(), blocking,
                     blocking and depth == 0, events)

    def exit(self, call: _Open) -> None:
        """The call returned (blocking: on the calling thread, whose nesting depth drops) or
        its work completed (asynchronous: on any thread)."""
        dt = self._perf() - call.perf
        if call.blocking:
            self._local.depth = max(0, getattr(self._local, "depth", 1) - 1)
        wall = self._wall()
        if call.events is not None:
            with contextlib.suppress(Exception):
                call.events[1].record()
        with self._lock:
            if call.outer:
                self._win.collective_s += dt
            _add(self._win.collectives, call.op, dt, call.nbytes)
            if call.events is not None:
                self._pending_cuda.append((call.op, *call.events))
            if self._writer is not None:
                self._writer.complete(call.slot, call.seq, wall)
            self.recent.append(CollectiveCall(call.seq, call.op, call.group, call.size,
                                              call.nbytes, call.wall, call.wall, wall))

    # ---- steps and windows ---------------------------------------------------------------

    def on_step(self, step: int) -> TraceWindow | None:
        """A step finished; returns the window when it is complete (to be recorded)."""
        now = self._perf()
        with self._lock:
            if self._writer is not None:
                self._writer.step(step, self._wall())
            win = self._win
            if self._last_step is None:
                # The first step opens the first window: start-up time is not step time.
                self._win = _Window(self._wall(), now)
                self._last_step = now
                return None
            win.steps += 1
            win.step_s += now - self._last_step
            self._last_step = now
            if win.first_step is None:
                win.first_step = step
            win.last_step = step
            if now - win.start_perf < self.window_s:
                return None
            return self._close(now)

    def flush(self) -> TraceWindow | None:
        """The open window if it holds any step (at the end of training)."""
        with self._lock:
            if self._win.steps == 0:
                return None
            return self._close(self._perf())

    def _close(self, now: float) -> TraceWindow:
        win = self._win
        self._resolve_cuda(win)
        out = TraceWindow(
            rank=self.rank, start=win.start_wall,
            end=win.start_wall + (now - win.start_perf), steps=win.steps, step_s=win.step_s,
            collective_s=win.collective_s,
            spans={k: OpTime(int(v[0]), v[1], int(v[2])) for k, v in win.spans.items()},
            collectives={k: OpTime(int(v[0]), v[1], int(v[2]))
                         for k, v in win.collectives.items()},
            first_step=win.first_step, last_step=win.last_step)
        self._win = _Window(out.end, now)
        return out

    def _resolve_cuda(self, win: _Window) -> None:
        """Device time of finished CUDA collectives, as ``<op>@gpu`` rows (never waits)."""
        left = []
        for op, start, end in self._pending_cuda:
            try:
                if not end.query():
                    left.append((op, start, end))
                    continue
                _add(win.collectives, f"{op}@gpu", start.elapsed_time(end) / 1000.0)
            except Exception:  # a CUDA error here must not stop training
                continue
        self._pending_cuda = left[-1024:]

    def close(self) -> None:
        if self._writer is not None:
            with self._lock:
                self._writer.close()


def _cuda_events() -> tuple[Any, Any] | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        return start, end
    except Exception:
        return None


# ---- torch.distributed wrappers -----------------------------------------------------------

_ACTIVE: Tracer | None = None
_GROUPS: dict[int, tuple[Any, str, int]] = {}


def activate(tracer: Tracer | None) -> None:
    """Route the wrapped collectives to `tracer` (None: call through untimed)."""
    global _ACTIVE
    _ACTIVE = tracer


def _group_info(dist: Any, group: Any) -> tuple[str, int]:
    if group is None:
        return WORLD, int(dist.get_world_size())
    known = _GROUPS.get(id(group))
    if known is not None and known[0] is group:
        return known[1], known[2]
    name = None
    with contextlib.suppress(Exception):
        if group is dist.group.WORLD:
            name = WORLD
    if name is None:
        getter = getattr(dist.distributed_c10d, "_get_process_group_name", None)
        with contextlib.suppress(Exception):
            name = str(getter(group)) if getter is not None else None
    name = name or str(getattr(group, "group_name", "") or f"pg-{id(group):x}")
    size = 0
    with contextlib.suppress(Exception):
        size = int(dist.get_world_size(group))
    _GROUPS[id(group)] = (group, name, size)
    return name, size


def _nbytes(value: Any) -> tuple[int, bool]:
    """Bytes of a tensor or a list of tensors, and whether any is a CUDA tensor."""
    if isinstance(value, (list, tuple)):
        total, cuda = 0, False
        for item in value:
            n, c = _nbytes(item)
            total, cuda = total + n, cuda or c
        return total, cuda
    numel = getattr(value, "numel", None)
    if numel is None or not callable(numel):
        return 0, False
    try:
        return int(numel()) * int(value.element_size()), bool(value.is_cuda)
    except Exception:
        return 0, False


def _positions(fn: Callable[..., Any]) -> tuple[int | None, int | None]:
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None, None
    return (names.index("group") if "group" in names else None,
            names.index("async_op") if "async_op" in names else None)


def _wrap(dist: Any, fn: Callable[..., Any], op: str, data_arg: int) -> Callable[..., Any]:
    group_at, async_at = _positions(fn)
    group_at = _GROUP_AT.get(op, group_at)
    name_op = op.lstrip("_")

    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Any:
        tracer = _ACTIVE
        if tracer is None:
            return fn(*args, **kwargs)
        try:
            group = kwargs["group"] if "group" in kwargs else (
                args[group_at] if group_at is not None and len(args) > group_at else None)
            async_op = op in _ALWAYS_ASYNC or bool(
                kwargs["async_op"] if "async_op" in kwargs else (
                    args[async_at] if async_at is not None and len(args) > async_at else False))
            data = args[data_arg] if 0 <= data_arg < len(args) else None
            nbytes, cuda = _nbytes(data)
            name, size = _group_info(dist, group)
            call = tracer.enter(name_op, name, size, nbytes, blocking=not async_op, cuda=cuda)
        except Exception:  # never let tracing break a collective
            logger.debug("trainguard: could not trace %s", op, exc_info=True)
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            tracer.exit(call)
            raise
        if not async_op or result is None:
            tracer.exit(call)
            return result
        _on_complete(result, lambda: tracer.exit(call))
        return result

    traced.__trainguard_traced__ = True  # type: ignore[attr-defined]
    return traced


def _on_complete(work: Any, done: Callable[[], None]) -> None:
    """Call `done` when an async work (or a list of them) completes; at once if that cannot be
    observed."""
    works = work if isinstance(work, list) else [work]
    try:
        futures = [w.get_future() for w in works]
    except Exception:
        done()
        return
    left = [len(futures)]
    lock = threading.Lock()

    def one(_: Any) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            done()

    for fut in futures:
        try:
            fut.add_done_callback(one)
        except Exception:
            one(None)


def trace_collectives() -> int:
    """Wrap the collective functions of an imported ``torch.distributed`` (idempotent); returns
    how many are wrapped now. Does nothing (0) when torch has not been imported: importing it
    just for this would cost seconds of start-up."""
    if "torch" not in sys.modules:
        return 0
    try:
        import torch.distributed as dist
    except Exception:
        return 0
    if not dist.is_available():
        return 0
    c10d = getattr(dist, "distributed_c10d", None)
    wrapped = 0
    for op, data_arg in COLLECTIVES.items():
        fn = getattr(dist, op, None)
        if fn is None:
            continue
        if getattr(fn, "__trainguard_traced__", False):
            wrapped += 1
            continue
        traced = _wrap(dist, fn, op, data_arg)
        setattr(dist, op, traced)
        if c10d is not None and getattr(c10d, op, None) is fn:
            setattr(c10d, op, traced)
        wrapped += 1
    return wrapped


_STACK_FILES: dict[int, IO[str]] = {}


def install_stack_dump(path: Path, signum: int = signal.SIGUSR2) -> bool:
    """On `signum`, write every thread's Python stack to `path` (appending). False when the
    file cannot be opened or the signal not registered (tracing goes on without it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = path.open("a", encoding="utf-8")
    except OSError as exc:
        logger.warning("trainguard: no stack dumps to %s: %s", path, exc)
        return False
    try:
        faulthandler.register(signum, file=f, all_threads=True, chain=True)
    except (ValueError, RuntimeError, OSError) as exc:
        f.close()
        logger.warning("trainguard: cannot dump stacks on signal %d: %s", signum, exc)
        return False
    old = _STACK_FILES.pop(signum, None)
    _STACK_FILES[signum] = f
    if old is not None:
        old.close()
    return True
