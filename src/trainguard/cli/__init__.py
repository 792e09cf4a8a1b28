"""Thin typer commands: parse, call one library function, print.

``app`` and ``main`` are looked up on first use: importing a command module
(``trainguard.cli.logs``) must not import every other command (start-up time, issue #28).
"""

from __future__ import annotations

from typing import Any

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from trainguard.cli import main as _main

        return getattr(_main, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
