"""Starting an agent: its options checked, then :class:`~trainguard.agent.runner.Agent` run.
Shared by ``trainguard agent`` and ``python -m trainguard.agent`` (which backends start, and
which loads no CLI library)."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from pathlib import Path


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


class AgentUsageError(Exception):
    """A bad option of ``trainguard agent`` (one line, exit 2)."""


def controller_address(given: str | None, alias: str | None) -> str:
    """``--controller-addr``, or its old name ``--controller`` (hidden, still accepted).

    >>> controller_address(None, "10.0.0.1:4000")
    '10.0.0.1:4000'
    """
    if given is not None and alias is not None and given != alias:
        raise AgentUsageError("--controller is the old name of --controller-addr: give one")
    found = given if given is not None else alias
    if found is None:
        raise AgentUsageError("missing option --controller-addr HOST:PORT (the address "
                              "`trainguard run` listens on for agents)")
    return found


def start_agent(controller: str, session: str, attempt: int = 0, node: str | None = None,
                work_dir: Path | None = None, secret_file: Path | None = None,
                poll_interval: float = 0.05, secret: str | None = None) -> int:
    """Check the options, then run the agent to its end; returns its exit status.

    ``secret``: as the entry point took it (:func:`trainguard.agent.secret.take_secret`, which
    keeps it out of this process's ``/proc/<pid>/environ``); else ``secret_file``, else
    ``$TRAINGUARD_AGENT_SECRET`` (removed from ``os.environ``)."""
    from trainguard.agent.client import Identity
    from trainguard.agent.host import HostWork
    from trainguard.agent.runner import Agent, AgentConfig
    from trainguard.agent.secret import take_secret
    from trainguard.agent.wire import SECRET_ENV
    from trainguard.agent.workdir import UnsafeWorkDir, make_work_dir, remove_work_dir
    from trainguard.evidence.rules import load_rules
    from trainguard.fdlimit import raise_nofile_limit
    from trainguard.fileread import UnreadableFile, read_bounded
    from trainguard.recover.nodename import node_name_problem

    try:
        host, port = parse_address(controller)
    except ValueError as exc:
        raise AgentUsageError(f"--controller-addr: {exc}") from None
    name = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    problem = node_name_problem(name)
    if problem:
        raise AgentUsageError(f"--node: {problem}")
    if attempt < 0 or not 0.005 <= poll_interval <= 5.0:
        raise AgentUsageError("--attempt must be >= 0 and --poll-interval in [0.005, 5]")
    given = take_secret(reexec=False)  # never left in os.environ for the ranks
    if secret is None and secret_file is not None:
        try:
            secret = read_bounded(secret_file, 4096).decode().strip()
        except (UnreadableFile, OSError, UnicodeDecodeError) as exc:
            raise AgentUsageError(f"--secret-file: cannot read {secret_file}: {exc}") from None
    elif secret is None:
        secret = given
    secret = (secret or "").strip()
    if not secret:
        raise AgentUsageError(f"no secret: set ${SECRET_ENV} or pass --secret-file")
    raise_nofile_limit()
    root = logging.getLogger()
    if root.handlers:  # `trainguard agent`: the CLI's handler, at WARNING unless -v
        root.setLevel(min(root.level, logging.INFO))  # the agent's status lines are INFO
    else:
        logging.basicConfig(level=logging.INFO, format=f"%(asctime)s trainguard-agent[{name}] "
                            "%(levelname)s %(message)s")
    try:  # private, unpredictable, removed at the end (trainguard.agent.workdir)
        where = make_work_dir(work_dir or Path(tempfile.gettempdir()), session, attempt, name)
    except UnsafeWorkDir as exc:
        raise AgentUsageError(f"--work-dir: {exc}") from None
    cfg = AgentConfig(host, port, Identity("agent", name, session, attempt, secret.encode()),
                      where, poll_s=poll_interval)
    try:
        return Agent(cfg, HostWork(name, where, load_rules)).run()
    finally:
        remove_work_dir(where)


__all__ = ["AgentUsageError", "controller_address", "parse_address", "start_agent"]
