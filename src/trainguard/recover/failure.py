"""Why an attempt ended: the facts the supervisor saw, and the failure it reads from them.

Outline of :func:`analyze` (pure):
1. a cancelled attempt is a cancellation, whatever else happened;
2. fatal node evidence (a hardware XID in a watched kernel log, a hard detector alert) on a node of
   the attempt wins: the node is the culprit even if its ranks were still running;
3. a non-finite loss reported by the SDK is a numerical failure (not the node's fault);
4. a hang names the rank that stopped first: a stopped process (SIGSTOP, state ``T``), else the
   rank with the lowest step, else the oldest progress;
5. a crash after the work was done is no failure (:func:`teardown_crash`): every failed rank
   either reported ``finish()`` through the SDK, or died by a crash signal of its own (SIGABRT,
   SIGSEGV...) while every other rank exited 0 by itself (in SPMD training the peers cannot
   complete without it);
6. a crash names the first rank to exit non-zero: its output tail (and its node's kernel log) is
   classified, and the other ranks' connection errors are listed as consequences. A rank killed
   by a signal without any evidence is a process crash of unknown cause (``unknown``): grounds
   to relaunch, never to blame its node. A full or read-only filesystem is marked
   ``storage_exhausted``: a relaunch cannot help.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from trainguard.evidence.events import FailureEvent
from trainguard.taxonomy import CATEGORY_PRIORITY, SEVERITY_RANK, Action, Category, Severity
from trainguard.trace.hang import HangDiagnosis

NODE_FAULT_ACTIONS = frozenset({Action.REBOOT_NODE, Action.RESET_GPU, Action.EXCLUDE_NODE})
"""Actions of a fatal event that take the node out of service."""
STORAGE_EXHAUSTED_SIGNATURES = frozenset({"no_space_left", "read_only_filesystem"})
"""Catalogue rules (``evidence/data/signatures.toml`` ids) saying the filesystem is full, over
quota or read-only (ENOSPC, EDQUOT, EROFS): a relaunch writes to the same storage and fails
again."""
EXTERNAL_STOP_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""Signals a process gets from outside (an operator, the OOM killer, a scheduler): a rank that
died by one was stopped, whatever it had done, so it never counts as having finished."""
SHELL_CRASH_CODES = frozenset(128 + s for s in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS,
                                                 signal.SIGILL, signal.SIGFPE))
"""Exit codes with which a shell wrapper (``bash -c 'python train.py'``) reports that its command
died by a crash signal of its own (128 + the signal: 134 for SIGABRT, 139 for SIGSEGV)."""


class Trigger(StrEnum):
    """What ended an attempt."""

    SUCCESS = "success"
    EXIT = "exit"
    """A rank exited non-zero or by signal."""
    HANG = "hang"
    NODE_EVIDENCE = "node_evidence"
    """A fatal kernel-log event or a detector alert on a node of the attempt."""
    NONFINITE = "nonfinite"
    CANCEL = "cancel"


class FailureKind(StrEnum):
    CRASH = "crash"
    HANG = "hang"
    NODE = "node"
    NONFINITE = "nonfinite"
    CANCELLED = "cancelled"
    LAUNCH = "launch"
    """The attempt's processes could not be started (no agent connected, a launcher that
    failed): nobody is to blame, and the chain stops."""


@dataclass(frozen=True, slots=True)
class RankOutcome:
    """One rank at the end of an attempt."""

    rank: int
    node: str
    returncode: int | None
    """Exit status; negative: killed by that signal; None: never observed to exit by itself."""
    exited_at: float | None = None
    """When the supervisor saw it exit (None when it was still running at the end)."""
    stopped: bool = False
    """The process was stopped (SIGSTOP / state T) when the attempt ended."""
    last_step: int | None = None
    last_progress: float | None = None
    finished: bool = False
    """The rank reported ``finish()`` through the SDK (its work was done)."""

    @property
    def failed(self) -> bool:
        return self.returncode is not None and self.returncode != 0

    def exit_text(self) -> str:
        if self.returncode is None:
            return "still running"
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        return f"exit code {self.returncode}"


@dataclass(frozen=True, slots=True)
class AttemptFacts:
    """Everything observed about one attempt, collected by the supervisor."""

    trigger: Trigger
    outcomes: tuple[RankOutcome, ...]
    rank_events: Mapping[int, tuple[FailureEvent, ...]] = field(default_factory=dict)
    """Classified events from each failing rank's output tail."""
    node_events: Mapping[str, tuple[FailureEvent, ...]] = field(default_factory=dict)
    """Kernel-log events and detector alerts seen on the attempt's nodes while it ran."""
    nonfinite: tuple[int, int, str] | None = None
    """(rank, step, loss) of the first non-finite loss the SDK reported."""
    hang_for_s: float | None = None
    """For a hang: seconds without progress when it was declared."""
    hang: HangDiagnosis | None = None
    """For a hang: where the ranks stood in their collectives (trainguard.trace.hang)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """The supervisor's reading of a failed attempt: input to the decision policy."""

    kind: FailureKind
    category: Category
    summary: str
    culprit_nodes: tuple[str, ...] = ()
    culprit_rank: int | None = None
    node_fault: bool = False
    """Evidence says the node itself is bad (hardware); exclude it now."""
    evidence: tuple[str, ...] = ()
    """Human-readable evidence lines (``path:line: text``)."""
    events: tuple[FailureEvent, ...] = ()
    """The root-cause event first, then related ones."""
    step: int | None = None
    """Training step at which it happened, when known (non-finite loss)."""
    storage_exhausted: bool = False
    """The storage is full, over quota or read-only: a relaunch cannot help."""
    cause: str = ""
    """A crash: what the culprit's evidence says (its root event described); empty when
    nothing in its output or its node's log explains it."""

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "category": self.category.value,
            "summary": self.summary,
            "culprit_nodes": list(self.culprit_nodes),
            "culprit_rank": self.culprit_rank,
            "node_fault": self.node_fault,
            "step": self.step,
            "storage_exhausted": self.storage_exhausted,
            "evidence": list(self.evidence),
        }


@dataclass(frozen=True, slots=True)
class TeardownCrash:
    """A rank that crashed after the attempt's work was done (see :func:`teardown_crash`)."""

    rank: int
    node: str
    exit_text: str
    """How it ended, e.g. ``killed by SIGABRT``."""
    why_done: str
    """What shows the work was done."""

    def describe(self) -> str:
        """E.g. ``teardown crash of rank 1 on node2 (SIGABRT)``."""
        return f"teardown crash of rank {self.rank} on {self.node} " \
               f"({self.exit_text.removeprefix('killed by ')})"

    def to_dict(self) -> dict[str, object]:
        return {"rank": self.rank, "node": self.node, "exit": self.exit_text,
                "why_done": self.why_done, "note": self.describe()}


def launch_failure(why: str) -> Failure:
    """An attempt whose launch failed (``why``: the launcher's or backend's error).

    >>> launch_failure("no agent connected").summary
    'launch failed: no agent connected'
    """
    return Failure(FailureKind.LAUNCH, Category.UNKNOWN, f"launch failed: {why}")


def teardown_note(crashes: Sequence[TeardownCrash]) -> str:
    """``completed; teardown crash of rank 1 on node2 (SIGABRT)`` (several joined by ``, ``)."""
    return "completed; " + ", ".join(c.describe() for c in crashes)


def is_node_fault(ev: FailureEvent) -> bool:
    """A fatal event whose action takes the node out of service."""
    return ev.severity is Severity.FATAL and ev.action in NODE_FAULT_ACTIONS


def event_rank_key(ev: FailureEvent) -> tuple[int, int, float]:
    """Root-cause ordering: category priority, then severity, then confidence."""
    return (CATEGORY_PRIORITY.get(ev.category, 0), SEVERITY_RANK[ev.severity], ev.confidence)


def root_event(events: Sequence[FailureEvent]) -> FailureEvent | None:
    """The most likely cause among ``events`` (informational ones never are)."""
    candidates = [ev for ev in events if ev.severity is not Severity.INFO]
    return max(candidates, key=event_rank_key) if candidates else None


def evidence_lines(events: Sequence[FailureEvent], limit: int = 8) -> tuple[str, ...]:
    lines: list[str] = []
    for ev in events:
        for e in ev.evidence:
            lines.append(f"{e.path}:{e.line_no}: {e.text.strip()}"[:400])
            if len(lines) >= limit:
                return tuple(lines)
    return tuple(lines)


def describe(ev: FailureEvent) -> str:
    """One line naming what happened, e.g. ``ValueError: bad lr (train.py:12 in main)``."""
    frame = ev.field_value("last_frame")
    return f"{ev.summary} ({frame})" if frame else ev.summary


def analyze(facts: AttemptFacts) -> Failure | None:
    """Read a failure from ``facts``; None when the attempt succeeded."""
    if facts.trigger is Trigger.SUCCESS:
        return None
    if facts.trigger is Trigger.CANCEL:
        return Failure(FailureKind.CANCELLED, Category.UNKNOWN, "cancelled by the operator")
    nodes = {o.node for o in facts.outcomes}
    bad = {node: evs for node, evs in facts.node_events.items()
           if node in nodes and any(is_node_fault(ev) for ev in evs)}
    if bad:
        return _node_failure(bad)
    if facts.nonfinite is not None:
        rank, step, loss = facts.nonfinite
        node = _node_of(facts.outcomes, rank)
        return Failure(FailureKind.NONFINITE, Category.NUMERICAL_NAN,
                       f"loss is {loss} at step {step} (rank {rank})", culprit_rank=rank,
                       culprit_nodes=(node,) if node else (), step=step)
    if facts.trigger is Trigger.HANG:
        return _hang_failure(facts)
    if teardown_crash(facts):
        return None
    return _crash_failure(facts)


def teardown_crash(facts: AttemptFacts) -> tuple[TeardownCrash, ...]:
    """The attempt's failed ranks when all of them crashed after the work was done, else ().

    A failed rank counts as done when it reported ``finish()``; one that did not (a script
    without the SDK) when it died by a crash signal of its own (not an outside stop such as
    SIGKILL) and every rank that did not fail exited 0 by itself. Any rank stopped by the
    supervisor without having finished means the work may not be done.
    """
    if facts.trigger is not Trigger.EXIT or facts.nonfinite is not None:
        return ()
    failed = [o for o in facts.outcomes if o.failed and o.exited_at is not None]
    others = [o for o in facts.outcomes if o not in failed]
    if not failed or any(not o.finished and (o.returncode != 0 or o.exited_at is None)
                         for o in others):
        return ()
    peers_done = bool(others) and all(o.returncode == 0 for o in others)
    crashes = []
    for o in sorted(failed, key=lambda o: (o.exited_at or 0.0, o.rank)):
        if not may_be_teardown(o.returncode, o.finished):
            return ()
        if o.finished:
            why = "it reported finish() before crashing"
        elif peers_done:
            why = "every other rank exited 0"
        else:
            return ()
        crashes.append(TeardownCrash(o.rank, o.node, o.exit_text(), why))
    return tuple(crashes)


def may_be_teardown(returncode: int | None, finished: bool) -> bool:
    """Whether a rank's failed exit could be a crash in teardown (then the peers' exits decide):
    it reported ``finish()``, or it died by a signal it raised itself (an abort, a fault), not
    by an outside stop (SIGKILL, SIGTERM) and not by an error exit. A shell wrapper reports
    such a crash of its command as 128 + the signal (:data:`SHELL_CRASH_CODES`)."""
    if finished:
        return True
    if returncode in SHELL_CRASH_CODES:
        return True
    return returncode is not None and returncode < 0 \
        and -returncode not in EXTERNAL_STOP_SIGNALS


def _node_of(outcomes: Sequence[RankOutcome], rank: int) -> str | None:
    return next((o.node for o in outcomes if o.rank == rank), None)


def _node_failure(bad: Mapping[str, Sequence[FailureEvent]]) -> Failure:
    faults = [ev for evs in bad.values() for ev in evs if is_node_fault(ev)]
    faults.sort(key=event_rank_key, reverse=True)
    root = faults[0]
    culprits = tuple(sorted(bad))
    where = root.host or culprits[0]
    return Failure(FailureKind.NODE, root.category, f"{describe(root)} on {where}",
                   culprit_nodes=culprits, node_fault=True, evidence=evidence_lines(faults),
                   events=tuple(faults))


def _hang_failure(facts: AttemptFacts) -> Failure:
    diag = facts.hang
    waited = f" for {facts.hang_for_s:.0f} s" if facts.hang_for_s is not None else ""
    if diag is not None and diag.culprits:
        root = diag.culprits[0]
        evidence = [f"rank {c.rank} on {c.node}: {c.reason}" for c in diag.culprits[:4]]
        evidence += [f"rank {root.rank} stack: {line}" for line in root.stack_top]
        evidence += [f"{root.node}: {line}" for line in root.node_evidence[:4]]
        # The collective picture names the host; evidence on it (an XID, an alert) makes it
        # the node's fault, otherwise the node is implicated and a repeat excludes it.
        node_fault = diag.definitive and bool(root.node_evidence)
        return Failure(FailureKind.HANG, Category.NCCL_TIMEOUT_HANG,
                       f"hang: no progress{waited}; {diag.summary}",
                       culprit_nodes=diag.culprit_nodes, culprit_rank=root.rank,
                       node_fault=node_fault, evidence=tuple(evidence))
    running = [o for o in facts.outcomes if o.returncode is None] or list(facts.outcomes)
    stopped = [o for o in running if o.stopped]
    if stopped:
        culprit, why = stopped[0], "its process is stopped (SIGSTOP)"
    else:
        stepped = [o for o in running if o.last_step is not None]
        if stepped and len({o.last_step for o in stepped}) > 1:
            culprit = min(stepped, key=lambda o: (o.last_step, o.rank))
            why = f"it is behind the others at step {culprit.last_step}"
        else:
            timed = [o for o in running if o.last_progress is not None]
            if not timed:
                # No rank reports its own progress (no SDK): nothing singles one out.
                summary = f"hang: no progress{waited}; the job as a whole is hung (no rank " \
                          "is singled out by the evidence)"
                if diag is not None:
                    summary += f"; {diag.summary}"
                return Failure(FailureKind.HANG, Category.NCCL_TIMEOUT_HANG, summary)
            culprit = min(timed, key=lambda o: (o.last_progress or 0.0, o.rank))
            why = "its progress stopped first"
    summary = f"hang: no progress{waited}; rank {culprit.rank} on {culprit.node} is the " \
              f"likely culprit ({why})"
    if diag is not None:
        summary += f"; {diag.summary}"
    return Failure(FailureKind.HANG, Category.NCCL_TIMEOUT_HANG, summary,
                   culprit_nodes=(culprit.node,), culprit_rank=culprit.rank)


def _crash_failure(facts: AttemptFacts) -> Failure:
    failed = [o for o in facts.outcomes if o.failed]
    if not failed:  # an attempt stopped with nothing failed: nothing better to say
        return Failure(FailureKind.CRASH, Category.UNKNOWN, "the attempt ended without a cause")
    first_t = min(o.exited_at if o.exited_at is not None else float("inf") for o in failed)
    first = sorted((o for o in failed if (o.exited_at or float("inf")) <= first_t),
                   key=lambda o: o.rank)
    culprit = first[0]
    own = list(facts.rank_events.get(culprit.rank, ()))
    # The kernel of the culprit's node may say why it died (OOM killer, a non-fatal XID).
    own += [ev for ev in facts.node_events.get(culprit.node, ())]
    others = [ev for o in failed if o is not culprit for ev in facts.rank_events.get(o.rank, ())]
    root = root_event(own)
    exit_text = culprit.exit_text()
    if root is None:
        # No evidence: a process crash of unknown cause. A signal alone (SIGABRT, SIGSEGV) says
        # nothing about the host: libraries abort in teardown on perfectly healthy nodes.
        category = Category.UNKNOWN
        summary = f"rank {culprit.rank} on {culprit.node}: {exit_text} (no evidence of the cause)"
        events: tuple[FailureEvent, ...] = tuple(others)
    else:
        category = root.category
        summary = f"rank {culprit.rank} on {culprit.node}: {describe(root)} ({exit_text})"
        events = (root, *[ev for ev in own if ev is not root], *others)
    exhausted = root is not None and root.signature in STORAGE_EXHAUSTED_SIGNATURES
    return Failure(FailureKind.CRASH, category, summary, culprit_nodes=(culprit.node,),
                   culprit_rank=culprit.rank, evidence=evidence_lines(events), events=events,
                   storage_exhausted=exhausted, cause="" if root is None else describe(root))


__all__ = [
    "EXTERNAL_STOP_SIGNALS",
    "NODE_FAULT_ACTIONS",
    "SHELL_CRASH_CODES",
    "STORAGE_EXHAUSTED_SIGNATURES",
    "AttemptFacts",
    "Failure",
    "FailureKind",
    "RankOutcome",
    "TeardownCrash",
    "Trigger",
    "analyze",
    "describe",
    "evidence_lines",
    "is_node_fault",
    "launch_failure",
    "may_be_teardown",
    "root_event",
    "teardown_crash",
    "teardown_note",
]
