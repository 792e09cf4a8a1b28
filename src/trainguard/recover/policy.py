"""The decision policy: from a failure and the chain's history, what to do next (pure).

Rules are small functions tried in order; the first that returns a decision wins:

1. a cancelled attempt stops the chain;
2. a spent retry budget stops the chain;
3. a crash loop stops the chain: the last ``crash_loop_restarts`` restarts each failed without
   getting past the best step reached before them (:mod:`trainguard.recover.crashloop`, where
   the rule is written out). It comes before the rules that relaunch because replacing nodes or
   rolling back is a restart too; a node with hardware evidence is still excluded;
4. nodes with hardware evidence, or implicated ``implicated_limit`` times in the chain, are
   excluded: each is replaced in place by the next healthy spare, else dropped while the job
   may shrink (``min_nodes``), else the chain stops. Only failures that implicate their node
   count (:attr:`~trainguard.recover.failure.Failure.implication`, the answer node health
   records too): a crash without evidence, a bug, a storage error, an injected fault or a
   process stopped from outside does not implicate the host it happened on;
5. a storage error implicates the storage, not the host: a full, over-quota or read-only
   filesystem stops the chain at once (a relaunch writes to the same storage); another storage
   I/O error gets ``confirm_retries`` confirming relaunches on the same nodes, then stops;
6. a user-code or configuration error (exception, GPU/host OOM, CUDA software error) gets
   ``confirm_retries`` confirming relaunches, then stops the chain: retrying a bug burns GPUs;
7. a non-finite loss or a bad checkpoint rolls back to an earlier checkpoint, at most
   ``max_rollbacks`` times;
8. anything else (a crash without evidence, a hang, a network error, an injected fault) retries
   on the same nodes; the decision says which nodes are suspected and how close each is to
   exclusion, or that no node is implicated.

    >>> from trainguard.taxonomy import Category
    >>> from trainguard.recover.failure import Failure, FailureKind
    >>> f = Failure(FailureKind.NODE, Category.GPU_HARDWARE, "XID 79", culprit_nodes=("n2",),
    ...             node_fault=True)
    >>> d = decide(f, ChainState(nodes=("n1", "n2"), spares=("n3",), required_nodes=2),
    ...            RetryPolicy())
    >>> d.verdict.value, d.next_nodes, d.excluded
    ('exclude_and_retry', ('n1', 'n3'), ('n2',))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from trainguard.recover.crashloop import CrashLoop, failures_in_a_row, find_crash_loop
from trainguard.recover.failuremodel import (
    NODE_SUSPECT_CATEGORIES,
    Failure,
    FailureKind,
    Implication,
)
from trainguard.recover.spec import RetryPolicy
from trainguard.taxonomy import Category

CODE_CATEGORIES = frozenset({Category.USER_CODE_ERROR, Category.OOM_GPU, Category.OOM_HOST,
                             Category.CUDA_SOFTWARE_BUG})
"""Failures that a relaunch will most likely repeat."""
ROLLBACK_CATEGORIES = frozenset({Category.NUMERICAL_NAN, Category.CHECKPOINT})


class Verdict(StrEnum):
    RETRY = "retry"
    """Relaunch on the same nodes."""
    EXCLUDE = "exclude_and_retry"
    """Exclude node(s) and relaunch on spares or fewer nodes."""
    ROLLBACK = "rollback_and_retry"
    """Relaunch from an earlier checkpoint."""
    STOP = "stop"
    """End the chain as failed."""


@dataclass(frozen=True, slots=True)
class ChainState:
    """A frozen snapshot of the chain when an attempt has failed."""

    nodes: tuple[str, ...]
    """Nodes of the failed attempt, in rank order."""
    spares: tuple[str, ...] = ()
    """Healthy spares still available, in order of use."""
    required_nodes: int = 1
    """Fewest nodes the job may run on."""
    retries_used: int = 0
    history: tuple[Failure, ...] = ()
    """Earlier failures of this chain, oldest first (not the current one)."""
    implicated: Mapping[str, int] = field(default_factory=dict)
    """How often each node was the culprit of an earlier failure."""
    rollbacks_used: int = 0
    checkpoint_steps: tuple[int, ...] = ()
    """Steps of the checkpoints known to have been saved, ascending."""
    resume_max_step: int | None = None
    """The current rollback limit, if any."""
    attempt_steps: tuple[int | None, ...] = ()
    """The step each attempt of the chain reported (SDK), oldest first, the failed attempt
    last; None where it reported none."""


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str
    next_nodes: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    backoff_s: float = 0.0
    resume_max_step: int | None = None
    """Newest checkpoint step the next launch may resume from (None: no limit)."""
    crash_loop: CrashLoop | None = None
    """Why a crash-loop stop stopped (the report counts these stops)."""

    def to_dict(self) -> dict[str, object]:
        return {"verdict": self.verdict.value, "reason": self.reason,
                "next_nodes": list(self.next_nodes), "excluded": list(self.excluded),
                "backoff_s": self.backoff_s, "resume_max_step": self.resume_max_step,
                "crash_loop": self.crash_loop.to_dict() if self.crash_loop else None}


Rule = Callable[[Failure, ChainState, RetryPolicy], Decision | None]


def implicated_after(failure: Failure, state: ChainState) -> dict[str, int]:
    """The chain's culprit counts including ``failure``: its nodes count when it implicates
    them (:attr:`Failure.implication`, the same answer node health records)."""
    counts = dict(state.implicated)
    for node in failure.implicated_nodes:
        counts[node] = counts.get(node, 0) + 1
    return counts


def _retry(state: ChainState, policy: RetryPolicy, verdict: Verdict, reason: str,
           nodes: tuple[str, ...] | None = None, excluded: tuple[str, ...] = (),
           resume_max_step: int | None = None) -> Decision:
    backoff = policy.backoff_for(failures_in_a_row(state.attempt_steps, len(state.history) + 1))
    return Decision(verdict, reason, nodes if nodes is not None else state.nodes, excluded,
                    backoff, resume_max_step if resume_max_step is not None
                    else state.resume_max_step)


def _cancelled(failure: Failure, state: ChainState, policy: RetryPolicy) -> Decision | None:
    if failure.kind is FailureKind.CANCELLED:
        return Decision(Verdict.STOP, "cancelled by the operator")
    return None


def _budget(failure: Failure, state: ChainState, policy: RetryPolicy) -> Decision | None:
    if state.retries_used >= policy.max_retries:
        return Decision(Verdict.STOP, f"stop: the retry budget ({policy.max_retries} "
                        f"relaunch{'es' if policy.max_retries != 1 else ''}) is spent")
    return None


def _crash_loop(failure: Failure, state: ChainState, policy: RetryPolicy) -> Decision | None:
    loop = find_crash_loop(state.attempt_steps, policy.crash_loop_restarts)
    if loop is None:
        return None
    # The stop does not spare a node with hardware evidence from exclusion.
    bad = tuple(n for n in state.nodes if failure.node_fault and n in failure.culprit_nodes)
    return Decision(Verdict.STOP, f"stop: {loop.message}", excluded=bad, crash_loop=loop)


def _exclude(failure: Failure, state: ChainState, policy: RetryPolicy) -> Decision | None:
    counts = implicated_after(failure, state)
    bad = [n for n in state.nodes
           if (failure.node_fault and n in failure.culprit_nodes)
           or counts.get(n, 0) >= policy.implicated_limit]
    if not bad:
        return None
    spares = list(state.spares)
    nodes: list[str] = []
    for node in state.nodes:
        if node not in bad:
            nodes.append(node)
        elif spares:
            nodes.append(spares.pop(0))
    why = "hardware evidence" if failure.node_fault else \
        f"implicated in {policy.implicated_limit} failures"
    names = ", ".join(bad)
    if len(nodes) < state.required_nodes:
        return Decision(Verdict.STOP, f"stop: {names} excluded ({why}) and no spare left: "
                        f"the job needs {state.required_nodes} node(s), {len(nodes)} remain",
                        excluded=tuple(bad))
    replaced = [n for n in nodes if n not in state.nodes]
    where = f"on spare(s) {', '.join(replaced)}" if replaced else f"on {len(nodes)} node(s)"
    return _retry(state, policy, Verdict.EXCLUDE, f"exclude {names} ({why}); relaunch {where}",
                  tuple(nodes), tuple(bad))


CHECKPOINT_WRITE_SIGNATURES = frozenset({"checkpoint_write_failed"})
"""A checkpoint that could not be *written*: the storage under it is suspect, not the saved
checkpoints (rolling back to an older one cannot help), so it is handled as a storage error."""


def is_storage_failure(failure: Failure) -> bool:
    """A storage error, or a checkpoint failure caused by the storage (full, read-only, a
    failing write) rather than by a damaged checkpoint."""
    if failure.category is Category.STORAGE_IO or failure.storage_exhausted:
        return True
    root = failure.events[0] if failure.events else None
    return (failure.category is Category.CHECKPOINT and root is not None
            and root.signature in CHECKPOINT_WRITE_SIGNATURES)


def _storage(failure: Failure, state: ChainState, policy: RetryPolicy) -> Decision | None:
    if not is_storage_failure(failure):
        return None
    if failure.storage_exhausted:
        return Decision(Verdict.STOP, "stop: the storage is full or read-only, a relaunch "
                        "cannot help; free space (or fix the mount) and run again (no node "
                        "excluded)")
    seen = sum(1 for f in state.history if is_storage_failure(f))
    if seen >= policy.confirm_retries:
        return Decision(Verdict.STOP, f"stop: a storage error on {seen + 1} attempts: check "
                        "the storage (no node excluded)")
    return _retry(state, policy, Verdict.RETRY,
                  "relaunch on the same nodes to confirm the storage error (the storage, not a "
                  "node, is suspect)")


def _code_error(failure: Failure, state: ChainState, policy: RetryPolicy) -> Decision | None:
    if failure.category not in CODE_CATEGORIES:
        return None
    seen = sum(1 for f in state.history if f.category is failure.category)
    if seen >= policy.confirm_retries:
        return Decision(Verdict.STOP, f"stop: a {label(failure.category)} on {seen + 1} "
                        "attempts is a bug, not retried")
    return _retry(state, policy, Verdict.RETRY,
                  f"relaunch once on the same nodes to confirm the {label(failure.category)} "
                  "(a second one stops the job)")


def _rollback(failure: Failure, state: ChainState, policy: RetryPolicy) -> Decision | None:
    if failure.category not in ROLLBACK_CATEGORIES:
        return None
    if state.rollbacks_used >= policy.max_rollbacks:
        return Decision(Verdict.STOP, f"stop: a {label(failure.category)} again after "
                        f"{state.rollbacks_used} rollback(s)")
    limit = state.resume_max_step
    steps = [s for s in state.checkpoint_steps
             if (limit is None or s <= limit)
             and (failure.step is None or s <= failure.step)]
    # Skip the newest checkpoint that the failing run could have resumed from or written.
    target = steps[-2] if len(steps) >= 2 else 0
    where = f"checkpoint of step {target}" if target else "the start"
    return _retry(state, policy, Verdict.ROLLBACK,
                  f"roll back to {where} ({label(failure.category)})", resume_max_step=target)


def _same_nodes(failure: Failure, state: ChainState, policy: RetryPolicy) -> Decision | None:
    if failure.injected:
        why = failure.injected
    elif failure.category is Category.UNKNOWN:
        why = "the cause is unknown"
    else:
        why = label(failure.category)
    return _retry(state, policy, Verdict.RETRY,
                  f"relaunch on the same nodes ({why}; {suspicion_text(failure, state, policy)})")


def suspicion_text(failure: Failure, state: ChainState, policy: RetryPolicy) -> str:
    """What the failure says of the nodes, when none is excluded: ``no node is implicated``,
    or ``node2 suspected (1 of 2 implications before exclusion)``."""
    if failure.implication is Implication.NONE:
        return "no node is implicated"
    counts = implicated_after(failure, state)
    parts = [f"{node} suspected ({counts.get(node, 0)} of {policy.implicated_limit} "
             "implications before exclusion)" for node in failure.implicated_nodes]
    return "; ".join(parts)


def label(category: Category) -> str:
    """A category as words, e.g. ``user code error``."""
    return category.value.replace("_", " ")


RULES: tuple[Rule, ...] = (_cancelled, _budget, _crash_loop, _exclude, _storage, _code_error,
                           _rollback, _same_nodes)


def decide(failure: Failure, state: ChainState, policy: RetryPolicy,
           rules: tuple[Rule, ...] = RULES) -> Decision:
    """The first rule's decision for ``failure`` (the last rule always decides)."""
    for rule in rules:
        decision = rule(failure, state, policy)
        if decision is not None:
            return decision
    raise AssertionError("the rule list must end with a rule that always decides")


__all__ = [
    "CODE_CATEGORIES",
    "NODE_SUSPECT_CATEGORIES",
    "ROLLBACK_CATEGORIES",
    "RULES",
    "ChainState",
    "Decision",
    "Rule",
    "Verdict",
    "decide",
    "implicated_after",
    "label",
    "suspicion_text",
]
