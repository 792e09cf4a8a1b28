"""Root cause over symptom: priority adjustments that depend on the other events of an incident.

A rule's priority says how likely its line is a cause when nothing else is known. Some lines
are symptoms *when a specific other event is present*:

1. **Timeout precedence.** A collective/watchdog timeout is a symptom; so are the transport
   errors every rank logs while communicators are torn down (a reset socket, "remote process
   exited", an NCCL system/internal error, a store that cannot be reached). With a hang in the
   incident those generic transport errors rank just below the timeout, wherever they appear;
   any other network error does so only when logged after the first timeout. Hard transport
   evidence before the hang (an IB completion error, a link down, retries exhausted, a
   mis-set interface) and every non-network root cause (hardware, OOM, storage, checkpoint,
   user code...) still win: the category follows the root cause, else it is the timeout.
2. **Host OOM over the scheduler.** The kernel or a cgroup killing a process for memory makes
   the scheduler report a failed node, a drained node or an eviction: with hard host-OOM
   evidence in the incident, scheduler events rank below it.
3. **User code over CUDA noise.** A traceback whose exception is a plain Python error (a
   ``TypeError``, ``KeyError``...) raised in the user's own code (the innermost frame outside
   any installed package) is the cause; a native abort or a CUDA error logged with it is the
   process going down. Such an exception ranks just above CUDA software errors.

4. **Hardware over the CUDA errors it causes, across clocks.** A GPU's XID, ECC or
   fallen-off-the-bus report in ``dmesg`` (seconds since boot) or in an untimed tool output
   cannot be placed next to the application's CUDA error on its wall clock, so the two may stay
   separate incidents; a non-fatal report (XID 94, a contained ECC error) would then rank
   below the fatal CUDA error it caused. When the most important incident is a CUDA software
   error and an incident that cannot be ordered against it in time names GPU hardware or GPU
   memory on the same host (or no host), the hardware incident comes first.

5. **An abort is how a process ends, not why.** ``abort()`` (SIGABRT: a shell's
   ``Aborted (core dumped)``, ``Fatal Python error: Aborted``, ``exitcode: -6``) is what
   ``std::terminate`` calls for an uncaught C++ exception (after ``terminate called after
   throwing ...`` / ``what(): ...``), what a failed ``assert()`` or glog ``CHECK`` calls, and
   what PyTorch's C++ errors end in. The process has said why just before. With any other
   failure a rule recognises in the incident, the abort ranks just below the lowest of them
   (a segmentation fault is a crash of its own and keeps its rank).

All functions are pure; :func:`adjusted_priorities` returns, per event id, the priority it
gets in its cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.evidence.rules import compile_re2
from trainguard.taxonomy import CATEGORY_PRIORITY, Category, Severity

LATE_NETWORK_PRIORITY = 39
"""Just below an NCCL timeout (40)."""
USER_CODE_PRIORITY = CATEGORY_PRIORITY[Category.CUDA_SOFTWARE_BUG] + 1
"""A plain Python error raised in user code: just above CUDA software errors."""
SCHEDULER_UNDER_OOM_PRIORITY = CATEGORY_PRIORITY[Category.OOM_HOST] - 1
HARD_OOM_CONFIDENCE = 0.7
NATIVE_CRASH_SIGNATURE = "segfault"
_ABORT = compile_re2(r"\bAbort(?:ed)?\b|SIGABRT|exitcode\s*:\s*-6\b|got signal: 6\b",
                     ignore_case=True)

SYMPTOM_NETWORK_SIGNATURES = frozenset({
    "socket_connection_error", "nccl_socket_connect_failed", "nccl_remote_error",
    "nccl_unhandled_system_error", "nccl_internal_error", "nccl_error_trace_system",
    "rendezvous_timeout", "gloo_connection"})
"""Network errors that every rank logs when a peer hangs or dies: symptoms next to a hang."""

PLAIN_PYTHON_ERRORS = frozenset({
    "AssertionError", "AttributeError", "ImportError", "IndexError", "KeyError",
    "ModuleNotFoundError", "NameError", "NotImplementedError", "TypeError", "UnboundLocalError",
    "ValueError", "ZeroDivisionError", "RecursionError", "FileNotFoundError", "StopIteration",
    "LookupError", "SyntaxError", "IndentationError", "UnicodeDecodeError", "UnicodeEncodeError"})
"""Exceptions Python raises for a mistake in the program itself (not a device, not a library's
``RuntimeError`` wrapping one)."""

_LIBRARY_PATH_PARTS = ("site-packages/", "dist-packages/", "/lib/python", "<frozen ",
                       "/torch/", "/usr/lib/")


def is_user_frame(frame: str) -> bool:
    """``frame`` (``file:line in func``) is in the user's own code, not an installed package."""
    path = frame.split(":", 1)[0].replace("\\", "/")
    return not any(part in path for part in _LIBRARY_PATH_PARTS)


def is_user_code_error(ev: FailureEvent) -> bool:
    """A plain Python exception whose innermost frame is user code."""
    if ev.signature != "python_exception":
        return False
    exc = (ev.field_value("exc_type") or "").rsplit(".", 1)[-1]
    frame = ev.field_value("last_frame")
    return exc in PLAIN_PYTHON_ERRORS and frame is not None and is_user_frame(frame)


def adjusted_priorities(cluster: Sequence[FailureEvent],
                        base: Callable[[FailureEvent], int]) -> dict[int, int]:
    """Event id -> its priority in this cluster: ``base`` moved by the rules above."""
    out = {id(e): base(e) for e in cluster}
    for i in _network_symptoms(cluster):
        out[i] = min(out[i], LATE_NETWORK_PRIORITY)
    if any(e.category is Category.OOM_HOST and e.severity is not Severity.INFO
           and e.confidence >= HARD_OOM_CONFIDENCE for e in cluster):
        for e in cluster:
            if e.category is Category.SCHEDULER_NODE_FAILURE:
                out[id(e)] = min(out[id(e)], SCHEDULER_UNDER_OOM_PRIORITY)
    for e in cluster:
        if is_user_code_error(e):
            out[id(e)] = max(out[id(e)], USER_CODE_PRIORITY)
    causes = [out[id(e)] for e in cluster if _names_a_cause(e)]
    if causes:
        for e in cluster:
            if is_abort(e):
                out[id(e)] = min(out[id(e)], min(causes) - 1)
    return out


def is_abort(ev: FailureEvent) -> bool:
    """A native-crash event whose lines say the process aborted (SIGABRT), not a SIGSEGV."""
    return ev.signature == NATIVE_CRASH_SIGNATURE and any(
        _ABORT.search(line.program_text) is not None for line in ev.evidence) and not any(
        "segmentation" in line.program_text.lower() or "sigsegv" in line.program_text.lower()
        for line in ev.evidence)


def _names_a_cause(ev: FailureEvent) -> bool:
    """A failure a rule recognised, other than a native crash: what an abort ends."""
    return (ev.signature != NATIVE_CRASH_SIGNATURE and ev.category is not Category.UNKNOWN
            and ev.severity is not Severity.INFO)


class IncidentLike(Protocol):
    """What :func:`hardware_first` reads of an incident."""

    @property
    def category(self) -> Category: ...

    @property
    def severity(self) -> Severity: ...

    @property
    def host(self) -> str | None: ...

    @property
    def start(self) -> float | None: ...


_I = TypeVar("_I", bound=IncidentLike)
HARDWARE_CATEGORIES = frozenset({Category.GPU_HARDWARE, Category.GPU_MEMORY_ECC})


def hardware_first(incidents: Sequence[_I]) -> list[_I]:
    """``incidents`` (most important first) with rule 4 above applied."""
    out = list(incidents)
    if not out or out[0].category is not Category.CUDA_SOFTWARE_BUG:
        return out
    cuda = out[0]
    for i, inc in enumerate(out[1:], start=1):
        unordered = inc.start is None or cuda.start is None
        same_host = inc.host is None or cuda.host is None or inc.host == cuda.host
        if inc.category in HARDWARE_CATEGORIES and inc.severity is not Severity.INFO \
                and unordered and same_host:
            return [inc, *out[:i], *out[i + 1:]]
    return out


def _network_symptoms(cluster: Sequence[FailureEvent]) -> frozenset[int]:
    """Network errors that are the hang's symptoms: generic ones anywhere next to a hang, and
    any logged after the first hang report (by absolute time, else by line order in a file)."""
    hangs = [e for e in cluster if e.category is Category.NCCL_TIMEOUT_HANG
             and e.severity is not Severity.INFO]
    if not hangs:
        return frozenset()
    first_t = min((e.time for e in hangs if e.time is not None
                   and e.time_kind is TimeKind.ABSOLUTE), default=None)
    first_line: dict[str, int] = {}
    for e in hangs:
        if e.evidence:
            path, no = e.evidence[0].path, e.evidence[0].line_no
            first_line[path] = min(no, first_line.get(path, no))

    def after(e: FailureEvent) -> bool:
        if e.time is not None and e.time_kind is TimeKind.ABSOLUTE and first_t is not None:
            return e.time >= first_t
        if e.evidence and e.evidence[0].path in first_line:
            return e.evidence[0].line_no > first_line[e.evidence[0].path]
        return False

    return frozenset(id(e) for e in cluster if e.category is Category.NETWORK_IB and (
        e.signature in SYMPTOM_NETWORK_SIGNATURES or after(e)))


__all__ = ["HARDWARE_CATEGORIES", "LATE_NETWORK_PRIORITY", "PLAIN_PYTHON_ERRORS",
           "SYMPTOM_NETWORK_SIGNATURES", "USER_CODE_PRIORITY", "IncidentLike",
           "adjusted_priorities", "hardware_first", "is_abort", "is_user_code_error",
           "is_user_frame"]
