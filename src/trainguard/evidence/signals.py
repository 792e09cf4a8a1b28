"""What a process's exit status says about why it ended.

Launchers, schedulers and shells report the same death in many forms: ``exitcode: -9``
(torchrun), ``exit code 137`` / ``Exit Code: 137`` (shells, Docker, Kubernetes: 128 + the
signal), ``died with <Signals.SIGKILL: 9>`` (Python's subprocess), ``task 3: Killed`` (srun),
``exited on signal 9`` (mpirun). This module reads each form down to one signal number and gives
every form of one signal the same reading, the one the named-signal rules give (``Bus error`` is
exhausted shared memory whether the line says "Bus error", ``SIGBUS`` or ``exit code 135``).

The reading is a hint, used only where no rule explains the line (a launcher's ``unknown``
report): a low confidence, so any real cause in the same incident outranks it.

    >>> signal_of_status(137), signal_of_status(-6), signal_of_status(1)
    (9, 6, None)
    >>> signal_cause(signal_number("SIGBUS")).category.value
    'oom_host'
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.taxonomy import Action, Category

SIGNAL_FIELD = "exit_signal"
"""The event field naming the signal a launcher's report was read by (``classify.py``): the
event's category is a hint from that signal alone."""
SIGNAL_BASE = 128
"""Shells and container runtimes report death by signal N as exit status 128 + N."""
_HIGHEST_SIGNAL = 31


@dataclass(frozen=True, slots=True)
class SignalCause:
    """What a death by one signal most often means, as a weak hint."""

    signal: int
    name: str
    category: Category
    action: Action
    confidence: float
    teardown: bool
    """The job's own machinery usually sends it to end the process (SIGABRT: a collective
    watchdog's abort; SIGTERM: a launcher or scheduler stopping the job), so the death is most
    often a consequence of a failure elsewhere, not a cause."""


_NAMES = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
          9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}
_WORDS = {"hangup": 1, "interrupt": 2, "illegal instruction": 4, "aborted": 6, "abort": 6,
          "bus error": 7, "floating point exception": 8, "killed": 9, "segmentation fault": 11,
          "broken pipe": 13, "terminated": 15}

# The readings of the named-signal rules (signatures.toml: process_killed_sigkill, segfault,
# shm_or_dataloader_killed, sigterm_received), at a hint's confidence.
_NATIVE_CRASH = (Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, 0.25)
_TEARDOWN = frozenset({6, 15})
_CAUSES: dict[int, tuple[Category, Action, float]] = {
    9: (Category.OOM_HOST, Action.FIX_CONFIG, 0.35),  # the kernel's or cgroup's OOM killer
    7: (Category.OOM_HOST, Action.FIX_CONFIG, 0.3),  # shared memory (/dev/shm) exhausted
    4: _NATIVE_CRASH, 6: _NATIVE_CRASH, 8: _NATIVE_CRASH, 11: _NATIVE_CRASH,
    15: (Category.SCHEDULER_NODE_FAILURE, Action.RESTART_JOB, 0.3),  # told to stop
}


def signal_of_status(status: int) -> int | None:
    """The signal an exit status reports (-N: Python's and torchrun's form; 128 + N: shells'),
    or ``None`` for an ordinary exit code."""
    if -_HIGHEST_SIGNAL <= status < 0:
        return -status
    if SIGNAL_BASE < status <= SIGNAL_BASE + _HIGHEST_SIGNAL:
        return status - SIGNAL_BASE
    return None


def signal_number(name: str) -> int | None:
    """``SIGKILL`` / ``KILL`` / ``Killed`` / ``Segmentation fault`` / ``9`` as a number."""
    text = name.strip().strip(".").lower()
    if text.isdigit():
        number = int(text)
        return number if 0 < number <= _HIGHEST_SIGNAL else None
    if text in _WORDS:
        return _WORDS[text]
    text = text.upper()
    wanted = text if text.startswith("SIG") else f"SIG{text}"
    return next((n for n, known in _NAMES.items() if known == wanted), None)


def is_teardown(name: str | None) -> bool:
    """Whether the signal named ``name`` (as :attr:`SignalCause.name`) is a teardown signal
    (:attr:`SignalCause.teardown`)."""
    cause = signal_cause(signal_number(name)) if name is not None else None
    return cause is not None and cause.teardown


def signal_cause(signal: int | None) -> SignalCause | None:
    """The usual cause of a death by ``signal``; ``None`` where a signal says nothing of the
    cause (SIGINT, SIGHUP, SIGPIPE: someone or something else ended the process)."""
    if signal is None or signal not in _CAUSES:
        return None
    category, action, confidence = _CAUSES[signal]
    return SignalCause(signal, _NAMES[signal], category, action, confidence,
                       signal in _TEARDOWN)


__all__ = ["SIGNAL_BASE", "SIGNAL_FIELD", "SignalCause", "is_teardown", "signal_cause",
           "signal_number", "signal_of_status"]
