"""``python -m trainguard.agent``: what backends start on each host (``trainguard agent``)."""

from __future__ import annotations

import typer

from trainguard.agent.cli import agent


def main() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(agent)
    app()


if __name__ == "__main__":
    main()
