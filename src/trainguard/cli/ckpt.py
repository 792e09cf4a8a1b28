"""`trainguard ckpt`: the checkpoint path: profile the writer, find saves in telemetry."""

from __future__ import annotations

import typer

from trainguard.cli import ckpt_analyze, ckpt_profile

app = typer.Typer(help="Checkpoint path: profile the writer, find saves in telemetry.",
                  no_args_is_help=True)


@app.callback()
def _ckpt() -> None:
    """Checkpoint path: profile the writer, find saves in telemetry."""


app.command("analyze")(ckpt_analyze.analyze)
app.command("profile")(ckpt_profile.profile)
