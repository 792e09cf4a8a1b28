"""Turning ``--db`` into a ready engine: URL resolution, driver setup and the schema check.

SQLite (the default) is tuned so a supervisor and a CLI can share one file: WAL journal, a busy
timeout, foreign keys on, and explicit ``BEGIN`` so transactions (and DDL) really are atomic;
writes use ``BEGIN IMMEDIATE`` so they wait for the write lock up front instead of failing on a
lock upgrade. PostgreSQL goes through psycopg 3, imported only when a PostgreSQL URL is used.

Opening checks the database before anything is written to it (`open_engine`):

1. a database with tables but no trainguard ``schema_version`` is another application's and is
   refused for every command ("PATH is not a trainguard store (it has tables: a, b)"), before
   the SQLite file is switched to WAL or a table is created;
2. a read-only open (``readonly=True``: report, nodes, advise) never creates a file, directory
   or table: a missing SQLite file is "no trainguard store at PATH", and SQLite connections are
   ``query_only`` (a write fails; SQLite still removes its -wal/-shm files on close, which a
   ``mode=ro`` connection would leave behind);
3. a ``schema_version`` that is not an integer, or newer/older than this trainguard's, is a
   `StoreError` / `SchemaVersionError`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from trainguard.errors import SchemaVersionError, StoreError
from trainguard.outdirs import MissingParent, make_dir
from trainguard.store import schema
from trainguard.store.jsoncell import lenient_json_loads

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


NO_STORE = "none"
"""``--db none`` (or ``$TRAINGUARD_DB=none``): no store. A SQLite file of that name is
``./none``."""


def _chosen(db: str | None) -> str:
    """The ``--db`` value in force: the flag, else ``$TRAINGUARD_DB``, else the default."""
    if db is None or not db.strip():
        return os.environ.get(DB_ENV, "").strip() or DEFAULT_DB
    return db


def wants_no_store(db: str | None) -> bool:
    """Whether ``--db`` (or, without it, ``$TRAINGUARD_DB``) is ``none``: the user asked for no
    store. Commands that can run without one (watch, run) then run without one.

        >>> wants_no_store("none"), wants_no_store("./none"), wants_no_store("tg.db")
        (True, False, False)
    """
    return _chosen(db).strip().lower() == NO_STORE


def resolve_db_url(db: str | None) -> str:
    """The SQLAlchemy URL for a ``--db`` value.

    ``None`` falls back to ``$TRAINGUARD_DB`` and then ``./trainguard.db``. A value containing
    ``://`` is a URL used as is, except that ``postgresql://`` (or ``postgres://``) without a
    driver gets psycopg 3. Anything else is a filesystem path to a SQLite file, except ``none``
    (see :func:`wants_no_store`): a command that gets this far needs a store, so ``none`` is a
    `StoreError`, never a SQLite file named ``none``.

        >>> resolve_db_url("postgresql://u@db/tg")
        'postgresql+psycopg://u@db/tg'
    """
    if wants_no_store(db):
        given = f"${DB_ENV}={NO_STORE}" if db is None or not db.strip() else f"--db {db.strip()}"
        raise StoreError(f"{given} means no event store, but this command needs one: give a "
                         "SQLite path (./none for a file of that name) or a postgresql:// URL")
    db = _chosen(db)
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


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: a non-numeric port
        raise StoreError(f"invalid database URL {display_url(url)!r}: {one_line(exc)}") from exc


def _sqlite_file(url: URL) -> str | None:
    """The file of a SQLite URL; None for an in-memory database."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return url.database


def store_name(url: str) -> str:
    """How messages name a store: the file of a SQLite store, else the URL, password masked."""
    try:
        path = _sqlite_file(make_url(url))
    except (ArgumentError, ValueError):
        path = None
    return path if path is not None else display_url(url)


def create_engine(url: str, *, readonly: bool = False) -> Engine:
    """An engine for ``url`` (as returned by :func:`resolve_db_url`); raises :class:`StoreError`.

    ``readonly``: a SQLite file must exist ("no trainguard store at PATH"), no directory is
    created, and every connection is ``query_only``; PostgreSQL sessions are read-only
    (``default_transaction_read_only``). A writer creates the SQLite file's own directory
    when missing, but no directory above it (`trainguard.outdirs`).
    """
    shown = display_url(url)
    parsed = _parse(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, shown, readonly)
    if backend == "postgresql":
        return _postgres_engine(parsed, shown, readonly)
    raise StoreError(f"unsupported database {shown}: trainguard stores in SQLite or PostgreSQL")


def _sqlite_engine(url: URL, shown: str, readonly: bool = False) -> Engine:
    path = _sqlite_file(url)
    if path is not None and readonly:
        # Connecting would create the file: a read-only command says there is none instead.
        if not os.path.exists(path):
            raise StoreError(f"no trainguard store at {path}")
        if not os.path.isfile(path):
            raise StoreError(f"no trainguard store at {path}: not a file")
    elif path is not None:
        # A store in a directory that does not exist yet (a fresh run dir) creates that one
        # directory; a path missing more than that is a typo and creates nothing.
        try:
            make_dir(Path(path).parent)
        except MissingParent as exc:
            raise StoreError(f"cannot create the store {path}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot create the directory of {shown}: "
                             f"{exc.strerror or exc}") from exc
    try:
        engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S},
                                 json_deserializer=lenient_json_loads)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise StoreError(f"cannot use {shown}: {one_line(exc)}") from exc

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from pysqlite, which would otherwise not BEGIN before
        # SELECTs or DDL; the "begin" hook below issues BEGIN itself. WAL is switched on by
        # ensure_schema, once the file is known to be a trainguard store (it is a property of
        # the file, not of a connection).
        dbapi_connection.isolation_level = None
        # A cell that is not UTF-8 (a corrupt file, another writer) reads with U+FFFD in place
        # of its bad bytes instead of failing the whole query.
        dbapi_connection.text_factory = _lenient_text
        cursor = dbapi_connection.cursor()
        try:
            if readonly:
                cursor.execute("PRAGMA query_only=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get(SQLITE_BEGIN_OPTION, "BEGIN"))

    return engine


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _postgres_engine(url: URL, shown: str, readonly: bool = False) -> Engine:
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
    if readonly and "options" not in url.query:
        # The server refuses any write in these sessions, as query_only does for SQLite. (A URL
        # that sets its own libpq options keeps them: merging option strings is not worth it.)
        connect_args["options"] = "-c default_transaction_read_only=on"
    try:
        # pre_ping: a long-lived supervisor survives a database restart.
        return sa.create_engine(url, connect_args=connect_args, pool_pre_ping=True,
                                json_deserializer=lenient_json_loads)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise StoreError(f"cannot use {shown}: {one_line(exc)}") from exc


def write_engine(engine: Engine) -> Engine:
    """A view of ``engine`` (same pool) whose SQLite transactions take the write lock at BEGIN."""
    if engine.dialect.name == "sqlite":
        return engine.execution_options(**{SQLITE_BEGIN_OPTION: "BEGIN IMMEDIATE"})
    return engine


def _names(tables: list[str], most: int = 10) -> str:
    shown = ", ".join(tables[:most])
    return shown + (f" and {len(tables) - most} more" if len(tables) > most else "")


def _existing_version(conn: Connection, where: str) -> int | None:
    """The database's trainguard schema version; None when it has no tables at all.

    Refuses another application's database (tables, but no ``schema_version``) and a version
    this trainguard cannot use.
    """
    found = _read_version(conn, where)
    if found is None:
        tables = sorted(sa.inspect(conn).get_table_names())
        if tables:
            raise StoreError(f"{where} is not a trainguard store (it has tables: "
                             f"{_names(tables)}); give the path of a trainguard store")
        return None
    if found > schema.SCHEMA_VERSION:
        raise SchemaVersionError(
            f"{where} has schema version {found}, newer than version "
            f"{schema.SCHEMA_VERSION} this trainguard supports; upgrade trainguard"
        )
    if found < schema.SCHEMA_VERSION:
        # No older versions exist yet; migrations go here when SCHEMA_VERSION moves.
        raise SchemaVersionError(
            f"{where} has schema version {found}, older than version "
            f"{schema.SCHEMA_VERSION} and no migration is known"
        )
    return found


def ensure_schema(engine: Engine, *, written_by: str, where: str | None = None) -> int:
    """Create the tables if absent and record :data:`schema.SCHEMA_VERSION`.

    Returns the database's schema version. Raises :class:`SchemaVersionError` when the database
    was written by a newer trainguard (or an older one this version cannot upgrade), and
    :class:`StoreError` when it cannot be reached or is not a trainguard store (it has other
    tables). `where` names the store in messages (default: its URL, password masked).
    """
    shown = engine.url.render_as_string(hide_password=True)
    where = where or shown
    try:
        with write_engine(engine).begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK_KEY)))
            found = _existing_version(conn, where)
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
        if engine.dialect.name == "sqlite" and engine.url.database not in (None, "", ":memory:"):
            _wal(engine)
        return schema.SCHEMA_VERSION
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open store {shown}: {one_line(exc)}") from exc


def _wal(engine: Engine) -> None:
    """Switch the (checked) SQLite file to WAL; outside a transaction, as SQLite requires."""
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
        finally:
            cursor.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {display_url(str(engine.url))}: "
                         f"{one_line(exc)}") from exc
    finally:
        raw.close()


def check_schema(engine: Engine, *, where: str | None = None) -> int:
    """The schema version of an existing store, for a read-only open: nothing is created.

    Raises :class:`StoreError` for an empty database ("no trainguard store at ...") or another
    application's, :class:`SchemaVersionError` for a version this trainguard cannot read.
    """
    shown = engine.url.render_as_string(hide_password=True)
    where = where or shown
    try:
        with engine.connect() as conn:
            found = _existing_version(conn, where)
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open store {where}: {one_line(exc)}") from exc
    if found is None:
        raise StoreError(f"no trainguard store at {where}: the database is empty (a read-only "
                         "command does not create one)")
    return found


def open_engine(db: str | None, *, readonly: bool, written_by: str) -> Engine:
    """An engine on the checked store named by ``db``.

    Writers create the store when the database is empty; ``readonly`` opens never create a
    file, directory or table. The engine is disposed of when the check fails.
    """
    url = resolve_db_url(db)
    where = store_name(url)
    engine = create_engine(url, readonly=readonly)
    try:
        if readonly:
            check_schema(engine, where=where)
        else:
            ensure_schema(engine, written_by=written_by, where=where)
    except BaseException:
        engine.dispose()
        raise
    return engine


def _read_version(conn: Connection, where: str) -> int | None:
    if not sa.inspect(conn).has_table(schema.schema_version.name):
        return None
    # Read the raw value: SQLite keeps whatever was stored ('abc', 1.5) in an INTEGER column.
    version = conn.execute(sa.text(f"SELECT max(version) FROM {schema.schema_version.name}"))\
        .scalar()
    if version is None:
        raise StoreError(f"{where} has an empty schema_version table; not a trainguard store")
    if isinstance(version, bool) or not isinstance(version, int):
        raise StoreError(f"{where} has schema version {version!r:.40}, not an integer: not a "
                         "trainguard store, or a damaged one")
    return version


__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "NO_STORE",
    "check_schema",
    "create_engine",
    "display_url",
    "ensure_schema",
    "one_line",
    "open_engine",
    "resolve_db_url",
    "store_name",
    "wants_no_store",
    "write_engine",
]
