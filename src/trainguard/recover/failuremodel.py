"""What the supervisor saw of an attempt and what it reads from it: the types of failure analysis.

:mod:`trainguard.recover.failure` reads a :class:`Failure` from :class:`AttemptFacts`; the
decision policy (:mod:`trainguard.recover.policy`), the records and node health read the
failure. :attr:`Failure.implication` is the one answer to "is the culprit's node to blame?" that
the policy's decision text, its exclusions and node health (``trainguard nodes``) all use:

- ``fault``: hardware evidence on the node (an XID, a hard detector alert): it is excluded now,
  and node health counts a job it took down;
- ``suspect``: the evidence points at the node without proving it (a node-suspect failure such
  as a network error or a hang names it as the likely culprit): the node counts towards
  exclusion after ``implicated_limit`` such failures in the chain, and node health records a
  suspicion (a lighter weight than a job taken down);
- ``none``: the failure is not the node's doing (an injected fault, a process stopped from
  outside, a bug in the job's code, a crash without evidence, a job-level failure that names no
  rank): no exclusion, no strike, and the supervisor's messages name no culprit node.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from trainguard.evidence.events import FailureEvent
from trainguard.evidence.signals import SIGNAL_FIELD
from trainguard.recover.injected import Injection
from trainguard.taxonomy import CATEGORY_PRIORITY, SEVERITY_RANK, Action, Category, Severity
from trainguard.trace.hang import HangDiagnosis

NODE_FAULT_ACTIONS = frozenset({Action.REBOOT_NODE, Action.RESET_GPU, Action.EXCLUDE_NODE})
"""Actions of a fatal event that take the node out of service."""
NODE_SUSPECT_CATEGORIES = frozenset({
    Category.GPU_HARDWARE, Category.GPU_MEMORY_ECC, Category.NVLINK_INTERCONNECT,
    Category.SCHEDULER_NODE_FAILURE, Category.CUDA_SOFTWARE_BUG, Category.NCCL_TIMEOUT_HANG,
    Category.COLLECTIVE_HANG, Category.NETWORK_IB,
})
"""Failures whose culprit node is suspect. Not a bug in user code, not a storage error (shared
storage fails every host alike), not an injected fault, and not ``unknown``: a process that
crashed without evidence (a SIGABRT in a library's teardown) says nothing about its host."""


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


class Implication(StrEnum):
    """How a failure bears on its culprit's node (see the module docstring)."""

    FAULT = "fault"
    SUSPECT = "suspect"
    NONE = "none"


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
    injections: tuple[Injection, ...] = ()
    """Faults trainguard delivered to the attempt (:mod:`trainguard.recover.injected`)."""
    backend: str | None = None
    """The job's torch.distributed backend as its ranks reported it (``nccl``, ``gloo``...);
    None: not reported."""
    own_code: Mapping[int, str] = field(default_factory=dict)
    """For a hang: ranks whose training thread stood in the job's own code (its innermost
    Python frame is the job's, not a library's), with that frame."""


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
    injected: str = ""
    """The fault trainguard injected that explains the failure, e.g. ``injected kill of rank 1
    (trainguard inject)``; empty when none does."""
    backend: str | None = None
    """A hang: the job's communication backend (``nccl``, ``gloo``, ``unknown``)."""
    blame: Implication | None = None
    """What the analysis decided of the culprit's node when its category does not say it (a
    process stopped from outside, an injected fault: ``none``); None: from the category."""

    @property
    def implication(self) -> Implication:
        """Whether the culprit's node is to blame (see the module docstring)."""
        if self.node_fault:
            return Implication.FAULT
        if not self.culprit_nodes:
            return Implication.NONE
        if self.blame is not None:
            return self.blame
        return Implication.SUSPECT if self.category in NODE_SUSPECT_CATEGORIES \
            else Implication.NONE

    @property
    def implicated_nodes(self) -> tuple[str, ...]:
        """The culprit nodes when they are to blame, else ()."""
        return () if self.implication is Implication.NONE else self.culprit_nodes

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "category": self.category.value,
            "summary": self.summary,
            "culprit_nodes": list(self.culprit_nodes),
            "culprit_rank": self.culprit_rank,
            "node_fault": self.node_fault,
            "implication": self.implication.value,
            "implicated_nodes": list(self.implicated_nodes),
            "injected": self.injected or None,
            "backend": self.backend,
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
    """The most likely cause among ``events`` (informational ones never are, nor a launcher's
    report read by a signal alone: like the rank's own signal, it says nothing of the host)."""
    candidates = [ev for ev in events if ev.severity is not Severity.INFO
                  and ev.field_value(SIGNAL_FIELD) is None]
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


def record_implication(failure: Mapping[str, Any]) -> tuple[Implication, tuple[str, ...]]:
    """The implication and implicated nodes of a recorded failure (``Failure.to_dict()``, as
    ``summary.json`` and the store keep it). A record from before implications were kept is
    read by its category: ``fault`` with node_fault, else ``suspect`` for a node-suspect
    category (weak hang evidence included, so never more than a suspicion), else ``none``."""
    nodes = tuple(str(n) for n in failure.get("culprit_nodes") or () if n)
    said = failure.get("implication")
    if said in {i.value for i in Implication}:
        implication = Implication(str(said))
        named = failure.get("implicated_nodes")
        if isinstance(named, list):
            nodes = tuple(str(n) for n in named if n)
    elif failure.get("node_fault"):
        implication = Implication.FAULT
    else:
        try:
            category = Category(str(failure.get("category", "unknown")))
        except ValueError:
            category = Category.UNKNOWN
        implication = Implication.SUSPECT if category in NODE_SUSPECT_CATEGORIES \
            else Implication.NONE
    if implication is Implication.NONE or not nodes:
        return Implication.NONE, ()
    return implication, nodes


__all__ = [
    "NODE_FAULT_ACTIONS",
    "NODE_SUSPECT_CATEGORIES",
    "AttemptFacts",
    "Failure",
    "FailureKind",
    "Implication",
    "RankOutcome",
    "TeardownCrash",
    "Trigger",
    "describe",
    "event_rank_key",
    "evidence_lines",
    "is_node_fault",
    "record_implication",
    "root_event",
    "teardown_note",
]
