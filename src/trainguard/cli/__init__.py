"""Thin typer commands: parse, call one library function, print."""

from __future__ import annotations

from trainguard.cli.main import app, main

__all__ = ["app", "main"]
