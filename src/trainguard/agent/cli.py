"""``trainguard agent``: the per-host agent a backend starts for each attempt (see
:mod:`trainguard.agent.runner`). Operators start it by hand only for another launcher (ssh, a
container platform): README, "Starting agents on a real cluster"."""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Annotated, NoReturn

import typer

log = logging.getLogger(__name__)


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr and exit (rich is not needed for that: the agent starts fast)."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too); ValueError with a readable message otherwise.

    >>> parse_address("10.0.0.1:4000")
    ('10.0.0.1', 4000)
    """
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def agent(
    controller: Annotated[str, typer.Option(
        "--controller", help="HOST:PORT the controller listens on.")],
    session: Annotated[str, typer.Option(
        "--session", help="The run's session id (given by the controller's backend).")],
    attempt: Annotated[int, typer.Option("--attempt", min=0, help="Attempt index.")] = 0,
    node: Annotated[str | None, typer.Option(
        "--node", help="This host's node name [default: $SLURMD_NODENAME, else the "
        "hostname].")] = None,
    work_dir: Annotated[Path | None, typer.Option(
        "--work-dir", help="Where this host's rank outputs and SDK files go [default: "
        "$TMPDIR/trainguard-agent/SESSION/ATTEMPT/NODE].")] = None,
    secret_file: Annotated[Path | None, typer.Option(
        "--secret-file", help="Read the run's secret from this file instead of "
        "$TRAINGUARD_AGENT_SECRET.")] = None,
    poll_interval: Annotated[float, typer.Option(
        "--poll-interval", min=0.005, max=5.0, help="Seconds between looks at the ranks.")]
    = 0.05,
) -> None:
    """Run this host's part of one attempt for a trainguard controller."""
    from trainguard.agent.client import Identity
    from trainguard.agent.host import HostWork
    from trainguard.agent.runner import Agent, AgentConfig
    from trainguard.agent.wire import SECRET_ENV
    from trainguard.evidence.rules import load_rules
    from trainguard.fileread import UnreadableFile, read_bounded
    from trainguard.recover.nodename import node_name_problem

    try:
        host, port = parse_address(controller)
    except ValueError as exc:
        fail(f"--controller: {exc}", code=2)
    name = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    problem = node_name_problem(name)
    if problem:
        fail(f"--node: {problem}", code=2)
    if secret_file is not None:
        try:
            secret = read_bounded(secret_file, 4096).decode().strip()
        except (UnreadableFile, OSError, UnicodeDecodeError) as exc:
            fail(f"--secret-file: cannot read {secret_file}: {exc}", code=2)
    else:
        secret = os.environ.get(SECRET_ENV, "").strip()
    if not secret:
        fail(f"no secret: set ${SECRET_ENV} or pass --secret-file", code=2)
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s trainguard-agent[{name}] %(levelname)s %(message)s")
    where = work_dir or Path(tempfile.gettempdir()) / "trainguard-agent" / session \
        / str(attempt) / name
    cfg = AgentConfig(host, port, Identity("agent", name, session, attempt, secret.encode()),
                      where, poll_s=poll_interval)
    status = Agent(cfg, HostWork(name, where, load_rules())).run()
    raise typer.Exit(status)


__all__ = ["agent", "parse_address"]
