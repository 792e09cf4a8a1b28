"""The store's plumbing: engine ownership, transactions and error wrapping.

:class:`StoreCore` is the base the table-group mixins (:mod:`.runs`, :mod:`.fleet`) build on; the
public class is :class:`trainguard.store.Store`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from trainguard.errors import StoreError
from trainguard.store import schema
from trainguard.store.connect import one_line, write_engine


class StoreCore:
    """Owns the engine; every public method runs in its own short transaction."""

    def __init__(self, engine: Engine, *, readonly: bool = False) -> None:
        """Wrap an engine whose schema is already checked; use ``Store.open`` instead.

        ``readonly``: every write raises `StoreError` before it reaches the database.
        """
        self._engine = engine
        self._writer = write_engine(engine)
        self._readonly = readonly
        self._warned: set[tuple[str, object]] = set()
        """Rows already reported as unreadable (``codec.decode_row``): one warning each."""

    @property
    def url(self) -> str:
        """The database URL with any password masked, for display."""
        return self._engine.url.render_as_string(hide_password=True)

    @property
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._engine.dialect.name

    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        query = sa.select(sa.func.max(schema.schema_version.c.version))
        with self._read("schema version") as conn:
            return int(conn.execute(query).scalar_one())

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def _write(self, what: str) -> Iterator[Connection]:
        if self._readonly:
            raise StoreError(f"cannot {what} in {self.url}: the store was opened read-only")
        try:
            with self._writer.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot {what} in {self.url}: {one_line(exc)}") from exc

    @contextmanager
    def _read(self, what: str) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read {what} from {self.url}: {one_line(exc)}") from exc

    def _update_one(self, conn: Connection, stmt: sa.Update, what: str, key: int) -> None:
        if conn.execute(stmt).rowcount == 0:
            raise StoreError(f"no {what} with id {key} in {self.url}")


def json_obj(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


def insert_id(conn: Connection, table: sa.Table, values: Mapping[str, Any]) -> int:
    key = conn.execute(table.insert().values(**values)).inserted_primary_key
    if key is None:  # pragma: no cover - both backends report it for single-row inserts
        raise StoreError(f"database did not return the id of the new {table.name} row")
    return int(key[0])


__all__ = ["StoreCore"]
