"""`--db none` (or `$TRAINGUARD_DB=none`) means no store: a command that can run without one
runs without one, a command that needs one says so in one line; neither creates a SQLite file
named `none` (one was committed by accident, issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.errors import StoreError
from trainguard.store import Store, resolve_db_url, wants_no_store


@pytest.mark.parametrize(("db", "env", "none"), [
    ("none", None, True), (" NONE ", None, True), (None, "none", True), ("", "none", True),
    ("./none", None, False), ("none.db", None, False), (None, None, False),
    ("tg.db", "none", False),  # the flag wins over the environment
])
def test_which_values_mean_no_store(db: str | None, env: str | None, none: bool,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if env is None:
        monkeypatch.delenv("TRAINGUARD_DB", raising=False)
    else:
        monkeypatch.setenv("TRAINGUARD_DB", env)
    assert wants_no_store(db) is none


@pytest.mark.parametrize(("db", "env", "named"), [
    ("none", None, "--db none"), (None, "none", "$TRAINGUARD_DB=none")])
def test_a_store_that_is_none_is_refused_not_created(
        db: str | None, env: str | None, named: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if env is None:
        monkeypatch.delenv("TRAINGUARD_DB", raising=False)
    else:
        monkeypatch.setenv("TRAINGUARD_DB", env)
    with pytest.raises(StoreError, match=f"^{named.replace('$', '[$]')} means no event store"):
        resolve_db_url(db)
    with pytest.raises(StoreError, match="needs one"):
        Store.open(db)
    assert list(tmp_path.iterdir()) == []


def test_a_file_named_none_is_still_reachable(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_db_url("./none") == f"sqlite:///{tmp_path}/none"


@pytest.mark.parametrize("args", [
    ["nodes", "exclude", "node7", "--reason", "XID 79", "--db", "none"],  # writes the store
    ["report", "--db", "none"],                                         # reads it
])
def test_commands_that_need_a_store_refuse_none_in_one_line(
        args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--db none means no event store" in lines[0], result.output
    assert list(tmp_path.iterdir()) == []


def test_run_with_db_none_runs_without_a_store(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINGUARD_DB", raising=False)
    result = CliRunner().invoke(app, ["run", "--db", "none", "--nodes", "a", "--no-agents",
                                      "--run-dir", str(tmp_path / "run"), "--", "true"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no ./none, no ./trainguard.db


def test_logs_with_db_none_records_nothing(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "kern.log"
    log.write_text("Nov 18 00:42:00 node01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, "
                   "GPU has fallen off the bus.\n")
    result = CliRunner().invoke(app, ["logs", "classify", str(log), "--db", "none"])
    assert result.exit_code == 0, result.output
    assert "Xid" in result.output or "79" in result.output
    assert "recorded" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kern.log"]
