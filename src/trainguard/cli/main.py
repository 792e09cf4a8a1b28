"""The `trainguard` command."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from trainguard import __version__
from trainguard.agent.cli import agent as agent_command
from trainguard.cli import (
    advise,
    check,
    ckpt,
    detect,
    inject,
    logs,
    nfs,
    nodes,
    report,
    run,
    simulate,
    slurm,
    trace,
    tune,
    watch,
    xid,
)
from trainguard.cli.console import EXIT_INPUT, fail
from trainguard.cli.helptext import reflow
from trainguard.errors import TrainguardError

app = typer.Typer(
    name="trainguard",
    help="Keep large multi-node training runs alive: detect, localize, recover, report.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(logs.app, name="logs")
app.add_typer(xid.app, name="xid")
app.command("agent")(agent_command)
app.command("simulate")(simulate.simulate)
app.command("detect")(detect.detect)
app.command("backtest")(detect.backtest)
app.command("tune")(tune.tune_command)
app.command("run", help=run.run_help, no_args_is_help=True,
            context_settings={"allow_interspersed_args": False})(run.run)
app.add_typer(inject.inject_app, name="inject")
app.add_typer(nodes.app, name="nodes")
app.add_typer(slurm.app, name="slurm")
app.command("report")(report.report)
app.command("check")(check.check)
app.add_typer(advise.app, name="advise")
app.add_typer(ckpt.app, name="ckpt")
app.add_typer(nfs.app, name="nfs")
app.add_typer(trace.app, name="trace")
app.add_typer(trace.diagnose_app, name="diagnose")
app.command("watch")(watch.watch)


def _reflow_help(typer_app: typer.Typer) -> None:
    """Every command's and group's help as paragraphs the terminal wraps (typer's rich mode
    keeps the source's line breaks after the first paragraph: :mod:`trainguard.cli.helptext`)."""
    for command in typer_app.registered_commands:
        if command.help:
            command.help = reflow(command.help)
        elif command.callback is not None and command.callback.__doc__:
            command.callback.__doc__ = reflow(command.callback.__doc__)
    for group in typer_app.registered_groups:
        sub = group.typer_instance
        if sub is None:
            continue
        info = sub.info
        if isinstance(info.help, str):
            info.help = reflow(info.help)
        _reflow_help(sub)


_reflow_help(app)


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
