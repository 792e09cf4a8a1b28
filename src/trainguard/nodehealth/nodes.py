"""The fleet as the store remembers it: per node, exclusions, XIDs, alerts, the jobs it took down,
the failures that made it a suspect, its lemon score, and whether it may be used.

    >>> from trainguard.store import ExclusionRecord, Store
    >>> with Store.open(":memory:") as store:
    ...     _ = store.add_exclusion("node7", reason="XID 79", created=0.0, source="operator")
    ...     [(h.node, h.excluded) for h in node_health(store, now=10.0)]
    [('node7', True)]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.nodehealth.health import (
    Concentration,
    IncidentKind,
    LemonPolicy,
    NodeIncident,
    by_node,
    concentration,
    lemon_score,
)
from trainguard.recover.failuremodel import Implication, record_implication
from trainguard.store import ExclusionRecord, Store
from trainguard.taxonomy import Severity


@dataclass(frozen=True, slots=True)
class NodeHealth:
    node: str
    excluded: bool
    """An active exclusion: no trainguard run uses the node until it is released."""
    exclusion_reason: str | None
    excluded_since: float | None
    exclusions: int
    """All exclusions ever (released ones included)."""
    xids: int
    alerts: int
    jobs_taken_down: int
    """Jobs in which hardware evidence on the node failed an attempt (implication ``fault``)."""
    last_evidence: str | None
    last_evidence_time: float | None
    lemon_score: float
    lemon: bool
    state: str | None = None
    """The state last recorded for the node (scheduler state when a backend reports one)."""
    suspicions: int = 0
    """Jobs with a failure whose evidence pointed at the node without proving it
    (implication ``suspect``: a hang's likely culprit, a network error...)."""

    @property
    def listed_state(self) -> str:
        """The state as ``trainguard nodes`` lists it (:func:`listed_state`)."""
        return listed_state(self.excluded, self.state)

    def to_dict(self) -> dict[str, object]:
        return {"node": self.node, "excluded": self.excluded,
                "exclusion_reason": self.exclusion_reason, "excluded_since": self.excluded_since,
                "exclusions": self.exclusions, "xids": self.xids, "alerts": self.alerts,
                "jobs_taken_down": self.jobs_taken_down, "suspicions": self.suspicions,
                "last_evidence": self.last_evidence,
                "last_evidence_time": self.last_evidence_time,
                "lemon_score": self.lemon_score, "lemon": self.lemon,
                "state": self.listed_state, "recorded_state": self.state}


def listed_state(excluded: bool, recorded: str | None) -> str:
    """A node's state for the listing (table and JSON alike): ``excluded`` while an exclusion
    is active, else the state last recorded, else ``ok`` (nothing recorded against it)."""
    if excluded:
        return "excluded"
    return recorded or "ok"


def incidents(store: Store) -> list[NodeIncident]:
    """Every node incident the store knows, oldest first."""
    return _incidents(store, store.events())


def _incidents(store: Store, events: Iterable[FailureEvent]) -> list[NodeIncident]:
    out: list[NodeIncident] = []
    for ex in store.exclusions():
        out.append(NodeIncident(ex.node, ex.created, IncidentKind.EXCLUSION,
                                _job(ex.session_id), f"excluded: {ex.reason}"))
    for ev in events:
        if _is_xid(ev) and ev.time is not None and ev.time_kind is TimeKind.ABSOLUTE:
            out.append(NodeIncident(ev.host or "", ev.time, IncidentKind.XID, None, ev.summary))
    for al in store.alerts():
        out.append(NodeIncident(al.node, al.start, IncidentKind.ALERT, None,
                                f"{al.kind} alert (score {al.peak_score:g})"))
    for at in store.attempts():
        failure = at.detail.get("failure") if at.detail else None
        if at.status != "failed" or not isinstance(failure, dict):
            continue
        # The same answer the supervisor's decision gave (recover.failure.Failure.implication).
        implication, nodes = record_implication(failure)
        if implication is Implication.NONE:
            continue
        kind = IncidentKind.JOB_FAILURE if implication is Implication.FAULT \
            else IncidentKind.SUSPICION
        for node in nodes:
            out.append(NodeIncident(node, at.ended or at.started, kind, _job(at.session_id),
                                    str(failure.get("summary", ""))))
    out.sort(key=lambda i: i.time)
    return out


def _is_xid(ev: FailureEvent) -> bool:
    return ev.xid is not None and bool(ev.host) and ev.severity is not Severity.INFO


def untimed_xids(events: Iterable[FailureEvent]) -> dict[str, int]:
    """Per host, the XIDs among ``events`` without a wall-clock time (plain ``dmesg``: seconds
    since boot). They count, but have no place in time: no age for the lemon score, never
    shown as a 1970 date."""
    out: dict[str, int] = {}
    for ev in events:
        if _is_xid(ev) and ev.time_kind is not TimeKind.ABSOLUTE and ev.host:
            out[ev.host] = out.get(ev.host, 0) + 1
    return out


def _job(session_id: int | None) -> str | None:
    return None if session_id is None else f"session:{session_id}"


def node_health(store: Store, now: float, policy: LemonPolicy | None = None,
                extra_nodes: Iterable[str] = ()) -> list[NodeHealth]:
    """Every node the store has seen (plus ``extra_nodes``), worst lemon score first."""
    policy = policy or LemonPolicy()
    events = store.events()  # read once: timed XIDs are incidents, untimed ones only count
    grouped = by_node(_incidents(store, events))
    untimed = untimed_xids(events)
    active: dict[str, ExclusionRecord] = {}
    for record in store.exclusions(active_only=True):
        active.setdefault(record.node, record)
    states = {n.name: n.state for n in store.nodes()}
    members = {node for at in store.attempts() for node in at.nodes}
    names = set(grouped) | set(active) | set(states) | members | set(untimed) | set(extra_nodes)
    out = []
    for node in names:
        incs = grouped.get(node, [])
        score = lemon_score(incs, now, policy)
        last = incs[-1] if incs else None
        ex = active.get(node)
        out.append(NodeHealth(
            node=node, excluded=ex is not None,
            exclusion_reason=ex.reason if ex else None,
            excluded_since=ex.created if ex else None,
            exclusions=sum(1 for i in incs if i.kind is IncidentKind.EXCLUSION),
            xids=sum(1 for i in incs if i.kind is IncidentKind.XID) + untimed.get(node, 0),
            alerts=sum(1 for i in incs if i.kind is IncidentKind.ALERT),
            jobs_taken_down=len({i.job for i in incs if i.kind is IncidentKind.JOB_FAILURE}),
            suspicions=len({i.job for i in incs if i.kind is IncidentKind.SUSPICION}),
            last_evidence=last.summary if last else None,
            last_evidence_time=last.time if last else None,
            lemon_score=score.score, lemon=score.lemon, state=states.get(node)))
    out.sort(key=lambda h: (-h.lemon_score, not h.excluded, h.node))
    return out


def exclusion_concentration(store: Store, top_k: int = 3) -> Concentration:
    """How unevenly exclusions fall on the nodes the store has seen."""
    counts: dict[str, int] = {}
    for ex in store.exclusions():
        counts[ex.node] = counts.get(ex.node, 0) + 1
    seen = {node for at in store.attempts() for node in at.nodes}
    return concentration(counts, top_k, sorted(seen))


__all__ = ["NodeHealth", "exclusion_concentration", "incidents", "listed_state", "node_health",
           "untimed_xids"]
