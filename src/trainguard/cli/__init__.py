"""Thin typer commands: parse, call one library function, print.

``app`` (the typer application of :mod:`trainguard.cli.main`) is looked up on first use:
importing a command module (``trainguard.cli.logs``) must not import every other command
(start-up time, issue #28). The console script's entry point is ``trainguard.cli.main:main``
(the name ``trainguard.cli.main`` is that module, so the package exports no ``main``).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        return importlib.import_module("trainguard.cli.main").app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
