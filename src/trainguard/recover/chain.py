"""The chain's bookkeeping between attempts, and node evidence that arrives at any time.

- :class:`Chain`: nodes, spares, attempts and exclusions so far (mutable; the policy only ever
  sees the frozen :class:`~trainguard.recover.policy.ChainState` that :func:`decide_next`
  builds);
- :class:`NodeEvidence`: kernel-log evidence and detector alerts, polled while an attempt runs
  and during backoff; a fatal one on a node of the attempt stops it, one on an idle spare
  excludes the spare.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trainguard.errors import TrainguardError
from trainguard.evidence.events import FailureEvent
from trainguard.recover.backend import Backend
from trainguard.recover.cancel import CancelToken
from trainguard.recover.failure import Failure, Trigger, evidence_lines, is_node_fault
from trainguard.recover.policy import ChainState, Decision, Verdict, decide, implicated_after
from trainguard.recover.records import AttemptResult, Exclusion
from trainguard.recover.spec import JobSpec
from trainguard.recover.watch import NodeWatch
from trainguard.store import Store


@dataclass(slots=True)
class Chain:
    """Mutable bookkeeping of one chain (the policy only ever sees frozen snapshots)."""

    nodes: tuple[str, ...]
    spares: list[str]
    attempts: list[AttemptResult] = field(default_factory=list)
    exclusions: list[Exclusion] = field(default_factory=list)
    history: list[Failure] = field(default_factory=list)
    implicated: dict[str, int] = field(default_factory=dict)
    checkpoint_steps: set[int] = field(default_factory=set)
    retries: int = 0
    rollbacks: int = 0
    resume_max_step: int | None = None


def decide_next(spec: JobSpec, failure: Failure, chain: Chain) -> Decision:
    """The policy's decision on ``failure`` (the last of ``chain.attempts`` is the attempt that
    failed); the chain remembers the failure."""
    required = spec.min_nodes if spec.min_nodes is not None else len(spec.nodes)
    state = ChainState(
        nodes=chain.nodes, spares=tuple(chain.spares), required_nodes=required,
        retries_used=chain.retries, history=tuple(chain.history),
        implicated=dict(chain.implicated), rollbacks_used=chain.rollbacks,
        checkpoint_steps=tuple(sorted(chain.checkpoint_steps)),
        resume_max_step=chain.resume_max_step,
        attempt_steps=tuple(a.last_step for a in chain.attempts))
    decision = decide(failure, state, spec.policy)
    chain.implicated = implicated_after(failure, state)
    chain.history.append(failure)
    return decision


def advance(chain: Chain, decision: Decision) -> None:
    """The chain after a relaunch decision: its nodes, spares and budgets."""
    chain.retries += 1
    if decision.verdict is Verdict.ROLLBACK:
        chain.rollbacks += 1
    chain.resume_max_step = decision.resume_max_step
    chain.spares = [s for s in chain.spares
                    if s not in decision.next_nodes and s not in decision.excluded]
    chain.nodes = decision.next_nodes


class Scheduler:
    """Tells the backend's scheduler about exclusions; a refusal is reported, never fatal."""

    def __init__(self, backend: Backend, status: Callable[[str], None]) -> None:
        self._backend = backend
        self._status = status

    def exclude(self, node: str, reason: str) -> None:
        try:
            self._backend.exclude(node, reason)
        except TrainguardError as exc:  # the job goes on without the node either way
            self._status(f"could not take {node} out of service: {exc}")


class NodeEvidence:
    """Node evidence for the chain (see the module docstring)."""

    def __init__(self, watch: NodeWatch, token: CancelToken, scheduler: Scheduler,
                 status: Callable[[str], None], store: Store | None = None,
                 session_id: int | None = None) -> None:
        self._watch = watch
        self._token = token
        self._scheduler = scheduler
        self._status = status
        self._store = store
        self._session_id = session_id

    def poll(self, nodes: tuple[str, ...], chain: Chain,
             found: dict[str, list[FailureEvent]], now: float,
             remote: Iterable[FailureEvent] = (), *, ended: bool = False) -> Trigger | None:
        """Kernel-log evidence and alerts (``remote``: what agents found on their hosts), added
        to ``found`` by node; :attr:`Trigger.NODE_EVIDENCE` when a node of ``nodes`` has a
        fatal one. ``ended``: the attempt's ranks are already gone (its last look), so a fatal
        event is said as found late, not as stopping anything."""
        trigger = None
        watch = self._watch
        no_events: list[FailureEvent] = []
        for ev in [*self._token.classify(lambda: watch.poll(now), no_events), *remote]:
            node = ev.host or ""
            if node in nodes:
                found.setdefault(node, []).append(ev)
                if is_node_fault(ev):
                    self._status(f"{node}: {ev.summary} (logged as the attempt ended)" if ended
                                 else f"{node}: stopping the attempt: {ev.summary}")
                    trigger = Trigger.NODE_EVIDENCE
            elif node in chain.spares and is_node_fault(ev):
                self._lose_spare(node, ev, chain, now)
        return trigger

    def _lose_spare(self, node: str, ev: FailureEvent, chain: Chain, now: float) -> None:
        chain.spares.remove(node)
        reason = f"spare {node} failed while idle: {ev.summary}"
        self._status(reason)
        evidence = evidence_lines([ev])
        chain.exclusions.append(Exclusion(node, reason, len(chain.attempts), evidence))
        self._scheduler.exclude(node, f"trainguard: {reason}")
        if self._store is not None:
            self._store.add_exclusion(node, reason=reason, created=now, evidence=evidence,
                                      session_id=self._session_id)


__all__ = ["Chain", "NodeEvidence", "Scheduler", "advance", "decide_next"]
