"""`trainguard nfs`: NFS client diagnosis from mountstats."""

from __future__ import annotations

import typer

app = typer.Typer(help="Diagnose the NFS client path (mountstats).", no_args_is_help=True)


@app.callback()
def _nfs() -> None:
    """Diagnose the NFS client path (mountstats)."""
