"""Job history: sessions (a training job), attempts (one launch), failure events, checkpoints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.store import schema
from trainguard.store.codec import (
    attempt_from_row,
    checkpoint_from_row,
    decode_rows,
    event_from_row,
    event_to_row,
    session_from_row,
)
from trainguard.store.core import StoreCore, insert_id, json_obj
from trainguard.store.records import AttemptRecord, CheckpointRecord, SessionRecord

RUNNING = "running"
"""Status of a session or attempt until it is finished."""
_MEMBER, _EXCLUDED = "member", "excluded"  # attempt_nodes.role


class RunsMixin(StoreCore):
    """Store methods for sessions, attempts, events and checkpoints."""

    # -- sessions and attempts ---------------------------------------------------------------

    def create_session(
        self,
        name: str,
        *,
        backend: str,
        started: float,
        config: Mapping[str, Any] | None = None,
        external_id: str | None = None,
    ) -> int:
        """Record a new training job (status ``running``); returns its id."""
        values = {
            "name": name,
            "backend": backend,
            "external_id": external_id,
            "status": RUNNING,
            "started": started,
            "config": json_obj(config),
        }
        with self._write("create session") as conn:
            return insert_id(conn, schema.sessions, values)

    def finish_session(self, session_id: int, *, status: str, ended: float) -> None:
        t = schema.sessions
        stmt = t.update().where(t.c.id == session_id).values(status=status, ended=ended)
        with self._write("finish session") as conn:
            self._update_one(conn, stmt, "session", session_id)

    def sessions(self, *, since: float | None = None) -> list[SessionRecord]:
        """Sessions oldest first; with ``since``, those still running or ended at/after it."""
        t = schema.sessions
        query = sa.select(t).order_by(t.c.started, t.c.id)
        if since is not None:
            query = query.where(sa.or_(t.c.ended.is_(None), t.c.ended >= since))
        with self._read("sessions") as conn:
            rows = conn.execute(query).all()
        return decode_rows("sessions", rows, session_from_row, self._warned)

    def create_attempt(
        self,
        session_id: int,
        *,
        index: int,
        nodes: Sequence[str],
        started: float,
        automatic: bool = True,
        resumed_from_step: int | None = None,
    ) -> int:
        """Record launch number ``index`` of a session on ``nodes``; returns its id."""
        values = {
            "session_id": session_id,
            "attempt_index": index,
            "automatic": automatic,
            "status": RUNNING,
            "started": started,
            "resumed_from_step": resumed_from_step,
        }
        with self._write("create attempt") as conn:
            attempt_id = insert_id(conn, schema.attempts, values)
            _insert_attempt_nodes(conn, attempt_id, _MEMBER, nodes)
            return attempt_id

    def finish_attempt(
        self,
        attempt_id: int,
        *,
        ended: float,
        status: str,
        failure_category: str | None = None,
        decision: str | None = None,
        excluded_nodes: Sequence[str] = (),
        exit_codes: Mapping[str, int | None] | None = None,
        startup_phases: Mapping[str, float] | None = None,
        evidence: Sequence[str] = (),
        detail: Mapping[str, Any] | None = None,
        resumed_from_step: int | None = None,
    ) -> None:
        """Record how an attempt ended and what the supervisor decided. ``resumed_from_step``
        (known once the job has loaded its checkpoint) replaces the value given at creation."""
        t = schema.attempts
        extra = {} if resumed_from_step is None else {"resumed_from_step": resumed_from_step}
        stmt = (
            t.update()
            .where(t.c.id == attempt_id)
            .values(
                **extra,
                ended=ended,
                status=status,
                failure_category=failure_category,
                decision=decision,
                exit_codes=json_obj(exit_codes),
                startup_phases=json_obj(startup_phases),
                evidence=list(evidence),
                detail=json_obj(detail),
            )
        )
        an = schema.attempt_nodes
        with self._write("finish attempt") as conn:
            self._update_one(conn, stmt, "attempt", attempt_id)
            conn.execute(an.delete().where(an.c.attempt_id == attempt_id, an.c.role == _EXCLUDED))
            _insert_attempt_nodes(conn, attempt_id, _EXCLUDED, excluded_nodes)

    def attempts(self, session_id: int | None = None) -> list[AttemptRecord]:
        """Attempts by session, then launch index."""
        t, an = schema.attempts, schema.attempt_nodes
        query = sa.select(t).order_by(t.c.session_id, t.c.attempt_index)
        node_query = sa.select(an).order_by(an.c.attempt_id, an.c.role, an.c.position)
        if session_id is not None:
            query = query.where(t.c.session_id == session_id)
            ids = sa.select(t.c.id).where(t.c.session_id == session_id)
            node_query = node_query.where(an.c.attempt_id.in_(ids.scalar_subquery()))
        with self._read("attempts") as conn:
            rows = conn.execute(query).all()
            node_rows = conn.execute(node_query).all()
        members: dict[tuple[int, str], list[str]] = {}
        for nr in node_rows:
            members.setdefault((nr.attempt_id, nr.role), []).append(nr.node)
        return decode_rows("attempts", rows, lambda r: attempt_from_row(
            r,
            nodes=members.get((r.id, _MEMBER), ()),
            excluded=members.get((r.id, _EXCLUDED), ()),
        ), self._warned)

    # -- failure events ----------------------------------------------------------------------

    def add_events(
        self,
        events: Iterable[FailureEvent],
        *,
        session_id: int | None = None,
        attempt_id: int | None = None,
    ) -> int:
        """Insert events in one transaction; returns how many."""
        rows = [event_to_row(ev, session_id=session_id, attempt_id=attempt_id) for ev in events]
        if rows:
            with self._write("add events") as conn:
                conn.execute(schema.events.insert(), rows)
        return len(rows)

    def events(
        self,
        *,
        host: str | None = None,
        since: float | None = None,
        session_id: int | None = None,
        attempt_id: int | None = None,
        category: str | None = None,
    ) -> list[FailureEvent]:
        """Events in insertion order. ``since`` (unix seconds) keeps only events with an
        absolute time at or after it: boot-relative times cannot be compared."""
        t = schema.events
        query = sa.select(t).order_by(t.c.id)
        if host is not None:
            query = query.where(t.c.host == host)
        if since is not None:
            query = query.where(t.c.time_kind == TimeKind.ABSOLUTE.value, t.c.time >= since)
        if session_id is not None:
            query = query.where(t.c.session_id == session_id)
        if attempt_id is not None:
            query = query.where(t.c.attempt_id == attempt_id)
        if category is not None:
            query = query.where(t.c.category == category)
        with self._read("events") as conn:
            rows = conn.execute(query).all()
        return decode_rows("events", rows, event_from_row, self._warned)

    # -- checkpoints -------------------------------------------------------------------------

    def add_checkpoint(
        self,
        *,
        session_id: int | None,
        attempt_id: int | None,
        step: int,
        path: str,
        created: float,
        size_bytes: int | None = None,
        save_s: float | None = None,
        blocking_s: float | None = None,
        ok: bool = True,
    ) -> int:
        values = {
            "session_id": session_id,
            "attempt_id": attempt_id,
            "step": step,
            "path": path,
            "created": created,
            "size_bytes": size_bytes,
            "save_s": save_s,
            "blocking_s": blocking_s,
            "ok": ok,
        }
        with self._write("add checkpoint") as conn:
            return insert_id(conn, schema.checkpoints, values)

    def checkpoints(self, session_id: int | None = None) -> list[CheckpointRecord]:
        """Checkpoints by creation time."""
        t = schema.checkpoints
        query = sa.select(t).order_by(t.c.created, t.c.id)
        if session_id is not None:
            query = query.where(t.c.session_id == session_id)
        with self._read("checkpoints") as conn:
            rows = conn.execute(query).all()
        return [checkpoint_from_row(r) for r in rows]


def _insert_attempt_nodes(
    conn: Connection, attempt_id: int, role: str, node_names: Sequence[str]
) -> None:
    if node_names:
        conn.execute(
            schema.attempt_nodes.insert(),
            [
                {"attempt_id": attempt_id, "role": role, "position": i, "node": name}
                for i, name in enumerate(node_names)
            ],
        )


__all__ = ["RUNNING", "RunsMixin"]
