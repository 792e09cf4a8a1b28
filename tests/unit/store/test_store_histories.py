"""Imported fault histories in a SQLite store (the same checks run on PostgreSQL in
tests/integration/test_store_postgres_histories.py), and what only SQLite shows: what the
commands that read trainguard's own record make of a store holding a history, and a bad row."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest
from history_store_contract import CHECKS, SAMPLE, Check, add, check_id
from store_bad_rows import assert_warned
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.errors import StoreError
from trainguard.store import Store

runner = CliRunner()


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_histories_sqlite(check: Check, tmp_path: Path) -> None:
    check(str(tmp_path / "trainguard.db"))


def test_in_memory_store(tmp_path: Path) -> None:
    with Store.open(":memory:") as store:
        hid = add(store, "trace")
        assert len(store.history_events(hid)) == len(SAMPLE)


@pytest.mark.parametrize("args", [["nodes", "--json"], ["report", "--json"], ["nodes"]])
def test_commands_on_trainguards_own_record_do_not_see_history_nodes(
        tmp_path: Path, args: list[str]) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as store:
        store.upsert_node("own-node", state="ok", seen=SAMPLE[0].start)
        add(store, "trace")
    r = runner.invoke(app, [*args, "--db", db])
    assert r.exit_code == 0, r.output
    if args[0] == "nodes":
        assert "own-node" in r.stdout
    assert "node-a" not in r.stdout and "node-b" not in r.stdout
    if args[-1] == "--json":
        json.loads(r.stdout)


def test_a_bad_fault_row_is_skipped_with_a_warning(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "tg.db"
    with Store.open(str(db)) as store:
        hid = add(store, "trace")
    with sqlite3.connect(db) as conn:  # not something trainguard writes: an end before the start
        bad = conn.execute("SELECT min(id) FROM history_faults").fetchone()[0]
        conn.execute("UPDATE history_faults SET ended = started - 1 WHERE id = ?", (bad,))
    conn.close()
    with Store.open(str(db), readonly=True) as store, \
            caplog.at_level(logging.WARNING, logger="trainguard"):
        assert len(store.history_events(hid)) == len(SAMPLE) - 1
        assert store.fault_history("trace").faults == len(SAMPLE)
    assert_warned(caplog, "history_faults", str(bad))


def test_an_unreadable_history_is_named(tmp_path: Path) -> None:
    db = tmp_path / "tg.db"
    with Store.open(str(db)) as store:
        add(store, "trace")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE fault_histories SET counts = '[1, 2]'")
    conn.close()
    with Store.open(str(db), readonly=True) as store, \
            pytest.raises(StoreError, match=r"fault history 'trace' in .* is unreadable: counts "
                                           "is not a JSON object"):
        store.fault_history("trace")
