"""Host checks: one row per host per check (``trainguard check``, a run's pre-flight and
stop-time checks, ``nodes release --verify``), with the findings and figures as evidence.

The table was added to schema version 1 without a bump: a writer's open creates it in an older
store, and a read-only open of a store that lacks it finds no checks (not an error).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from trainguard.check.model import Finding, Level
from trainguard.store import schema
from trainguard.store.codec import decode_rows, host_check_from_row
from trainguard.store.core import StoreCore
from trainguard.store.records import CHECK_CONTEXTS, HostCheckRecord

if TYPE_CHECKING:
    from trainguard.check.checker import CheckReport

def worst_reason(findings: Iterable[Finding], level: Level) -> str:
    """The reasons of the findings at the host's verdict ``level``, joined; empty for a pass."""
    if level is Level.PASS:
        return ""
    reasons = [f.reason for f in findings if f.level is level and f.reason]
    return "; ".join(dict.fromkeys(reasons))


def host_check_rows(report: CheckReport, *, context: str,
                    session_id: int | None) -> list[dict[str, Any]]:
    """The ``host_checks`` rows of one check: one per host of ``report``, in its order."""
    rows = []
    for host in report.hosts:
        findings = [f for f in report.findings if host in f.hosts]
        level = Level(report.verdicts.get(host, Level.PASS))
        rows.append({
            "host": host,
            "checked_at": report.started,
            "duration_s": max(0.0, report.duration_s),
            "level": level.value,
            "reason": worst_reason(findings, level),
            "context": context,
            "session_id": session_id,
            "findings": [f.to_dict() for f in findings],
            "figures": [r.to_dict() for r in report.results if r.host == host],
        })
    return rows


class ChecksMixin(StoreCore):
    """Store methods for host checks."""

    def add_host_checks(self, report: CheckReport, *, context: str = "check",
                        session_id: int | None = None) -> None:
        """Record one check: a row per host (its verdict, the worst findings' reasons, its
        findings and probe results), all in one transaction. ``context`` is one of
        :data:`~trainguard.store.records.CHECK_CONTEXTS`."""
        if context not in CHECK_CONTEXTS:
            raise ValueError(f"check context must be one of {', '.join(CHECK_CONTEXTS)}, "
                             f"got {context!r}")
        rows = host_check_rows(report, context=context, session_id=session_id)
        if not rows:
            return
        with self._write("record host checks") as conn:
            conn.execute(schema.host_checks.insert(), rows)

    def host_checks(self, *, host: str | None = None,
                    session_id: int | None = None) -> list[HostCheckRecord]:
        """Host-check rows, oldest check first; filtered by host and/or session."""
        t = schema.host_checks
        query = sa.select(t).order_by(t.c.checked_at, t.c.id)
        if host is not None:
            query = query.where(t.c.host == host)
        if session_id is not None:
            query = query.where(t.c.session_id == session_id)
        with self._read("host checks") as conn:
            if not _has_table(conn):
                return []
            rows = conn.execute(query).all()
        return decode_rows("host_checks", rows, host_check_from_row, self._warned)

    def last_host_checks(self) -> dict[str, HostCheckRecord]:
        """The newest check of each host (by check start, then by row id), by host name."""
        t = schema.host_checks
        newest = sa.select(t.c.host, sa.func.max(t.c.checked_at).label("at")) \
            .group_by(t.c.host).subquery()
        query = sa.select(t).join(newest, sa.and_(t.c.host == newest.c.host,
                                                  t.c.checked_at == newest.c.at)) \
            .order_by(t.c.host, t.c.id)
        with self._read("host checks") as conn:
            if not _has_table(conn):
                return {}
            rows = conn.execute(query).all()
        # Two checks that started at the same instant: the later row (higher id) wins.
        records = decode_rows("host_checks", rows, host_check_from_row, self._warned)
        return {rec.host: rec for rec in records}


def _has_table(conn: Connection) -> bool:
    """False for a store written before host checks existed, opened read-only."""
    return sa.inspect(conn).has_table(schema.host_checks.name)


__all__ = ["ChecksMixin", "host_check_rows", "worst_reason"]
