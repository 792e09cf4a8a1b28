"""``trainguard agent``: the per-host agent a backend starts for each attempt (see
:mod:`trainguard.agent.runner`). Operators start it by hand only for another launcher (a
container platform; ``trainguard run --agent-exec manual`` prints each host's command line):
docs/multi-host.md, "Starting agents on a real cluster"."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from trainguard.agent.secret import SecretError, take_secret
from trainguard.agent.start import AgentUsageError, controller_address, start_agent
from trainguard.cli.options import duration_option

log = logging.getLogger(__name__)


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr and exit (rich is not needed for that: the agent starts fast)."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


def agent(
    session: Annotated[str, typer.Option(
        "--session", help="The run's session id (given by the controller's backend, or "
        "printed by `trainguard run --agent-exec manual`).")],
    controller_addr: Annotated[str | None, typer.Option(
        "--controller-addr", help="HOST:PORT the controller listens on (required).")] = None,
    controller_alias: Annotated[str | None, typer.Option(
        "--controller", hidden=True, help="Old name of --controller-addr.")] = None,
    attempt: Annotated[int, typer.Option("--attempt", min=0, help="Attempt index.")] = 0,
    node: Annotated[str | None, typer.Option(
        "--node", help="This host's node name [default: $SLURMD_NODENAME, else the "
        "hostname].")] = None,
    work_dir: Annotated[Path | None, typer.Option(
        "--work-dir", help="Where this agent creates its private directory for the rank "
        "outputs and SDK files (removed when it exits; each level must be owned by root or "
        "this user) [default: $TMPDIR].")] = None,
    secret_file: Annotated[Path | None, typer.Option(
        "--secret-file", help="Read the run's secret from this file instead of "
        "$TRAINGUARD_AGENT_SECRET.")] = None,
    secret_stdin: Annotated[bool, typer.Option(
        "--secret-stdin", help="Read the run's secret from the first line of standard "
        "input (as the local launcher passes it).")] = False,
    poll_interval: Annotated[float, duration_option(
        "--poll-interval", min=0.005, max=5.0, help="Seconds between looks at the ranks.")]
    = 0.05,
) -> None:
    """Run this host's part of one attempt for a trainguard controller."""
    try:
        # First: out of the environment (a re-exec; see trainguard.agent.secret).
        secret = take_secret(reexec=sys.argv[1:2] == ["agent"],  # not under a test runner
                             stdin=secret_stdin)
        controller = controller_address(controller_addr, controller_alias)
        status = start_agent(controller, session, attempt, node, work_dir, secret_file,
                             poll_interval, secret)
    except (AgentUsageError, SecretError) as exc:
        fail(str(exc), code=2)
    raise typer.Exit(status)


__all__ = ["agent"]
