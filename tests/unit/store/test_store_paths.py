"""A mistyped store path creates nothing: readers refuse a missing store (exit 2, one line),
writers create only the store file's own directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from trainguard.cli.main import app
from trainguard.errors import StoreError
from trainguard.outdirs import MissingParent, make_dir, missing_levels
from trainguard.store import Store

runner = CliRunner()

READERS = [["report"], ["report", "--json"], ["nodes"], ["nodes", "--json"],
           ["advise", "checkpoint-interval"]]
WRITERS = [["nodes", "exclude", "node7", "--reason", "XID 79"], ["nodes", "release", "node7"]]


def one_error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return " ".join(result.stderr.split())


@pytest.mark.parametrize("depth", [0, 1, 3])
@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_reader_on_a_missing_store_exits_2_and_creates_nothing(tmp_path: Path, depth: int,
                                                               command: list[str]) -> None:
    parent = tmp_path.joinpath(*[f"d{i}" for i in range(depth)])
    db = parent / "tg.db"
    result = runner.invoke(app, [*command, "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert f"no trainguard store at {db}" in one_error_line(result)
    assert result.stdout == ""  # no empty report
    assert list(tmp_path.iterdir()) == []
    assert not db.exists()


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_reader_on_a_directory_exits_2(tmp_path: Path, command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--db", str(tmp_path)])
    assert result.exit_code == 2
    assert "not a file" in one_error_line(result)


@pytest.mark.parametrize("command", WRITERS, ids=" ".join)
def test_writer_with_two_missing_levels_exits_2_and_creates_nothing(tmp_path: Path,
                                                                    command: list[str]) -> None:
    db = tmp_path / "nonexist" / "a" / "b.db"
    result = runner.invoke(app, [*command, "--db", str(db)])
    assert result.exit_code == 2
    line = one_error_line(result)
    assert f"{tmp_path / 'nonexist'} does not exist" in line
    assert list(tmp_path.iterdir()) == []


def test_writer_creates_the_store_files_own_directory(tmp_path: Path) -> None:
    db = tmp_path / "x" / "new.db"
    result = runner.invoke(app, [*WRITERS[0], "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert db.is_file()
    listed = runner.invoke(app, ["nodes", "--json", "--db", str(db)])
    assert listed.exit_code == 0 and "node7" in listed.stdout


def test_store_open_refuses_a_missing_grandparent(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"cannot create the store .*b\.db: .*nonexist does "
                                         r"not exist"):
        Store.open(str(tmp_path / "nonexist" / "a" / "b.db"))
    assert list(tmp_path.iterdir()) == []
    Store.open(str(tmp_path / "x" / "new.db")).close()
    assert (tmp_path / "x" / "new.db").is_file()


def test_store_under_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(StoreError, match="not a directory"):
        Store.open(str(tmp_path / "f" / "tg.db"))


def test_make_dir_levels(tmp_path: Path) -> None:
    assert missing_levels(tmp_path) == []
    assert missing_levels(tmp_path / "a" / "b") == [tmp_path / "a", tmp_path / "a" / "b"]
    with pytest.raises(MissingParent):
        make_dir(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()
    make_dir(tmp_path / "a" / "b", max_new=2)
    assert (tmp_path / "a" / "b").is_dir()
    make_dir(tmp_path / "a" / "b")  # exists: nothing to do
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        make_dir(tmp_path / "file")
