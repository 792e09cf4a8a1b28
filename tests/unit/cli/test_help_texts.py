"""Help texts read as prose on any terminal width (no hard line breaks in mid-sentence), and
every `--flag` they mention exists on the command they name.

Typer's rich help joins the single line breaks of a command's *first* paragraph only; the
later ones keep the source's breaks unless the text is reflowed (`cli.helptext`).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from trainguard.cli.helptext import reflow
from trainguard.cli.main import app

_FLAG = re.compile(r"(?:trainguard ([a-z][a-z-]*) )?(--[a-z][a-z0-9-]*)")


def _walk(group: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    found = {path: group}
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        if not cmd.hidden:
            found.update(_walk(cmd, (*path, name)))
    return found


ALL = _walk(typer.main.get_command(app))
CHECKED = [p for p in ALL if p]
"""Every command and group (the help of each is reflowed centrally in ``cli.main``)."""


def _commands() -> dict[str, Any]:
    return dict(getattr(typer.main.get_command(app), "commands", {}))


def _options(command: Any) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("path", CHECKED, ids=" ".join)
def test_every_paragraph_of_the_help_is_one_line_on_a_wide_terminal(
        path: tuple[str, ...]) -> None:
    help_text = (ALL[path].help or "").replace("\\[", "[")  # shown without Rich's escapes
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(help_text).split("\n\n")
                  if not p.startswith("\b") and not any(
                      line[:1].isspace() for line in p.splitlines())]
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.split()) for line in result.stdout.splitlines()]
    for paragraph in paragraphs:
        assert any(paragraph in line for line in lines), (paragraph, result.stdout)


@pytest.mark.parametrize("name", ["watch", "detect", "backtest", "report"])
def test_every_flag_a_help_text_mentions_exists(name: str) -> None:
    commands = _commands()
    command = commands[name]
    texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
    mentioned = [(other or name, flag) for text in texts for other, flag in _FLAG.findall(text)]
    missing = [(cmd, flag) for cmd, flag in mentioned
               if cmd not in commands or flag not in _options(commands[cmd])]
    assert not missing


@pytest.mark.parametrize(("text", "expected"), [
    ("One\nline.", "One line."),
    ("First\npara.\n\nSecond\npara.", "First para.\n\nSecond para."),
    ("Intro:\n\n    trainguard run --nodes a\n    -- python x.py\n\nEnd\nhere.",
     "Intro:\n\n    trainguard run --nodes a\n    -- python x.py\n\nEnd here."),
    ("Keep:\n\n\b\nrow 1\nrow 2", "Keep:\n\n\b\nrow 1\nrow 2"),
    ("    Indented\n    docstring\n\n    second\n    part", "Indented docstring\n\nsecond part"),
])
def test_reflow(text: str, expected: str) -> None:
    assert reflow(text) == expected
