"""Imported fault histories: a cluster's fault record read from elsewhere (a ticket system, a
repair log, a public trace), kept apart from what trainguard observed itself.

A history is one ``fault_histories`` row (its name, source, window, fleet size and import counts)
and its faults in ``history_faults``. Nothing that reads trainguard's own record (events, nodes,
alerts, exclusions, runs) reads these tables; :mod:`trainguard.fleet` analyses them.

The tables were added to schema version 1 without a bump: a writer's open creates them in an
older store, and a read-only open of a store that lacks them finds no histories (not an error).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from trainguard.errors import FleetError, StoreError
from trainguard.fleet.events import FaultEvent, FleetWindow, check_fleet_size
from trainguard.store import schema
from trainguard.store.codec import (
    decode_rows,
    fault_history_from_row,
    history_fault_from_row,
    history_fault_to_row,
)
from trainguard.store.core import StoreCore, insert_id, json_obj
from trainguard.store.records import FaultHistoryRecord

_NAMES_SHOWN = 20
"""How many history names an "unknown history" error lists."""


class HistoryExists(StoreError):
    """A fault history of that name is already in the store (and ``replace`` was not asked)."""


class UnknownHistory(StoreError):
    """No fault history of that name or id in the store (the message lists those there are)."""


def check_history(name: str, *, fleet_size: int, window_start: float, window_end: float,
                  origin: float | None, nodes: Sequence[str]) -> None:
    """Raise `FleetError` (bad window, fleet size or origin) or `StoreError` (no name) for a
    history the store must not hold; more nodes with faults than the fleet has is refused."""

    if not name.strip():
        raise StoreError("a fault history needs a name")
    if isinstance(fleet_size, bool) or not isinstance(fleet_size, int):
        raise FleetError(f"fleet size must be a whole number of nodes, got {fleet_size!r}")
    window = FleetWindow(window_start, window_end, fleet_size)
    if origin is not None and not math.isfinite(origin):
        raise FleetError(f"time origin must be a finite unix time, got {origin}")
    check_fleet_size(nodes, window)


def _history_query() -> sa.Select[Any]:
    """Histories with their fault counts, newest import first."""
    t, f = schema.fault_histories, schema.history_faults
    count = sa.select(sa.func.count()).select_from(f).where(f.c.history_id == t.c.id) \
        .scalar_subquery().label("faults")
    return sa.select(t, count).order_by(t.c.imported.desc(), t.c.id.desc())


def _has_tables(conn: Connection) -> bool:
    """False for a store written before histories existed, opened read-only."""
    inspector = sa.inspect(conn)
    return all(inspector.has_table(t.name)
               for t in (schema.fault_histories, schema.history_faults))


class HistoriesMixin(StoreCore):
    """Store methods for imported fault histories."""

    def add_fault_history(
        self,
        name: str,
        *,
        source: str,
        fmt: str,
        fleet_size: int,
        window_start: float,
        window_end: float,
        origin: float | None,
        counts: Mapping[str, Any],
        meta: Mapping[str, Any],
        faults: Sequence[tuple[FaultEvent, int | None]],
        replace: bool = False,
        imported: float | None = None,
    ) -> int:
        """Store a history and its faults (each with its source line, or None) in one
        transaction; returns its id.

        A history of the same name is `HistoryExists`, unless ``replace``: then it and its
        faults are deleted in the same transaction. ``imported`` defaults to now. The window
        and fleet size are checked as :class:`~trainguard.fleet.FleetWindow` does, and faults
        on more distinct nodes than ``fleet_size`` are refused (`FleetError`).
        """
        check_history(name, fleet_size=fleet_size, window_start=window_start,
                      window_end=window_end, origin=origin,
                      nodes=[ev.node for ev, _line in faults])
        values = {
            "name": name,
            "source": source,
            "fmt": fmt,
            "fleet_size": fleet_size,
            "window_start": window_start,
            "window_end": window_end,
            "origin": origin,
            "imported": time.time() if imported is None else imported,
            "counts": json_obj(counts),
            "meta": json_obj(meta),
        }
        t = schema.fault_histories
        with self._write("import fault history") as conn:
            old = conn.execute(sa.select(t.c.id).where(t.c.name == name)).scalar()
            if old is not None and not replace:
                raise self._exists(name)
            if old is not None:
                conn.execute(t.delete().where(t.c.id == old))  # its faults go by cascade
            try:
                history_id = insert_id(conn, t, values)
            except IntegrityError as exc:  # the same name imported at the same moment
                raise self._exists(name) from exc
            rows = [history_fault_to_row(history_id, ev, line) for ev, line in faults]
            if rows:
                conn.execute(schema.history_faults.insert(), rows)
        return history_id

    def fault_histories(self) -> list[FaultHistoryRecord]:
        """Every imported history, newest import first."""
        with self._read("fault histories") as conn:
            if not _has_tables(conn):
                return []
            rows = conn.execute(_history_query()).all()
        return decode_rows("fault_histories", rows, fault_history_from_row, self._warned)

    def fault_history(self, name_or_id: str | None) -> FaultHistoryRecord:
        """The history of that name (else, for a number, of that id); None: the newest import.

        `UnknownHistory`, listing the names there are, when there is no such history.
        """
        with self._read("fault histories") as conn:
            row = self._find(conn, name_or_id)
        try:
            return fault_history_from_row(row)
        except StoreError as exc:
            raise StoreError(f"fault history {row.name!r} in {self.url} is unreadable: "
                             f"{exc}") from exc

    def history_events(self, history_id: int) -> list[FaultEvent]:
        """The faults of a history, by node then start time."""
        return [ev for ev, _line in self.history_faults(history_id)]

    def history_faults(self, history_id: int) -> list[tuple[FaultEvent, int | None]]:
        """The faults of a history with the source line of each, by node then start time.

        `UnknownHistory` for an id that is not in the store. A row that is not a valid fault
        is skipped with one warning (as every store reader does).
        """
        f = schema.history_faults
        query = sa.select(f).where(f.c.history_id == history_id) \
            .order_by(f.c.node, f.c.started, f.c.id)
        with self._read("history faults") as conn:
            self._find_id(conn, history_id)
            rows = conn.execute(query).all()
        return decode_rows("history_faults", rows,
                           history_fault_from_row, self._warned)

    def delete_fault_history(self, name: str) -> int:
        """Delete a history (by name, else for a number by id) and its faults; returns how many
        faults went with it. `UnknownHistory` when there is no such history."""
        t, f = schema.fault_histories, schema.history_faults
        with self._write("delete fault history") as conn:
            row = self._find(conn, name)
            deleted = conn.execute(sa.select(sa.func.count()).select_from(f)
                                   .where(f.c.history_id == row.id)).scalar_one()
            conn.execute(t.delete().where(t.c.id == row.id))  # its faults go by cascade
        return int(deleted)

    # -- lookups -----------------------------------------------------------------------------

    def _exists(self, name: str) -> HistoryExists:
        return HistoryExists(f"a fault history named {name!r} is already in {self.url}: pass "
                             "--replace to replace it, or give another --name")

    def _find(self, conn: Connection, name_or_id: str | None) -> Any:
        """The row (with its fault count) of a history by name, then id; None: the newest."""
        if not _has_tables(conn):
            raise self._unknown(name_or_id, [])
        t = schema.fault_histories
        query = _history_query()
        if name_or_id is None:
            row = conn.execute(query.limit(1)).first()
        else:
            row = conn.execute(query.where(t.c.name == name_or_id)).first()
            key = name_or_id.strip()
            if row is None and key.isascii() and key.isdigit() and len(key) <= 18:  # an id
                row = conn.execute(query.where(t.c.id == int(key))).first()
        if row is None:
            names = list(conn.execute(sa.select(t.c.name).order_by(t.c.imported.desc(),
                                                                   t.c.id.desc())).scalars())
            raise self._unknown(name_or_id, names)
        return row

    def _find_id(self, conn: Connection, history_id: int) -> None:
        t = schema.fault_histories
        if not _has_tables(conn) or conn.execute(
                sa.select(t.c.id).where(t.c.id == history_id)).first() is None:
            raise UnknownHistory(f"no fault history with id {history_id} in {self.url}")

    def _unknown(self, name_or_id: str | None, names: Sequence[str]) -> UnknownHistory:
        if not names:
            return UnknownHistory(f"no fault histories in {self.url}: import one with "
                                  "`trainguard history import`")
        shown = ", ".join(names[:_NAMES_SHOWN])
        if len(names) > _NAMES_SHOWN:
            shown += f" and {len(names) - _NAMES_SHOWN} more"
        return UnknownHistory(f"no fault history {name_or_id!r} in {self.url}; it has: {shown}")


__all__ = ["HistoriesMixin", "HistoryExists", "UnknownHistory", "check_history"]
