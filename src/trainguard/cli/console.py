"""Shared terminal helpers: consoles, error exit, progress."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.text import Text

from trainguard.textsafe import terminal_safe


class SafeConsole(Console):
    """A console that never passes an escape sequence from data to the terminal.

    Every string it renders (``print`` arguments, table cells, panel bodies) goes through
    :func:`~trainguard.textsafe.terminal_safe` first: log lines, node names and stack frames are
    somebody else's bytes. Rich's own styling is added after, so colours still work.
    """

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(terminal_safe(text, keep_newlines=True), **kwargs)


# Rich falls back to 80 columns when stdout is not a terminal; tables of log lines need more.
_WIDTH = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
out = SafeConsole(highlight=False, soft_wrap=False, width=_WIDTH)
# soft_wrap: an error or warning stays one line however narrow the (non-)terminal is.
err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)


def _one_line(message: str) -> str:
    message = terminal_safe(message, keep_newlines=True)
    return "; ".join(part.strip() for part in message.splitlines() if part.strip())


def fail(message: str, code: int = 1) -> NoReturn:
    """One clear line on stderr and a non-zero exit, never a traceback."""
    err.print(Text.assemble(("error: ", "bold red"), _one_line(message)))
    raise typer.Exit(code)


def warn(message: str) -> None:
    """One warning line on stderr; ``message`` is plain text (no markup)."""
    err.print(Text.assemble(("warning: ", "yellow"), _one_line(message)))


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
