"""Why an attempt ended: the facts the supervisor saw, and the failure it reads from them.

Outline of :func:`analyze` (pure):
1. a cancelled attempt is a cancellation, whatever else happened;
2. fatal node evidence (a hardware XID in a watched kernel log, a hard detector alert) on a node of
   the attempt wins: the node is the culprit even if its ranks were still running;
3. a non-finite loss reported by the SDK is a numerical failure (not the node's fault);
4. a hang is read by :func:`trainguard.recover.hangcause.hang_failure`: an injected stop, a
   hang in the job's own code, or a ``collective_hang`` (any backend) naming the rank that
   stopped first;
5. a crash after the work was done is no failure (:func:`teardown_crash`): every failed rank
   either reported ``finish()`` through the SDK, or died by a crash signal of its own (SIGABRT,
   SIGSEGV...) while every other rank exited 0 by itself (in SPMD training the peers cannot
   complete without it);
6. a crash names the first rank to exit non-zero: its output tail (and its node's kernel log) is
   classified, and the other ranks' connection errors are listed as consequences. A rank killed
   by a signal without any evidence is a process crash of unknown cause (``unknown``): grounds
   to relaunch, never to blame its node. A full or read-only filesystem is marked
   ``storage_exhausted``: a relaunch cannot help.

A fault trainguard delivered (``run --inject``, ``trainguard inject``, the SDK's in-process
faults; :mod:`trainguard.recover.injected`) that explains the failure is named as its cause: a
kill or a stop is an ``injected_fault`` that implicates no node; an injected XID, alert,
exception or NaN keeps the category its evidence gives, with :attr:`Failure.injected` set.

The types (:class:`Failure`, :class:`AttemptFacts`...) live in
:mod:`trainguard.recover.failuremodel` and are re-exported here.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence

from trainguard.evidence.events import FailureEvent
from trainguard.recover.failuremodel import (
    NODE_FAULT_ACTIONS,
    NODE_SUSPECT_CATEGORIES,
    AttemptFacts,
    Failure,
    FailureKind,
    Implication,
    RankOutcome,
    TeardownCrash,
    Trigger,
    describe,
    event_rank_key,
    evidence_lines,
    is_node_fault,
    record_implication,
    root_event,
    teardown_note,
)
from trainguard.recover.hangcause import hang_failure
from trainguard.recover.injected import (
    SIGNALS,
    explains_exit,
    explains_node,
    explains_nonfinite,
)
from trainguard.taxonomy import Category

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


def launch_failure(why: str) -> Failure:
    """An attempt whose launch failed (``why``: the launcher's or backend's error).

    >>> launch_failure("no agent connected").summary
    'launch failed: no agent connected'
    """
    return Failure(FailureKind.LAUNCH, Category.UNKNOWN, f"launch failed: {why}")


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
        return _node_failure(facts, bad)
    if facts.nonfinite is not None:
        rank, step, loss = facts.nonfinite
        node = _node_of(facts.outcomes, rank)
        inj = explains_nonfinite(facts.injections, rank)
        return Failure(FailureKind.NONFINITE, Category.NUMERICAL_NAN,
                       f"loss is {loss} at step {step} (rank {rank})"
                       + (f": {inj.describe()}" if inj is not None else ""), culprit_rank=rank,
                       culprit_nodes=(node,) if node else (), step=step,
                       injected=inj.describe() if inj is not None else "")
    if facts.trigger is Trigger.HANG:
        return hang_failure(facts)
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


def _node_failure(facts: AttemptFacts, bad: Mapping[str, Sequence[FailureEvent]]) -> Failure:
    faults = [ev for evs in bad.values() for ev in evs if is_node_fault(ev)]
    faults.sort(key=event_rank_key, reverse=True)
    root = faults[0]
    culprits = tuple(sorted(bad))
    where = root.host or culprits[0]
    inj = explains_node(facts.injections, culprits)
    injected = inj.describe() if inj is not None else ""
    return Failure(FailureKind.NODE, root.category,
                   f"{describe(root)} on {where}" + (f" ({injected})" if injected else ""),
                   culprit_nodes=culprits, node_fault=True, evidence=evidence_lines(faults),
                   events=tuple(faults), injected=injected)


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
    inj = explains_exit(facts.injections, culprit.rank, culprit.returncode)
    where = f"rank {culprit.rank} on {culprit.node}"
    if inj is not None and (root is None or inj.kind in SIGNALS):
        # trainguard's own kill: what the rank printed before it is not the cause.
        what = inj.describe()
        return Failure(FailureKind.CRASH, Category.INJECTED_FAULT, f"{where}: {what} "
                       f"({exit_text})", culprit_nodes=(culprit.node,),
                       culprit_rank=culprit.rank, events=tuple(others), injected=what,
                       cause=what, blame=Implication.NONE)
    if root is None:
        # No evidence: a process crash of unknown cause. A signal alone (SIGABRT, SIGSEGV) says
        # nothing about the host: libraries abort in teardown on perfectly healthy nodes.
        category = Category.UNKNOWN
        summary = f"{where}: {exit_text} (no evidence of the cause)"
        events: tuple[FailureEvent, ...] = tuple(others)
    else:
        category = root.category
        summary = f"{where}: {describe(root)} ({exit_text})"
        events = (root, *[ev for ev in own if ev is not root], *others)
    exhausted = root is not None and root.signature in STORAGE_EXHAUSTED_SIGNATURES
    injected = inj.describe() if inj is not None else ""
    cause = "" if root is None else describe(root)
    if injected:
        summary += f": {injected}"
        cause = f"{cause}: {injected}" if cause else injected
    return Failure(FailureKind.CRASH, category, summary, culprit_nodes=(culprit.node,),
                   culprit_rank=culprit.rank, evidence=evidence_lines(events), events=events,
                   storage_exhausted=exhausted, cause=cause, injected=injected,
                   blame=Implication.NONE if injected else None)


__all__ = [
    "EXTERNAL_STOP_SIGNALS",
    "NODE_FAULT_ACTIONS",
    "NODE_SUSPECT_CATEGORIES",
    "SHELL_CRASH_CODES",
    "STORAGE_EXHAUSTED_SIGNATURES",
    "AttemptFacts",
    "Failure",
    "FailureKind",
    "Implication",
    "RankOutcome",
    "TeardownCrash",
    "Trigger",
    "analyze",
    "describe",
    "evidence_lines",
    "is_node_fault",
    "launch_failure",
    "may_be_teardown",
    "record_implication",
    "root_event",
    "teardown_crash",
    "teardown_note",
]
