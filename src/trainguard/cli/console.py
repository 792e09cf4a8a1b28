"""Shared terminal helpers: consoles, error exit, progress."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer
from rich.console import Console

# Rich falls back to 80 columns when stdout is not a terminal; tables of log lines need more.
_WIDTH = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
out = Console(highlight=False, soft_wrap=False, width=_WIDTH)
err = Console(stderr=True, highlight=False)


def fail(message: str, code: int = 1) -> NoReturn:
    """One clear line on stderr and a non-zero exit, never a traceback."""
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False)
    raise typer.Exit(code)


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)


def stderr_is_tty() -> bool:
    return sys.stderr.isatty()
