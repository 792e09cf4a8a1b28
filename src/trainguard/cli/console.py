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


EXIT_FAILED = 1
"""The command did its work and the outcome is a failure (a job failed, a round failed)."""
EXIT_INPUT = 2
"""The command could not do its work because of its input: usage, a bad value, a path or
address that is missing, unreadable, unwritable or not what it should be, a command that does
not exist. Click's own usage errors exit 2 as well."""


def fail(message: str, code: int = EXIT_INPUT) -> NoReturn:
    """One clear line on stderr and a non-zero exit, never a traceback. ``code``: 2
    (:data:`EXIT_INPUT`) for input the user can fix, 1 (:data:`EXIT_FAILED`) for a failed
    outcome."""
    err.print(Text.assemble(("error: ", "bold red"), _one_line(message)))
    raise typer.Exit(code)


def warn(message: str) -> None:
    """One warning line on stderr; ``message`` is plain text (no markup)."""
    err.print(Text.assemble(("warning: ", "yellow"), _one_line(message)))


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
