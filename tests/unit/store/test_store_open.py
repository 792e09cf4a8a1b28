"""Opening the store never harms what it opens: read-only commands create nothing, another
application's database is refused untouched by every command, a damaged version is one line."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from trainguard.cli.main import app
from trainguard.errors import StoreError
from trainguard.store import SCHEMA_VERSION, Store

runner = CliRunner()


def foreign_db(path: Path) -> Path:
    """Another application's SQLite file (rollback journal, two tables, a row)."""
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        raw.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER)")
        raw.execute("INSERT INTO users (name) VALUES ('ada')")
    raw.close()
    return path


def fingerprint(directory: Path) -> dict[str, str]:
    """Every file under `directory` with a hash of its bytes."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def one_error_line(result: Result) -> str:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return " ".join(result.stderr.split())


READERS = [["report"], ["report", "--json"], ["nodes"], ["nodes", "--json"],
           ["advise", "checkpoint-interval"]]
WRITERS = [["nodes", "exclude", "node7", "--reason", "XID 79"], ["nodes", "release", "node7"]]


@pytest.mark.parametrize("command", READERS + WRITERS, ids=" ".join)
def test_another_applications_database_is_refused_untouched(tmp_path: Path,
                                                            command: list[str]) -> None:
    db = foreign_db(tmp_path / "app.db")
    before = fingerprint(tmp_path)
    message = one_error_line(runner.invoke(app, [*command, "--db", str(db)]))
    assert f"{db} is not a trainguard store (it has tables: orders, users)" in message
    assert fingerprint(tmp_path) == before  # no table, no WAL switch, no -wal/-shm file
    with sqlite3.connect(db) as raw:
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master")}
    raw.close()
    assert tables == {"users", "orders"}


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_read_only_command_on_a_missing_store_creates_nothing(tmp_path: Path,
                                                              command: list[str]) -> None:
    db = tmp_path / "no" / "such" / "tg.db"
    message = one_error_line(runner.invoke(app, [*command, "--db", str(db)]))
    assert f"no trainguard store at {db}" in message
    assert list(tmp_path.iterdir()) == []


def test_read_only_open_of_an_empty_file_creates_no_table(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    with pytest.raises(StoreError,
                       match=r"no trainguard store at .*empty.db: the database is empty"):
        Store.open(str(db), readonly=True)
    assert db.read_bytes() == b""


def test_read_only_open_reads_and_refuses_writes(tmp_path: Path) -> None:
    db = tmp_path / "tg.db"
    with Store.open(str(db)) as store:
        store.upsert_node("node7", state="ok", seen=1.0)
    before = fingerprint(tmp_path)
    with Store.open(str(db), readonly=True) as store:
        assert store.url == f"sqlite:///{db}"
        assert store.schema_version() == SCHEMA_VERSION
        assert [n.name for n in store.nodes()] == ["node7"]
        with pytest.raises(StoreError, match=r"record node in .*: the store was opened "
                                             "read-only"):
            store.upsert_node("node8")
        store._readonly = False  # past the guard, SQLite itself refuses (query_only)
        with pytest.raises(StoreError, match="attempt to write a readonly database"):
            store.upsert_node("node8")
    assert fingerprint(tmp_path) == before


def test_read_only_open_of_a_path_with_uri_characters(tmp_path: Path) -> None:
    db = tmp_path / "a dir?x=1#frag" / "tg%20.db"
    db.parent.mkdir()
    Store.open(str(db)).close()
    with Store.open(str(db), readonly=True) as store:
        assert store.nodes() == []


@pytest.mark.parametrize("readonly", [False, True])
@pytest.mark.parametrize("version", ["'abc'", "1.5", "''"])
def test_non_integer_schema_version_is_a_store_error(tmp_path: Path, readonly: bool,
                                                     version: str) -> None:
    db = tmp_path / "tg.db"
    Store.open(str(db)).close()
    with sqlite3.connect(db) as raw:
        raw.execute(f"UPDATE schema_version SET version = {version}")
    raw.close()
    with pytest.raises(StoreError, match=r"tg.db has schema version .*, not an integer"):
        Store.open(str(db), readonly=readonly)


def test_non_integer_schema_version_through_the_cli(tmp_path: Path) -> None:
    db = tmp_path / "tg.db"
    Store.open(str(db)).close()
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE schema_version SET version = 'abc'")
    raw.close()
    message = one_error_line(runner.invoke(app, ["report", "--db", str(db)]))
    assert "has schema version 'abc', not an integer" in message


def test_many_foreign_tables_stay_one_short_line(tmp_path: Path) -> None:
    db = tmp_path / "big.db"
    with sqlite3.connect(db) as raw:
        for i in range(30):
            raw.execute(f"CREATE TABLE t{i:02d} (x INTEGER)")
    raw.close()
    with pytest.raises(StoreError, match=r"\(it has tables: t00, .*, t09 and 20 more\)"):
        Store.open(str(db))
