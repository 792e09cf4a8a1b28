"""The CLI's consoles never pass an escape sequence from data to the terminal."""

from __future__ import annotations

import io

import pytest
import typer
from rich.table import Table

from trainguard.cli import console

HOSTILE = "node\x1b[31m7\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07 done\r"


def _render(*objs: object) -> str:
    buf = io.StringIO()
    c = console.SafeConsole(file=buf, force_terminal=True, highlight=False, width=120)
    for obj in objs:
        c.print(obj)
    return buf.getvalue()


def test_printed_strings_and_table_cells_lose_escape_sequences_from_data() -> None:
    table = Table("node", "evidence")
    table.add_row(HOSTILE, "xid \x1b[2J79")
    text = _render(HOSTILE, table)
    assert "pwned" not in text and "ZXZpbA" not in text and "\x1b[2J" not in text
    assert "\x1b[31m7" not in text and "\r" not in text and "\x07" not in text
    assert "node7" in text and "xid 79" in text


def test_the_consoles_own_styles_survive() -> None:
    text = _render("[bold]ok[/bold]")
    assert "\x1b[1mok" in text


def test_fail_and_warn_lines_are_sanitized(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.StringIO()
    monkeypatch.setattr(console, "err", console.SafeConsole(file=buf, force_terminal=True))
    console.warn(f"bad line {HOSTILE}")
    with pytest.raises(typer.Exit):
        console.fail(f"cannot read {HOSTILE}")
    text = buf.getvalue()
    assert "pwned" not in text and "\x07" not in text
    assert text.count("\n") == 2  # each stays one line
