"""Help texts are shown as written: typer's rich mode reads them as Rich markup, where a
bracketed word (``[floors]``, ``[default: 127.0.0.1 ...]``) is a style tag and vanished from
`--help` (issue #28)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from trainguard.cli.main import app

_BRACKETED = re.compile(r"\[[^\[\]\n]+\]")
_BOX = re.compile(r"[│╭╮╰╯─]")


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    found = {path: cmd}
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not sub.hidden:
            found.update(_walk(sub, (*path, name)))
    return found


ALL = _walk(typer.main.get_command(app))


def _source_texts(cmd: Any) -> list[str]:
    """The command's and its parameters' help as written (without the escapes that make
    Rich show it literally)."""
    texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
    return [t.replace("\\[", "[") for t in texts]


def _rendered(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return " ".join(_BOX.sub(" ", result.stdout).split())


def test_some_help_has_bracketed_words() -> None:
    """The check below has something to check (else it would pass on any help)."""
    found = {w for cmd in ALL.values() for t in _source_texts(cmd) for w in _BRACKETED.findall(t)}
    assert "[floors]" in found and "[detect]" in found


@pytest.mark.parametrize("path", list(ALL), ids=lambda p: " ".join(p) or "trainguard")
def test_every_bracketed_word_of_the_help_is_shown(path: tuple[str, ...]) -> None:
    words = [w for t in _source_texts(ALL[path]) for w in _BRACKETED.findall(t)]
    shown = _rendered(path)
    missing = [w for w in words if " ".join(w.split()) not in shown]
    assert not missing, f"{' '.join(path)} --help lost {missing}"


def test_run_help_shows_where_it_listens_by_default() -> None:
    """Where `run` listens for agents matters for security: its default must be on screen."""
    (listen,) = (p for p in ALL[("run",)].params if "--listen" in p.opts)
    (default,) = [w for w in _BRACKETED.findall(_source_texts_of(listen)) if "default" in w]
    shown = _rendered(("run",))
    row = shown[shown.index("--listen "):][:len(listen.help) + 40]  # + the type column
    assert " ".join(default.split()) in row, row


def _source_texts_of(param: Any) -> str:
    return str(param.help or "").replace("\\[", "[")
