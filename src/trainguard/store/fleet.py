"""Fleet state: node health, detector alerts and node exclusions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from trainguard.store import schema
from trainguard.store.codec import (
    alert_from_row,
    decode_row,
    decode_rows,
    exclusion_from_row,
    node_from_row,
)
from trainguard.store.core import StoreCore, insert_id
from trainguard.store.records import ALERT_KINDS, AlertRecord, ExclusionRecord, NodeRecord


class FleetMixin(StoreCore):
    """Store methods for nodes, alerts and exclusions."""

    # -- nodes -------------------------------------------------------------------------------

    def upsert_node(
        self,
        name: str,
        *,
        state: str | None = None,
        attrs: Mapping[str, Any] | None = None,
        seen: float | None = None,
    ) -> None:
        """Create or update a node. Arguments left as None keep their stored value;
        ``attrs`` replaces the stored attributes as a whole."""
        updates: dict[str, Any] = {}
        if state is not None:
            updates["state"] = state
        if attrs is not None:
            updates["attrs"] = dict(attrs)
        if seen is not None:
            updates["last_seen"] = seen
        with self._write("record node") as conn:
            insert = _upsert_insert(conn).values(name=name, first_seen=seen, **updates)
            if not updates:
                stmt = insert.on_conflict_do_nothing(index_elements=["name"])
            else:
                set_: dict[str, Any] = {key: insert.excluded[key] for key in updates}
                if seen is not None:
                    set_["first_seen"] = sa.func.coalesce(
                        schema.nodes.c.first_seen, insert.excluded.first_seen
                    )
                stmt = insert.on_conflict_do_update(index_elements=["name"], set_=set_)
            conn.execute(stmt)

    def nodes(self) -> list[NodeRecord]:
        t = schema.nodes
        with self._read("nodes") as conn:
            rows = conn.execute(sa.select(t).order_by(t.c.name)).all()
        return decode_rows("nodes", rows, node_from_row, self._warned)

    # -- alerts ------------------------------------------------------------------------------

    def add_alert(
        self,
        *,
        node: str,
        start: float,
        end: float | None,
        peak_score: float,
        kind: str,
        signals: Sequence[Mapping[str, Any]] = (),
        source: str = "detector",
    ) -> int:
        """Record a detector alert episode; ``kind`` is one of :data:`ALERT_KINDS`."""
        if kind not in ALERT_KINDS:
            raise ValueError(f"alert kind must be one of {', '.join(ALERT_KINDS)}, got {kind!r}")
        values = {
            "node": node,
            "kind": kind,
            "source": source,
            "started": start,
            "ended": end,
            "peak_score": peak_score,
            "signals": [dict(s) for s in signals],
        }
        with self._write("add alert") as conn:
            return insert_id(conn, schema.alerts, values)

    def alerts(self, *, node: str | None = None, since: float | None = None) -> list[AlertRecord]:
        """Alerts by start time; with ``since``, those still open or ended at/after it."""
        t = schema.alerts
        query = sa.select(t).order_by(t.c.started, t.c.id)
        if node is not None:
            query = query.where(t.c.node == node)
        if since is not None:
            query = query.where(sa.or_(t.c.ended.is_(None), t.c.ended >= since))
        with self._read("alerts") as conn:
            rows = conn.execute(query).all()
        return decode_rows("alerts", rows, alert_from_row, self._warned)

    def update_alert(self, alert_id: int, *, end: float | None, peak_score: float,
                     signals: Sequence[Mapping[str, Any]] | None = None) -> None:
        """Set an alert's end (None: open again), peak score and, if given, its signals."""
        t = schema.alerts
        values: dict[str, Any] = {"ended": end, "peak_score": peak_score}
        if signals is not None:
            values["signals"] = [dict(s) for s in signals]
        with self._write("update alert") as conn:
            self._update_one(conn, t.update().where(t.c.id == alert_id).values(**values),
                             "alert", alert_id)

    def find_alert(self, *, node: str, kind: str, start: float, source: str
                   ) -> AlertRecord | None:
        """The alert with exactly this node, kind, start and source (the watch service's key,
        so a restart does not add an alert twice), or None."""
        t = schema.alerts
        query = sa.select(t).where(t.c.node == node, t.c.kind == kind, t.c.started == start,
                                   t.c.source == source).order_by(t.c.id).limit(1)
        with self._read("alerts") as conn:
            row = conn.execute(query).first()
        return None if row is None else decode_row("alerts", row, alert_from_row, self._warned)

    # -- exclusions --------------------------------------------------------------------------

    def add_exclusion(
        self,
        node: str,
        *,
        reason: str,
        created: float,
        evidence: Sequence[str] = (),
        session_id: int | None = None,
        attempt_id: int | None = None,
        source: str = "supervisor",
    ) -> int:
        """Exclude ``node`` from scheduling until :meth:`release_exclusion`; returns the id."""
        values = {
            "node": node,
            "reason": reason,
            "source": source,
            "created": created,
            "session_id": session_id,
            "attempt_id": attempt_id,
            "evidence": list(evidence),
        }
        with self._write("add exclusion") as conn:
            return insert_id(conn, schema.exclusions, values)

    def release_exclusion(self, node: str, *, released: float) -> int:
        """Release every active exclusion of ``node``; returns how many were active."""
        t = schema.exclusions
        stmt = t.update().where(t.c.node == node, t.c.released.is_(None)).values(released=released)
        with self._write("release exclusion") as conn:
            return conn.execute(stmt).rowcount

    def release_session_exclusions(self, session_id: int, *, released: float) -> int:
        """Release the active exclusions one session made (a backend whose nodes do not outlive
        the session); returns how many."""
        t = schema.exclusions
        stmt = t.update().where(t.c.session_id == session_id, t.c.released.is_(None)) \
            .values(released=released)
        with self._write("release exclusions") as conn:
            return conn.execute(stmt).rowcount

    def exclusions(self, *, active_only: bool = False) -> list[ExclusionRecord]:
        t = schema.exclusions
        query = sa.select(t).order_by(t.c.created, t.c.id)
        if active_only:
            query = query.where(t.c.released.is_(None))
        with self._read("exclusions") as conn:
            rows = conn.execute(query).all()
        return decode_rows("exclusions", rows, exclusion_from_row, self._warned)

    def active_excluded_nodes(self) -> set[str]:
        t = schema.exclusions
        query = sa.select(t.c.node).where(t.c.released.is_(None)).distinct()
        with self._read("exclusions") as conn:
            return set(conn.execute(query).scalars())


def _upsert_insert(conn: Connection) -> sqlite.Insert | postgresql.Insert:
    if conn.dialect.name == "postgresql":
        return postgresql.insert(schema.nodes)
    return sqlite.insert(schema.nodes)


__all__ = ["FleetMixin"]
