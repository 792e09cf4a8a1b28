"""`trainguard slurm import-history`, invoked on the sub-app (main.py registers it)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trainguard.cli.slurm import app
from trainguard.store import Store

DATA = Path(__file__).resolve().parents[3] / "data" / "slurm"
runner = CliRunner()


def test_help() -> None:
    result = runner.invoke(app, ["import-history", "--help"])
    assert result.exit_code == 0
    for option in ("--jobcomp", "--squeue", "--sacct", "--db", "--json"):
        assert option in result.output


def test_import_jobcomp_file(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    args = ["import-history", "--jobcomp", str(DATA / "jobcomp.txt"), "--db", db]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert first.output.startswith(f"jobcomp {DATA / 'jobcomp.txt'}: 10 jobs; imported 10, ")
    second = runner.invoke(app, [*args, "--json"])
    assert second.exit_code == 0, second.output
    doc = json.loads(second.output)
    assert {k: doc[k] for k in ("source", "jobs", "records", "imported", "skipped", "updated")} == {
        "source": "jobcomp", "jobs": 10, "records": 11, "imported": 0, "skipped": 10,
        "updated": 0}
    with Store.open(db) as store:
        assert sorted(s.name for s in store.sessions())[:2] == ["big", "cancel-job"]


def test_missing_jobcomp_file_is_one_error_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["import-history", "--jobcomp", str(tmp_path / "nope.txt"),
                                 "--db", str(tmp_path / "tg.db")])
    assert result.exit_code == 2
    assert "error: cannot read jobcomp file" in result.output
    assert "Traceback" not in result.output


def test_one_source_only(tmp_path: Path) -> None:
    result = runner.invoke(app, ["import-history", "--squeue", "--sacct",
                                 "--db", str(tmp_path / "tg.db")])
    assert result.exit_code == 2
    assert "choose one source" in result.output
