"""Every command's ``--help`` reads as plain terminal text: no reStructuredText markup such as
``double backticks`` (issue #18: a docstring written for Sphinx, shown verbatim)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from trainguard.cli.main import app

runner = CliRunner()
_RST = re.compile(r"``|:(?:func|class|meth|mod|attr|data):`")


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        if not cmd.hidden:
            found += _commands(cmd, (*path, name))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def test_the_walk_finds_the_commands() -> None:
    assert ("diagnose", "hang") in COMMANDS and ("xid", "explain") in COMMANDS
    assert len(COMMANDS) > 20


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "trainguard")
def test_help_has_no_rst_markup(path: tuple[str, ...]) -> None:
    r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    found = _RST.findall(r.output)
    assert not found, f"{' '.join(path)} --help shows {found}:\n{r.output}"
