"""Conversions between table rows and trainguard's frozen dataclasses.

Failure events are stored column by column so they can be queried; ``fields`` keeps its order and
duplicate keys as a JSON list of ``[key, value]`` pairs and evidence lines as a list of objects,
so that ``event_from_row(event_to_row(ev))`` == ``ev`` exactly.

A row from the store is input like any other: a JSON cell that is not JSON (the engines read
JSON with :func:`~trainguard.store.jsoncell.lenient_json_loads`, which gives
:data:`~trainguard.store.jsoncell.UNREADABLE` instead of raising), has the
wrong shape, or an enum value this trainguard does not know makes its ``*_from_row`` raise
:class:`BadRow`; :func:`decode_rows` skips such a row with one warning naming its table and row,
so one bad row never costs a whole report, node list or run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from trainguard.errors import FleetError, StoreError
from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.fleet.events import FaultEvent
from trainguard.store.jsoncell import UNREADABLE
from trainguard.store.records import (
    AlertRecord,
    AttemptRecord,
    CheckpointRecord,
    ExclusionRecord,
    FaultHistoryRecord,
    HostCheckRecord,
    NodeRecord,
    SessionRecord,
)
from trainguard.taxonomy import Action, Category, Severity

log = logging.getLogger(__name__)

T = TypeVar("T")


class BadRow(StoreError):
    """A row that cannot be turned into its record: the reason names the column (caught by
    :func:`decode_row`, which skips the row)."""


_WARNED_MAX = 10_000


def decode_row(table: str, r: Any, from_row: Callable[[Any], T],
               warned: set[tuple[str, object]] | None = None) -> T | None:
    """``from_row(r)``, or None with a warning naming the table and the row's key; with
    ``warned`` (a store's own set), once per row, however often a command reads the table."""
    try:
        return from_row(r)
    except BadRow as exc:
        key = getattr(r, "name", None) if table == "nodes" else getattr(r, "id", None)
        if warned is None or (table, key) not in warned:
            if warned is not None and len(warned) < _WARNED_MAX:
                warned.add((table, key))
            log.warning("store: skipping %s row %s: %s", table, key, exc)
        return None


def decode_rows(table: str, rows: Iterable[Any], from_row: Callable[[Any], T],
                warned: set[tuple[str, object]] | None = None) -> list[T]:
    """The records of the rows that decode (see :func:`decode_row`), in order."""
    return [rec for r in rows if (rec := decode_row(table, r, from_row, warned)) is not None]


def _cell(r: Any, column: str) -> Any:
    value = getattr(r, column)
    if value is UNREADABLE:
        raise BadRow(f"{column} is not valid JSON")
    return value


def _object(r: Any, column: str) -> dict[str, Any]:
    value = _cell(r, column)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRow(f"{column} is not a JSON object")
    return value


def _list(r: Any, column: str) -> list[Any]:
    value = _cell(r, column)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRow(f"{column} is not a JSON list")
    return value


def _strings(r: Any, column: str) -> tuple[str, ...]:
    values = _list(r, column)
    if not all(isinstance(v, str) for v in values):
        raise BadRow(f"{column} is not a list of strings")
    return tuple(values)


def _objects(r: Any, column: str) -> tuple[Mapping[str, Any], ...]:
    values = _list(r, column)
    if not all(isinstance(v, dict) for v in values):
        raise BadRow(f"{column} is not a list of JSON objects")
    return tuple(values)


def _detail(r: Any) -> dict[str, Any]:
    """``detail``, whose ``failure`` (the supervisor's, read by analytics and node health) must
    be an object with string ``category``/``kind``/``summary`` and a list of node names."""
    detail = _object(r, "detail")
    failure = detail.get("failure")
    if failure is None:
        return detail
    if not isinstance(failure, dict):
        raise BadRow("detail.failure is not a JSON object")
    for key in ("category", "kind", "summary"):
        if not isinstance(failure.get(key, ""), (str, type(None))):
            raise BadRow(f"detail.failure.{key} is not a string")
    culprits = failure.get("culprit_nodes")
    if culprits is not None and not (isinstance(culprits, list)
                                     and all(isinstance(n, str) for n in culprits)):
        raise BadRow("detail.failure.culprit_nodes is not a list of node names")
    return detail


def _exit_codes(r: Any) -> dict[str, int | None]:
    codes = _object(r, "exit_codes")
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool))
               for v in codes.values()):
        raise BadRow("exit_codes has a value that is not an integer or null")
    return codes


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
    """The event of an ``events`` row; :class:`BadRow` for one this trainguard cannot read."""
    pairs = _list(r, "fields")
    lines = _objects(r, "evidence")
    try:
        if not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise ValueError("fields is not a list of [key, value] pairs")
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
            fields=tuple((str(k), str(v)) for k, v in pairs),
            evidence=tuple(
                EvidenceLine(path=str(e["path"]), line_no=int(e["line_no"]), text=str(e["text"]))
                for e in lines
            ),
        )
    except (ValueError, KeyError, TypeError) as exc:
        # An enum value this trainguard does not know, or a payload it did not write.
        raise BadRow(str(exc)) from exc


def node_from_row(r: Any) -> NodeRecord:
    return NodeRecord(
        name=r.name,
        state=r.state,
        attrs=_object(r, "attrs"),
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
        config=_object(r, "config"),
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
        exit_codes=_exit_codes(r),
        startup_phases=_object(r, "startup_phases"),
        evidence=_strings(r, "evidence"),
        detail=_detail(r),
    )


def alert_from_row(r: Any) -> AlertRecord:
    return AlertRecord(
        id=r.id,
        node=r.node,
        start=r.started,
        end=r.ended,
        peak_score=r.peak_score,
        kind=r.kind,
        signals=_objects(r, "signals"),
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
        evidence=_strings(r, "evidence"),
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
        findings=_objects(r, "findings"),
        figures=_objects(r, "figures"),
    )


def fault_history_from_row(r: Any) -> FaultHistoryRecord:
    """A ``fault_histories`` row, with its fault count selected as ``faults``."""
    return FaultHistoryRecord(
        id=r.id,
        name=r.name,
        source=r.source,
        fmt=r.fmt,
        fleet_size=r.fleet_size,
        window_start=r.window_start,
        window_end=r.window_end,
        origin=r.origin,
        imported=r.imported,
        counts=_object(r, "counts"),
        meta=_object(r, "meta"),
        faults=int(r.faults),
    )


def history_fault_to_row(history_id: int, ev: FaultEvent, line: int | None) -> dict[str, Any]:
    return {
        "history_id": history_id,
        "node": ev.node,
        "started": ev.start,
        "ended": ev.end,
        "kind": ev.kind,
        "category": ev.category,
        "line": line,
    }


def history_fault_from_row(r: Any) -> tuple[FaultEvent, int | None]:
    """The fault of a ``history_faults`` row and its source line; :class:`BadRow` for one that
    is not a valid fault (no node, an end before its start: not something trainguard wrote).
    """
    try:
        return FaultEvent(node=r.node, start=r.started, end=r.ended, kind=r.kind,
                          category=r.category), r.line
    except FleetError as exc:
        raise BadRow(str(exc)) from exc


__all__ = [
    "BadRow",
    "alert_from_row",
    "attempt_from_row",
    "checkpoint_from_row",
    "decode_row",
    "decode_rows",
    "event_from_row",
    "event_to_row",
    "exclusion_from_row",
    "fault_history_from_row",
    "history_fault_from_row",
    "history_fault_to_row",
    "host_check_from_row",
    "node_from_row",
    "session_from_row",
]
