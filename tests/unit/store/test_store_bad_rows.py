"""One corrupt JSON cell costs its row, never the command: ``report``, ``nodes`` and a run's start
(the exclusions it reads) skip the row with a warning naming its table and row.

Every JSON column of every table is corrupted in turn in a real SQLite store, once with text
that is not JSON and once with JSON of the wrong shape (what a PostgreSQL ``json`` column can
hold, see ``tests/integration/test_store_postgres_bad_rows.py``).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from store_bad_rows import (
    EXTRA_SHAPES,
    JSON_CELLS,
    SHAPES,
    assert_warned,
    corrupt_where,
    populate,
)
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.store import Store
from trainguard.store.schema import metadata

runner = CliRunner()


def test_every_json_column_is_covered() -> None:
    columns = {(t.name, c.name) for t in metadata.tables.values() for c in t.columns
               if c.type.__class__.__name__ in ("JSON", "TolerantJSON")}
    assert columns == {(table, column) for table, column, _ in JSON_CELLS}


def _corrupt(db: Path, table: str, column: str, value: str) -> str:
    key, where = corrupt_where(table)
    with sqlite3.connect(db) as conn:
        row = conn.execute(f"SELECT {key} FROM {table} ORDER BY {key} LIMIT 1").fetchone()
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE {where}", (value, row[0]))
    conn.close()
    return str(row[0])


@pytest.fixture
def store_db(tmp_path: Path) -> Path:
    db = tmp_path / "tg.db"
    with Store.open(str(db)) as store:
        populate(store)
    return db


_UNREAD = {("nodes", "sessions"), ("nodes", "fault_histories"), ("report", "fault_histories")}
"""(command, table) pairs where the command never reads the table: no warning expected."""

CASES = [(t, c, v) for t, c, _ in JSON_CELLS
         for v in ("{not json", "[" * 100_000, *SHAPES[(t, c)], *EXTRA_SHAPES.get((t, c), ()))]


@pytest.mark.parametrize(("table", "column", "value"), CASES,
                         ids=[f"{t}.{c}={v[:12]}" for t, c, v in CASES])
def test_report_and_nodes_skip_a_bad_row(store_db: Path, table: str, column: str, value: str,
                                         caplog: pytest.LogCaptureFixture) -> None:
    row = _corrupt(store_db, table, column, value)
    for args in (["report"], ["report", "--json"], ["nodes"], ["nodes", "--json"]):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="trainguard"):
            r = runner.invoke(app, [*args, "--db", str(store_db)])
        assert r.exit_code == 0, (args, r.output, r.exception)
        assert r.exception is None or isinstance(r.exception, SystemExit)
        if (args[0], table) not in _UNREAD:
            assert_warned(caplog, table, row)


@pytest.mark.parametrize(("table", "column", "value"), CASES,
                         ids=[f"{t}.{c}={v[:12]}" for t, c, v in CASES])
def test_store_reads_keep_the_good_rows(store_db: Path, table: str, column: str, value: str,
                                        caplog: pytest.LogCaptureFixture) -> None:
    row = _corrupt(store_db, table, column, value)
    with Store.open(str(store_db), readonly=True) as store, \
            caplog.at_level(logging.WARNING, logger="trainguard"):
        counts = {"nodes": len(store.nodes()), "sessions": len(store.sessions()),
                  "attempts": len(store.attempts()), "events": len(store.events()),
                  "alerts": len(store.alerts()), "exclusions": len(store.exclusions()),
                  "host_checks": len(store.host_checks()),
                  "fault_histories": len(store.fault_histories())}
        assert len(store.last_host_checks()) >= 1
    assert counts[table] == 1  # the good row of the two is kept, the bad one skipped
    assert_warned(caplog, table, row)


def test_run_start_ignores_another_nodes_bad_exclusion(
        store_db: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What ``run --db`` reads at start (``Store.open`` as a writer, then the active exclusions in
    ``recover.preflight.usable_nodes``): node-a's bad row is skipped, node-b stays excluded."""
    from trainguard.recover.preflight import usable_nodes

    row = _corrupt(store_db, "exclusions", "evidence", "{not json")

    class _Backend:
        def unavailable(self, nodes: object) -> dict[str, str]:
            return {}

    class _Spec:
        nodes = ("node-c", "node-b")
        spares = ("node-d",)
        min_nodes = None

    with Store.open(str(store_db)) as store, \
            caplog.at_level(logging.WARNING, logger="trainguard"):
        nodes, _spares, notes = usable_nodes(_Spec(), _Backend(), store)  # type: ignore[arg-type]
    assert nodes == ("node-c", "node-d")
    assert any("node-b is excluded (XID 79)" in n for n in notes)
    assert_warned(caplog, "exclusions", row)


def test_unreadable_event_enum_is_skipped(store_db: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    with sqlite3.connect(store_db) as conn:
        conn.execute("UPDATE events SET category = 'from_the_future' WHERE id = 1")
    conn.close()
    with Store.open(str(store_db), readonly=True) as store, \
            caplog.at_level(logging.WARNING, logger="trainguard"):
        assert len(store.events()) == 1
    assert_warned(caplog, "events", "1")


def test_a_cell_that_is_not_utf8_does_not_fail_the_query(
        store_db: Path, caplog: pytest.LogCaptureFixture) -> None:
    with sqlite3.connect(store_db) as conn:
        conn.execute("UPDATE exclusions SET evidence = CAST(X'5b22ff225d' AS TEXT) WHERE id = 1")
        conn.execute("UPDATE exclusions SET reason = CAST(X'41ff42' AS TEXT) WHERE id = 2")
        conn.execute("UPDATE events SET fields = CAST(X'ff' AS TEXT) WHERE id = 1")
    conn.close()
    with Store.open(str(store_db), readonly=True) as store, \
            caplog.at_level(logging.WARNING, logger="trainguard"):
        by_node = {e.node: e for e in store.exclusions()}
        assert by_node["node-a"].evidence == ("\ufffd",)
        assert by_node["node-b"].reason == "A\ufffdB"
        assert len(store.events()) == 1  # the other event row is not JSON: skipped
    assert_warned(caplog, "events", "1")
    for args in (["report", "--json"], ["nodes", "--json"]):
        r = runner.invoke(app, [*args, "--db", str(store_db)])
        assert r.exit_code == 0, (args, r.output, r.exception)


def test_a_bad_row_is_reported_once_per_store(store_db: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    _corrupt(store_db, "exclusions", "evidence", "{not json")
    with Store.open(str(store_db), readonly=True) as store, \
            caplog.at_level(logging.WARNING, logger="trainguard"):
        for _ in range(3):  # `nodes` reads the exclusions three times
            store.exclusions()
    assert sum("skipping exclusions row" in r.getMessage() for r in caplog.records) == 1
