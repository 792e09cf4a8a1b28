"""The supervisor's status lines: each fact said once, in words an operator reads at a glance.

Pure functions from the chain's records to one line each; the supervisor prints them.

    failed_line(0, failure)   # 'attempt 0 failed: rank 1 on node08, cause unknown (...)'
    decision_line(decision)   # 'decision: relaunch on the same nodes (...)'
    final_line(result)        # 'job succeeded after 3 attempts; excluded: node08; ...'
"""

from __future__ import annotations

from pathlib import Path

from trainguard.recover.failure import Failure, FailureKind
from trainguard.recover.policy import Decision
from trainguard.recover.records import RunResult


def failed_line(index: int, failure: Failure) -> str:
    """Why attempt ``index`` failed. A crash's exit was said when it happened; this line adds
    what the evidence says of it, or that nothing does."""
    head = f"attempt {index} failed"
    if failure.kind is FailureKind.CRASH and failure.culprit_rank is not None \
            and failure.culprit_nodes:
        rank, node = failure.culprit_rank, failure.culprit_nodes[0]
        if failure.cause:
            return f"{head}: rank {rank} on {node}: {failure.cause}"
        return (f"{head}: rank {rank} on {node}, cause unknown (nothing in its output or "
                f"{node}'s kernel log explains its exit)")
    return f"{head}: {failure.summary}"


def decision_line(decision: Decision) -> str:
    return f"decision: {decision.reason}"


def stop_message(decision: Decision, failure: Failure) -> str:
    """The final message of a chain the policy stopped: why it stopped, and the last failure
    (the decision's line does not repeat it; the summary's message must hold both)."""
    reason = decision.reason.removeprefix("stop: ")
    if failure.kind is FailureKind.CANCELLED:
        return reason
    return f"{reason}; last failure: {failure.summary}"


def attempts_text(n: int) -> str:
    return f"{n} attempt{'s' if n != 1 else ''}"


def final_line(result: RunResult, summary: Path) -> str:
    """The run's last line: outcome, attempts, exclusions, where the summary is."""
    n = len(result.attempts)
    excluded = ", ".join(e.node for e in result.exclusions) or "none"
    head = f"job {result.status} after {attempts_text(n)}"
    # A success's message only repeats the head, unless it carries a note (a teardown crash).
    note = result.message.removesuffix(head).rstrip("; ")
    middle = f": {note}" if note else ""
    return f"{head}{middle}; excluded: {excluded}; summary: {summary}"


__all__ = ["attempts_text", "decision_line", "failed_line", "final_line", "stop_message"]
