"""The `trainguard` command.

The commands are listed in :mod:`trainguard.cli.commands` and imported when one is run
(:mod:`trainguard.cli.lazygroup`): `trainguard --help` and small commands start in a fraction
of the time that importing all of them took.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from trainguard import __version__
from trainguard.cli.console import EXIT_INPUT, fail
from trainguard.cli.lazygroup import RootGroup
from trainguard.errors import TrainguardError

CONVENTIONS = """Durations: seconds, or a number with a unit (500ms, 30s, 5m, 6h, 1d). Times:
unix seconds or ISO-8601 (naive = UTC). Exit status: 0 done; 1 done, and the outcome is a
failure; 2 bad input (options, files, addresses); 130 interrupted."""

app = typer.Typer(
    name="trainguard",
    help="Keep large multi-node training runs alive: detect, localize, recover, report.",
    epilog=" ".join(CONVENTIONS.split()),
    cls=RootGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"trainguard {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    version: Annotated[bool | None, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version.")] = None,
) -> None:
    import logging

    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


def main() -> None:
    """Console-script entry point: user errors become one line, never a traceback.

    Exit status, for every command: 0 success; 1 the work was done and its outcome is a
    failure; 2 the input (arguments, files, addresses, the command to run) is wrong or unusable;
    130 interrupted. A :class:`TrainguardError` that reaches here is an input error.
    """
    try:
        app()
    except TrainguardError as exc:
        try:
            fail(str(exc), EXIT_INPUT)
        except typer.Exit as done:  # raised outside click's handling: exit here
            sys.exit(done.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
