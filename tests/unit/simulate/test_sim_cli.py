"""`trainguard simulate` on a local typer app: help, a small run, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from trainguard.cli.simulate import simulate

app = typer.Typer()
app.command("simulate")(simulate)
app.command("noop")(lambda: None)  # a second command keeps "simulate" as a sub-command
runner = CliRunner()


def test_help_lists_options() -> None:
    result = runner.invoke(app, ["simulate", "--help"])
    assert result.exit_code == 0
    for opt in ("--nodes", "--gpus-per-node", "--days", "--seed", "--out", "--interval",
                "--gzip", "--start", "--json", "--job-label"):
        assert opt in result.output


def test_small_run_json_summary(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = runner.invoke(app, ["simulate", "--nodes", "3", "--gpus-per-node", "2",
                                 "--days", "0.1", "--seed", "3", "--out", str(out),
                                 "--interval", "60", "--gzip", "--start",
                                 "2024-11-18T00:00:00Z", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["windows"] == 2 and summary["samples"] > 0
    assert sorted(p.name for p in (out / "metrics").iterdir()) == [
        "metrics-1731888000.om.gz", "metrics-1731895200.om.gz"]
    # a second run into the same directory is refused unless --overwrite
    again = runner.invoke(app, ["simulate", "--nodes", "3", "--days", "0.1", "--out", str(out)])
    assert again.exit_code == 2 and f"--out {out} is not empty (--overwrite replaces" in " ".join(
        again.output.split())
    ok = runner.invoke(app, ["simulate", "--nodes", "3", "--days", "0.1", "--out", str(out),
                             "--overwrite"])
    assert ok.exit_code == 0, ok.output
    assert "window file(s)" in ok.output


@pytest.mark.parametrize(("args", "message"), [
    (["--interval", "7"], "--interval must be"),
    (["--nodes", "0"], "--nodes must be"),
    (["--days", "-1"], "--days must be"),
    (["--gpus-per-node", "99"], "--gpus-per-node must be"),
    (["--failures-per-day", "-1"], "--failures-per-day must be"),
    (["--start", "yesterday"], "--start 'yesterday' is neither unix seconds"),
])
def test_bad_options_are_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["simulate", "--out", str(tmp_path / "x"), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "simulate." not in result.output  # the flag the user typed, not a config key
    assert "Traceback" not in result.output
    assert not (tmp_path / "x").exists()
