"""``--agent-exec manual``: agents started by hand (or by a platform this machine cannot drive).

Each time the controller needs agents (every attempt; a host check; the removal of the run's
memory snapshots at the end), it prints one ``trainguard agent`` command line per host, with
the address and port it listens on, the run's session, the attempt, the host's name and a
secret *file* (mode 0600; the secret itself is never printed), and waits for the agents to
connect. The agents then run exactly as launched ones do; the controller only cannot see or
kill their processes (a lost host's agent kills its ranks itself: the orphan timeout).

    trainguard: attempt 0: start one agent per host, waiting for them (...):
      trainguard agent --controller-addr login1:39113 --node gpu1 --session 3f... \
--attempt 0 --secret-file /shared/runs/gpt/agent-secret
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from trainguard.agent.secret import SECRET_ENV
from trainguard.errors import LaunchError

MANUAL = "manual"
"""The ``--agent-exec`` value of this mode."""
MANUAL_CONNECT_TIMEOUT_S = 600.0
"""How long an attempt waits for agents started by hand (a launcher's: 60 s)."""
MANUAL_CLEAN_TIMEOUT_S = 120.0
"""How long the snapshot clean-up at the end of a run waits for its agents."""
SECRET_FILE_NAME = "agent-secret"
"""The secret file's name in the run directory."""


def purpose(attempt: int) -> str:
    """What a launch of agents is for, from its attempt number.

    >>> purpose(2), purpose(1_000_003), purpose(2_000_000)
    ('attempt 2', 'host check', 'snapshot clean-up')
    """
    from trainguard.agent.snapplane import CLEAN_ATTEMPT_BASE
    from trainguard.check.agents import CHECK_ATTEMPT_BASE

    if attempt >= CLEAN_ATTEMPT_BASE:
        return "snapshot clean-up"
    return "host check" if attempt >= CHECK_ATTEMPT_BASE else f"attempt {attempt}"


def hand_command(argv: Sequence[str], secret_file: Path) -> str:
    """The command line for an operator, from the one a launcher would run
    (``PYTHON -m trainguard.agent ARGS``): ``trainguard agent ARGS --secret-file FILE``.

    >>> hand_command(["/venv/bin/python", "-m", "trainguard.agent", "--node", "h 1"],
    ...              Path("/runs/s"))
    "trainguard agent --node 'h 1' --secret-file /runs/s"
    """
    if list(argv[1:3]) != ["-m", "trainguard.agent"]:
        raise ValueError(f"not an agent command: {list(argv[:3])}")
    return shlex.join(["trainguard", "agent", *argv[3:], "--secret-file", str(secret_file)])


def write_secret(path: Path, secret: str) -> None:
    """``secret`` in ``path``, readable by this user only (an existing file is replaced; a
    symlink there is refused)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise LaunchError(f"cannot write the agents' secret file {path}: "
                          f"{exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        f.write(secret + "\n")


class ManualAgents:
    """Agents someone else started: nothing of their processes is visible or killable here."""

    def exited(self) -> Mapping[str, int]:
        return {}

    def close(self, wait_s: float) -> None:
        """Nothing to wait for: each agent exits on the controller's ``bye``."""


class ManualLauncher:
    """Prints each host's agent command and lets the controller wait (see the module
    docstring). ``secret_file``: where the run's secret is written for the agents."""

    name = "local"

    def __init__(self, secret_file: Path, out: TextIO | None = None) -> None:
        self.secret_file = secret_file.absolute()
        self._out = out

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        return nodes[0]  # the hosts are separate machines

    def start(self, nodes: tuple[str, ...], argv_for: Callable[[str | None], list[str]],
              env: Mapping[str, str], log_dir: Path, attempt: int) -> ManualAgents:
        secret = env.get(SECRET_ENV)
        if secret is None:
            raise LaunchError("no secret for the agents")
        write_secret(self.secret_file, secret)
        out = self._out or sys.stderr
        what = purpose(attempt)
        out.write(f"trainguard: {what}: start one agent per host, waiting for them "
                  f"({self.secret_file} must be readable there):\n")
        for node in nodes:
            out.write(f"  {hand_command(argv_for(node), self.secret_file)}\n")
        out.flush()
        return ManualAgents()


__all__ = ["MANUAL", "MANUAL_CLEAN_TIMEOUT_S", "MANUAL_CONNECT_TIMEOUT_S", "SECRET_FILE_NAME",
           "ManualAgents", "ManualLauncher", "hand_command", "purpose", "write_secret"]
