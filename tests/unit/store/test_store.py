from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from store_contract import CHECKS, T0, Check, check_id, full_event

import trainguard.store
from trainguard.errors import SchemaVersionError, StoreError
from trainguard.store import SCHEMA_VERSION, Store, resolve_db_url
from trainguard.store.connect import create_engine, display_url


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_contract_sqlite(check: Check, tmp_path: Path) -> None:
    check(str(tmp_path / "trainguard.db"))


def test_exported_names_import() -> None:
    for name in trainguard.store.__all__:
        assert getattr(trainguard.store, name) is not None


# -- resolve_db_url ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("db", "expected"),
    [
        ("postgresql://u:pw@db.example:5432/tg", "postgresql+psycopg://u:pw@db.example:5432/tg"),
        ("postgres://u@db/tg", "postgresql+psycopg://u@db/tg"),
        ("postgresql+psycopg://u@db/tg", "postgresql+psycopg://u@db/tg"),
        ("postgresql+psycopg2://u@db/tg", "postgresql+psycopg2://u@db/tg"),
        ("sqlite:////var/lib/tg.db", "sqlite:////var/lib/tg.db"),
        ("/var/lib/trainguard/tg.db", "sqlite:////var/lib/trainguard/tg.db"),
        (":memory:", "sqlite://"),
    ],
)
def test_resolve_db_url(db: str, expected: str) -> None:
    assert resolve_db_url(db) == expected


def test_resolve_db_url_relative_path_is_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_db_url("runs/tg.db") == f"sqlite:///{tmp_path}/runs/tg.db"


def test_resolve_db_url_default_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINGUARD_DB", raising=False)
    assert resolve_db_url(None) == f"sqlite:///{tmp_path}/trainguard.db"
    monkeypatch.setenv("TRAINGUARD_DB", "postgresql://tg@db/tg")
    assert resolve_db_url(None) == "postgresql+psycopg://tg@db/tg"
    assert resolve_db_url("local.db") == f"sqlite:///{tmp_path}/local.db"  # --db wins
    monkeypatch.setenv("TRAINGUARD_DB", "")
    assert resolve_db_url(None) == f"sqlite:///{tmp_path}/trainguard.db"


def test_open_default_creates_file_in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINGUARD_DB", raising=False)
    with Store.open() as store:
        assert store.backend == "sqlite"
        assert store.url == f"sqlite:///{tmp_path}/trainguard.db"
    assert (tmp_path / "trainguard.db").is_file()


# -- SQLite specifics --------------------------------------------------------------------------


def test_sqlite_uses_wal_and_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "tg.db"
    with Store.open(str(path)) as store:
        store.upsert_node("n1")
        engine = create_engine(store.url)
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        engine.dispose()
    # WAL is a property of the file: a plain sqlite3 connection sees it too.
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_memory_store() -> None:
    with Store.open(":memory:") as store:
        store.add_events([full_event()])
        assert store.events() == [full_event()]


# -- errors ------------------------------------------------------------------------------------


def test_missing_directory_is_created(tmp_path: Path) -> None:
    # Only the file's own directory (a fresh run dir); deeper: tests/unit/store/test_store_paths
    path = tmp_path / "run" / "tg.db"
    with Store.open(str(path)) as store:
        assert store.sessions() == []
    assert path.exists()


def test_directory_under_a_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match=r"cannot create the directory of sqlite:///"):
        Store.open(str(tmp_path / "file" / "sub" / "tg.db"))


def test_directory_as_database_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open store"):
        Store.open(str(tmp_path))


def test_unwritable_directory_is_a_store_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root ignores permission bits; /proc refuses new files even to root
        if not Path("/proc/self").is_dir():
            pytest.skip("running as root and no /proc to stand in for an unwritable directory")
        locked = Path("/proc")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
    with pytest.raises(StoreError, match=r"cannot open store .*: unable to open database file"):
        Store.open(str(locked / "trainguard-test.db"))


def test_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("this is not sqlite\n" * 100)
    with pytest.raises(StoreError, match="file is not a database"):
        Store.open(str(path))


def test_foreign_tables_without_version_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE events (x INTEGER)")
    with pytest.raises(StoreError, match=r"other.db is not a trainguard store \(it has "
                                         r"tables: events\)"):
        Store.open(str(path))


def test_older_schema_without_migration_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tg.db"
    Store.open(str(path)).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION - 1,))
    with pytest.raises(SchemaVersionError, match=f"schema version {SCHEMA_VERSION - 1}, older"):
        Store.open(str(path))


def test_newer_schema_message_names_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "tg.db"
    Store.open(str(path)).close()
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaVersionError) as info:
        Store.open(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert f"version {SCHEMA_VERSION + 1}" in message
    assert f"version {SCHEMA_VERSION} this trainguard supports" in message


def test_unreadable_event_row_is_skipped_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # issue 26: one bad row costs that row, never the whole query (tests/unit/store/
    # test_store_bad_rows.py covers every JSON cell)
    path = tmp_path / "tg.db"
    with Store.open(str(path)) as store:
        store.add_events([full_event(), full_event(rank=3)])
        with sqlite3.connect(path) as raw:
            raw.execute("UPDATE events SET category = 'from_the_future' WHERE id = 1")
        with caplog.at_level("WARNING", logger="trainguard.store"):
            assert [ev.rank for ev in store.events()] == [3]
    assert "skipping events row 1: 'from_the_future' is not a valid Category" in caplog.text


def test_unreachable_postgres_is_one_line_store_error() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError) as info:
        Store.open("postgresql://tg:secret@127.0.0.1:1/tg")
    message = str(info.value)
    assert message.startswith("cannot open store postgresql+psycopg://tg:***@127.0.0.1:1/tg: ")
    assert "\n" not in message
    assert "secret" not in message


def test_missing_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # makes `import psycopg` fail
    with pytest.raises(StoreError, match=r"pip install 'trainguard\[postgres\]'"):
        Store.open("postgresql://tg@db.invalid/tg")


@pytest.mark.parametrize(
    ("db", "match"),
    [
        ("mysql://u@db/tg", "unsupported database mysql://u@db/tg"),
        ("sqlite+nosuchdriver:///x.db", "cannot use sqlite"),
        ("postgresql+psycopg://u@db:notaport/tg", "invalid database URL"),
    ],
)
def test_bad_urls_are_store_errors(db: str, match: str) -> None:
    with pytest.raises(StoreError, match=match):
        Store.open(db)


# -- password masking --------------------------------------------------------------------------


def test_url_masks_password() -> None:
    url = resolve_db_url("postgresql://tg:s3cr3t@db.example:5432/tg")
    store = Store(create_engine(url))  # no connection is made
    assert store.url == "postgresql+psycopg://tg:***@db.example:5432/tg"
    assert "s3cr3t" not in repr(store)
    store.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://tg:pw@h/db", "postgresql+psycopg://tg:***@h/db"),
        ("postgresql+psycopg://tg@h/db", "postgresql+psycopg://tg@h/db"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
    ],
)
def test_display_url(url: str, shown: str) -> None:
    assert display_url(url) == shown


def test_writes_roll_back_on_error(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "tg.db")) as store:
        sid = store.create_session("job", backend="local", started=T0)
        store.create_attempt(sid, index=0, nodes=["a"], started=T0)
        with pytest.raises(StoreError):
            store.create_attempt(sid, index=0, nodes=["b", "c"], started=T0)
        engine = sa.create_engine(resolve_db_url(str(tmp_path / "tg.db")))
        with engine.connect() as conn:
            nodes = conn.execute(sa.text("SELECT node FROM attempt_nodes")).scalars().all()
        engine.dispose()
        assert nodes == ["a"]
