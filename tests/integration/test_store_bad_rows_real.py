"""A bad store row on a real PostgreSQL server and under a real ``trainguard run --db``: the row
is skipped with a warning naming its table and row, and the command does its work.
(Every JSON cell on SQLite: ``tests/unit/store/test_store_bad_rows.py``.)"""

from __future__ import annotations

import json
import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from store_bad_rows import assert_warned, populate
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.store import Store, resolve_db_url

pytestmark = pytest.mark.integration

runner = CliRunner()


@pytest.mark.parametrize(("table", "column", "value"), [
    ("exclusions", "evidence", '{"not": "a list"}'),
    ("attempts", "detail", "[1, 2]"),
])
def test_postgres_wrong_shape_json_cell_is_skipped(
        fresh_postgres_url: str, table: str, column: str, value: str,
        caplog: pytest.LogCaptureFixture) -> None:
    # PostgreSQL checks that a json cell is JSON, so what can go wrong there is its shape.
    with Store.open(fresh_postgres_url) as store:
        populate(store)
    engine = sa.create_engine(resolve_db_url(fresh_postgres_url))
    try:
        with engine.begin() as conn:
            row = conn.execute(sa.text(f"SELECT min(id) FROM {table}")).scalar_one()
            conn.execute(sa.text(f"UPDATE {table} SET {column} = CAST(:v AS json) WHERE id = :id"),
                         {"v": value, "id": row})
    finally:
        engine.dispose()
    for args in (["report", "--json"], ["nodes", "--json"]):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="trainguard"):
            r = runner.invoke(app, [*args, "--db", fresh_postgres_url])
        assert r.exit_code == 0, (args, r.output, r.exception)
        json.loads(r.stdout)
        assert_warned(caplog, table, str(row))
    with Store.open(fresh_postgres_url, readonly=True) as store:
        assert {e.node for e in store.exclusions(active_only=True)} >= {"node-b"}


def test_run_db_starts_despite_another_nodes_bad_exclusion(tmp_path: Path) -> None:
    db = tmp_path / "tg.db"
    with Store.open(str(db)) as store:
        populate(store)  # node-a (row 1) and node-b (row 2) are excluded
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE exclusions SET evidence = '{not json' WHERE id = 1")
    conn.close()
    cmd = [sys.executable, "-m", "trainguard.cli.main", "run", "--run-dir", str(tmp_path / "run"),
           "--db", str(db), "--nodes", "node1", "--max-retries", "0", "--",
           sys.executable, "-c", "print('trained')"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "skipping exclusions row 1: evidence is not valid JSON" in proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
