"""Conversions between table rows and trainguard's frozen dataclasses.

Failure events are stored column by column so they can be queried; ``fields`` keeps its order and
duplicate keys as a JSON list of ``[key, value]`` pairs and evidence lines as a list of objects,
so that ``event_from_row(event_to_row(ev))`` == ``ev`` exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainguard.errors import StoreError
from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.store.records import (
    AlertRecord,
    AttemptRecord,
    CheckpointRecord,
    ExclusionRecord,
    HostCheckRecord,
    NodeRecord,
    SessionRecord,
)
from trainguard.taxonomy import Action, Category, Severity


def event_to_row(
    ev: FailureEvent, *, session_id: int | None = None, attempt_id: int | None = None
) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "attempt_id": attempt_id,
        "category": ev.category.value,
        "action": ev.action.value,
        "severity": ev.severity.value,
        "signature": ev.signature,
        "summary": ev.summary,
        "time": ev.time,
        "time_kind": ev.time_kind.value,
        "host": ev.host,
        "gpu_pci": ev.gpu_pci,
        "gpu_index": ev.gpu_index,
        "rank": ev.rank,
        "xid": ev.xid,
        "caused_by_xid": ev.caused_by_xid,
        "confidence": ev.confidence,
        "fields": [[key, value] for key, value in ev.fields],
        "evidence": [
            {"path": line.path, "line_no": line.line_no, "text": line.text} for line in ev.evidence
        ],
    }


def event_from_row(r: Any) -> FailureEvent:
    try:
        return FailureEvent(
            category=Category(r.category),
            action=Action(r.action),
            severity=Severity(r.severity),
            signature=r.signature,
            summary=r.summary,
            time=r.time,
            time_kind=TimeKind(r.time_kind),
            host=r.host,
            gpu_pci=r.gpu_pci,
            gpu_index=r.gpu_index,
            rank=r.rank,
            xid=r.xid,
            caused_by_xid=r.caused_by_xid,
            confidence=r.confidence,
            fields=tuple((str(k), str(v)) for k, v in r.fields or ()),
            evidence=tuple(
                EvidenceLine(path=e["path"], line_no=int(e["line_no"]), text=e["text"])
                for e in r.evidence or ()
            ),
        )
    except (ValueError, KeyError, TypeError) as exc:
        # An enum value this trainguard does not know, or a payload it did not write.
        raise StoreError(f"event {getattr(r, 'id', None)} cannot be read: {exc}") from exc


def node_from_row(r: Any) -> NodeRecord:
    return NodeRecord(
        name=r.name,
        state=r.state,
        attrs=r.attrs or {},
        first_seen=r.first_seen,
        last_seen=r.last_seen,
    )


def session_from_row(r: Any) -> SessionRecord:
    return SessionRecord(
        id=r.id,
        name=r.name,
        backend=r.backend,
        external_id=r.external_id,
        status=r.status,
        started=r.started,
        ended=r.ended,
        config=r.config or {},
    )


def attempt_from_row(r: Any, *, nodes: Sequence[str], excluded: Sequence[str]) -> AttemptRecord:
    return AttemptRecord(
        id=r.id,
        session_id=r.session_id,
        index=r.attempt_index,
        nodes=tuple(nodes),
        started=r.started,
        ended=r.ended,
        status=r.status,
        automatic=bool(r.automatic),
        resumed_from_step=r.resumed_from_step,
        failure_category=r.failure_category,
        decision=r.decision,
        excluded_nodes=tuple(excluded),
        exit_codes=r.exit_codes or {},
        startup_phases=r.startup_phases or {},
        evidence=tuple(r.evidence or ()),
        detail=r.detail or {},
    )


def alert_from_row(r: Any) -> AlertRecord:
    return AlertRecord(
        id=r.id,
        node=r.node,
        start=r.started,
        end=r.ended,
        peak_score=r.peak_score,
        kind=r.kind,
        signals=tuple(r.signals or ()),
        source=r.source,
    )


def exclusion_from_row(r: Any) -> ExclusionRecord:
    return ExclusionRecord(
        id=r.id,
        node=r.node,
        reason=r.reason,
        source=r.source,
        created=r.created,
        released=r.released,
        evidence=tuple(r.evidence or ()),
        session_id=r.session_id,
        attempt_id=r.attempt_id,
    )


def checkpoint_from_row(r: Any) -> CheckpointRecord:
    return CheckpointRecord(
        id=r.id,
        session_id=r.session_id,
        attempt_id=r.attempt_id,
        step=r.step,
        path=r.path,
        created=r.created,
        size_bytes=r.size_bytes,
        save_s=r.save_s,
        blocking_s=r.blocking_s,
        ok=bool(r.ok),
    )


def host_check_from_row(r: Any) -> HostCheckRecord:
    return HostCheckRecord(
        id=r.id,
        host=r.host,
        checked_at=r.checked_at,
        duration_s=r.duration_s,
        level=r.level,
        reason=r.reason,
        context=r.context,
        session_id=r.session_id,
        findings=tuple(r.findings or ()),
        figures=tuple(r.figures or ()),
    )


__all__ = [
    "alert_from_row",
    "attempt_from_row",
    "checkpoint_from_row",
    "event_from_row",
    "event_to_row",
    "exclusion_from_row",
    "host_check_from_row",
    "node_from_row",
    "session_from_row",
]
