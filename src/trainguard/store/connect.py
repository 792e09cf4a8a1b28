"""Turning ``--db`` into a ready engine: URL resolution, driver setup and the schema check.

SQLite (the default) is tuned so a supervisor and a CLI can share one file: WAL journal, a busy
timeout, foreign keys on, and explicit ``BEGIN`` so transactions (and DDL) really are atomic;
writes use ``BEGIN IMMEDIATE`` so they wait for the write lock up front instead of failing on a
lock upgrade. PostgreSQL goes through psycopg 3, imported only when a PostgreSQL URL is used.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from trainguard.errors import SchemaVersionError, StoreError
from trainguard.store import schema

log = logging.getLogger(__name__)

DB_ENV = "TRAINGUARD_DB"
"""Environment variable naming the store when ``--db`` is not given."""
DEFAULT_DB = "./trainguard.db"

SQLITE_BUSY_TIMEOUT_S = 30.0
POSTGRES_CONNECT_TIMEOUT_S = 10
# Execution option read by the SQLite "begin" hook; the store's write engine sets it.
SQLITE_BEGIN_OPTION = "trainguard_sqlite_begin"
# Serializes schema creation between processes opening the same PostgreSQL database at once.
_PG_SCHEMA_LOCK_KEY = 0x7472_6E67  # "trng"


def resolve_db_url(db: str | None) -> str:
    """The SQLAlchemy URL for a ``--db`` value.

    ``None`` falls back to ``$TRAINGUARD_DB`` and then ``./trainguard.db``. A value containing
    ``://`` is a URL used as is, except that ``postgresql://`` (or ``postgres://``) without a
    driver gets psycopg 3. Anything else is a filesystem path to a SQLite file.

        >>> resolve_db_url("postgresql://u@db/tg")
        'postgresql+psycopg://u@db/tg'
    """
    if db is None or not db.strip():
        db = os.environ.get(DB_ENV, "").strip() or DEFAULT_DB
    if "://" in db:
        scheme, rest = db.split("://", 1)
        if scheme in ("postgresql", "postgres"):
            return f"postgresql+psycopg://{rest}"
        return db
    if db == ":memory:":
        return "sqlite://"
    path = os.path.abspath(os.path.expanduser(db))
    return URL.create("sqlite", database=path).render_as_string(hide_password=False)


def display_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, for messages and logs."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return url.split("://", 1)[0] + "://..." if "://" in url else url


def one_line(exc: BaseException) -> str:
    """A driver error as one readable line (no SQL echo, no 'background on this error' link)."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc)
    return " ".join(text.split()) or type(exc).__name__


def create_engine(url: str) -> Engine:
    """An engine for ``url`` (as returned by :func:`resolve_db_url`); raises :class:`StoreError`."""
    shown = display_url(url)
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a non-numeric port
        raise StoreError(f"invalid database URL {shown!r}: {one_line(exc)}") from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, shown)
    if backend == "postgresql":
        return _postgres_engine(parsed, shown)
    raise StoreError(f"unsupported database {shown}: trainguard stores in SQLite or PostgreSQL")


def _sqlite_engine(url: URL, shown: str) -> Engine:
    if url.database and url.database != ":memory:":
        # A store path inside a directory that does not exist yet (a fresh run dir): create it.
        parent = os.path.dirname(url.database)
        try:
            os.makedirs(parent or ".", exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory of {shown}: "
                             f"{exc.strerror or exc}") from exc
    try:
        engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
    except (ArgumentError, NoSuchModuleError) as exc:
        raise StoreError(f"cannot use {shown}: {one_line(exc)}") from exc

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite, which would otherwise not BEGIN before
        # SELECTs or DDL; the "begin" hook below issues BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "BEGIN"))

    return engine


def _postgres_engine(url: URL, shown: str) -> Engine:
    if url.get_driver_name() == "psycopg":
        try:
            importlib.import_module("psycopg")
        except ImportError as exc:
            raise StoreError(
                f"cannot use {shown}: PostgreSQL support needs psycopg; "
                "pip install 'trainguard[postgres]'"
            ) from exc
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S
    try:
        # pre_ping: a long-lived supervisor survives a database restart.
        return sa.create_engine(url, connect_args=connect_args, pool_pre_ping=True)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise StoreError(f"cannot use {shown}: {one_line(exc)}") from exc


def write_engine(engine: Engine) -> Engine:
    """A view of ``engine`` (same pool) whose SQLite transactions take the write lock at BEGIN."""
    if engine.dialect.name == "sqlite":
        return engine.execution_options(**{SQLITE_BEGIN_OPTION: "BEGIN IMMEDIATE"})
    return engine


def ensure_schema(engine: Engine, *, written_by: str) -> int:
    """Create the tables if absent and record :data:`schema.SCHEMA_VERSION`.

    Returns the database's schema version. Raises :class:`SchemaVersionError` when the database
    was written by a newer trainguard (or an older one this version cannot upgrade), and
    :class:`StoreError` when it cannot be reached or is not a trainguard store.
    """
    shown = engine.url.render_as_string(hide_password=True)
    try:
        with write_engine(engine).begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK_KEY)))
            found = _read_version(conn, shown)
            if found is None:
                ours = set(schema.metadata.tables) - {schema.schema_version.name}
                present = ours & set(sa.inspect(conn).get_table_names())
                if present:
                    raise StoreError(
                        f"{shown} has tables {', '.join(sorted(present))} but no trainguard "
                        "schema version; it is not a trainguard store"
                    )
            elif found > schema.SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"{shown} has schema version {found}, newer than version "
                    f"{schema.SCHEMA_VERSION} this trainguard supports; upgrade trainguard"
                )
            elif found < schema.SCHEMA_VERSION:
                # No older versions exist yet; migrations go here when SCHEMA_VERSION moves.
                raise SchemaVersionError(
                    f"{shown} has schema version {found}, older than version "
                    f"{schema.SCHEMA_VERSION} and no migration is known"
                )
            schema.metadata.create_all(conn, checkfirst=True)
            if found is None:
                conn.execute(
                    schema.schema_version.insert().values(
                        id=1,
                        version=schema.SCHEMA_VERSION,
                        written=time.time(),
                        written_by=written_by,
                    )
                )
                log.info("created trainguard store %s (schema %d)", shown, schema.SCHEMA_VERSION)
            return schema.SCHEMA_VERSION
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open store {shown}: {one_line(exc)}") from exc


def _read_version(conn: Connection, shown: str) -> int | None:
    if not sa.inspect(conn).has_table(schema.schema_version.name):
        return None
    version = conn.execute(sa.select(sa.func.max(schema.schema_version.c.version))).scalar()
    if version is None:
        raise StoreError(f"{shown} has an empty schema_version table; not a trainguard store")
    return int(version)


__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "create_engine",
    "display_url",
    "ensure_schema",
    "one_line",
    "resolve_db_url",
    "write_engine",
]
