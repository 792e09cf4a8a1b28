"""`trainguard report` in the terminal: the summary shows the badput breakdown docs/report.md
promises, bad input is exit 2, and the help text reflows (no hard line breaks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from report_job import job
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.report.summary import badput_parts
from trainguard.store import Store

runner = CliRunner()


@pytest.mark.parametrize("sdk", [True, False])
def test_terminal_summary_has_badput_breakdown(tmp_path: Path, sdk: bool) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as store:
        rep = job(store, gap_s=2.0, sdk=sdk)
    result = runner.invoke(app, ["report", "--db", db])
    assert result.exit_code == 0, result.output
    parts = badput_parts(rep.goodput)
    assert len(parts) >= 3
    for label, _ in parts:
        assert label in result.output
    assert ("unknown (no SDK)" in result.output) is not sdk


def test_unknown_session_is_input_error(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as store:
        job(store, gap_s=1.0)
    result = runner.invoke(app, ["report", "--db", db, "--session", "99"])
    assert result.exit_code == 2
    assert "no session with id 99" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", [["report"], ["advise", "checkpoint-interval"]])
def test_help_paragraphs_reflow(command: list[str]) -> None:
    # so wide that a paragraph fits on one line: any break inside one is a hard line break
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "1000"},
                           terminal_width=1000)
    assert result.exit_code == 0
    lines = [ln.strip() for ln in result.output.splitlines()]
    text = [ln for ln in lines if ln and not ln.startswith(("Usage:", "╭", "│", "╰"))]
    for ln in text:
        assert re.search(r"[.:)]$", ln), f"a paragraph breaks mid-sentence: {ln!r}"


def test_html_to_a_mistyped_tree_creates_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as store:
        job(store, gap_s=1.0)
    typo = tmp_path / "nonexistent" / "dir" / "report.html"
    result = runner.invoke(app, ["report", "--db", db, "--html", str(typo)])
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not (tmp_path / "nonexistent").exists()
    fresh = tmp_path / "out" / "report.html"  # its own directory is created
    result = runner.invoke(app, ["report", "--db", db, "--html", str(fresh)])
    assert result.exit_code == 0, result.output
    assert fresh.stat().st_size > 0
