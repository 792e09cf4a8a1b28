"""Crash loops: restarts that make no progress end the chain (pure).

A job that dies at the same step on every restart (a bad batch, a corrupt snapshot that is
restored again and again, a rendezvous that never forms) would otherwise burn the whole retry
budget, each restart costing a launch and a restore. NVIDIA's nvidia-resiliency-ext stops after
3 restarts without progress; trainguard does the same, with the rule written out:

1. an attempt's *best before* is the highest step that any earlier attempt of the chain reported;
2. a restart (any attempt but the chain's first) made *no progress* when the step it reported
   is not higher than its best before, or when it reported no step at all although an earlier
   attempt did (the script reports steps through the SDK, so an attempt that reported none
   failed before its first step);
3. the chain is in a crash loop when each of the last N attempts, the one that just failed
   included, made no progress (N = ``RetryPolicy.crash_loop_restarts``, default 3; 0 turns the
   rule off). The policy then stops the chain: verdict ``stop``, with a reason such as
   ``crash loop: 3 restarts made no progress (best step 41, reached again by attempts 1, 2 and
   3)``. Attempts are numbered as in the status lines and ``summary.json`` (the first is 0).

Unknown progress is not evidence of a loop. While no attempt of the chain has reported a step
(a script without the SDK), no attempt counts as making no progress, and the chain stays bounded
by the other rules: the retry budget (``max_retries``), the confirmation of code errors
(``confirm_retries``) and the rollback limit (``max_rollbacks``).

Progress is judged from the steps the SDK reported: it writes a rank's first step at once and
later ones at most once a heartbeat, so a restart that advanced only a few steps past its best
before and crashed within a heartbeat may be judged as making no progress.

    >>> loop = find_crash_loop((41, 41, 41, 41), restarts=3)
    >>> loop.message
    'crash loop: 3 restarts made no progress (best step 41, reached again by attempts 1, 2 and 3)'
    >>> find_crash_loop((41, 41, 45, 45), restarts=3) is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CRASH_LOOP_PREFIX = "crash loop:"
"""How a crash-loop stop's reason begins."""


@dataclass(frozen=True, slots=True)
class CrashLoop:
    """The evidence of a crash loop: the restarts that made no progress and the best step."""

    best_step: int
    """The highest step reached before the first of ``attempts``."""
    attempts: tuple[int, ...]
    """Indices of the restarts that made no progress, oldest first (the failed one last)."""
    steps: tuple[int | None, ...]
    """The step each of ``attempts`` reported; None: it reported none."""

    @property
    def restarts(self) -> int:
        return len(self.attempts)

    @property
    def message(self) -> str:
        """The verdict, one line: what looped, at which step, which attempts."""
        head = f"{CRASH_LOOP_PREFIX} {self.restarts} restart{'s' if self.restarts != 1 else ''} " \
            "made no progress"
        who = _words([str(a) for a in self.attempts])
        noun = "attempt" if self.restarts == 1 else "attempts"
        if all(s == self.best_step for s in self.steps):
            return f"{head} (best step {self.best_step}, reached again by {noun} {who})"
        where = _words([f"step {s}" if s is not None else "before its first step"
                        for s in self.steps])
        return f"{head} (best step {self.best_step}; {noun} {who} stopped at: {where})"

    def to_dict(self) -> dict[str, Any]:
        return {"best_step": self.best_step, "attempts": list(self.attempts),
                "steps": list(self.steps), "restarts": self.restarts}


def failures_in_a_row(steps: Sequence[int | None], failures: int) -> int:
    """How long the run of failures is that the attempt that just failed ends: counted back to
    (and including) the newest attempt that got further than every attempt before it. The
    relaunch backoff grows with this, not with every failure of the chain: an attempt that
    trained on for an hour before a new fault starts a new run. ``steps`` as in
    :func:`find_crash_loop`; ``failures``: the chain's failures, the current one included,
    returned as it is where no step is known (a script without the SDK).

    >>> failures_in_a_row((150, 300), 2)   # attempt 1 trained past 150: a new run
    1
    >>> failures_in_a_row((41, 41, 41), 3)
    3
    >>> failures_in_a_row((150, None), 2)   # attempt 1 failed before its first step
    2
    >>> failures_in_a_row((None, None), 2)
    2
    """
    if len(steps) != failures or all(s is None for s in steps):
        return failures
    run = 0
    for i in range(len(steps) - 1, -1, -1):
        run += 1
        step = steps[i]
        before = [s for s in steps[:i] if s is not None]
        if step is not None and (not before or step > max(before)):
            break
    return run


def find_crash_loop(steps: Sequence[int | None], restarts: int) -> CrashLoop | None:
    """The crash loop that ends ``steps`` (the step each attempt of the chain reported, oldest
    first, the failed attempt last), or None. ``restarts``: N of the module's rule; 0: never."""
    if restarts <= 0 or len(steps) < restarts + 1:
        return None
    first = len(steps) - restarts
    best: int | None = None
    for i, step in enumerate(steps):
        if i >= first and (best is None or (step is not None and step > best)):
            return None  # this restart advanced, or nothing before it says where it stood
        if step is not None:
            best = step if best is None else max(best, step)
    before = [s for s in steps[:first] if s is not None]
    # ``before`` is not empty: the loop above returned when no step preceded the first restart.
    return CrashLoop(max(before), tuple(range(first, len(steps))), tuple(steps[first:]))


def is_crash_loop_stop(decision: Mapping[str, Any] | None) -> bool:
    """A recorded decision (``Decision.to_dict()``, as the store keeps it) stopped a chain as a
    crash loop."""
    if not decision or decision.get("verdict") != "stop":
        return False
    if decision.get("crash_loop"):
        return True
    reason = decision.get("reason")
    return isinstance(reason, str) and \
        reason.removeprefix("stop: ").startswith(CRASH_LOOP_PREFIX)


def _words(items: Sequence[str]) -> str:
    """``1``, ``1 and 2``, ``1, 2 and 3``."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


__all__ = ["CRASH_LOOP_PREFIX", "CrashLoop", "failures_in_a_row", "find_crash_loop",
           "is_crash_loop_stop"]
