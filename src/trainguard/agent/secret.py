"""How an agent takes the run's secret without leaving it where its ranks can read it.

Launchers (a subprocess, ``ssh``, ``srun --export=ALL``) can only hand a process its
environment, so the secret arrives in ``$TRAINGUARD_AGENT_SECRET``. But ``/proc/<pid>/environ``
shows the environment a process was *started* with, to every process of the same user (its
own ranks included): removing the variable from ``os.environ`` does not remove it there.

So the agent's entry point, before anything else, re-executes the same command with the
variable removed and the secret in an inherited pipe instead (:data:`SECRET_FD_ENV` names the
pipe's descriptor). The new image reads the pipe and closes it; its ``/proc/<pid>/environ`` never
held the secret, its ranks are started with ``close_fds`` and an environment without it, and
the process id stays the same (the launcher still follows it). The secret exists in the first
image's environment only for the milliseconds before the re-exec, before any rank exists.
"""

from __future__ import annotations

import contextlib
import os
import sys

from trainguard.errors import TrainguardError

SECRET_ENV = "TRAINGUARD_AGENT_SECRET"
"""The environment variable that carries the run's secret to the agents (never argv). Defined
here, not in :mod:`~trainguard.agent.wire`: the re-exec comes before asyncio is loaded."""
SECRET_FD_ENV = "TRAINGUARD_AGENT_SECRET_FD"
"""Set by the re-exec: the descriptor of a pipe that holds the secret."""
_MAX_SECRET = 4096


class SecretError(TrainguardError):
    """The secret could not be taken (one line for the user)."""


def take_secret(reexec: bool = True, stdin: bool = False) -> str | None:
    """The secret given to this process (None: none given).

    With ``stdin`` (``--secret-stdin``: the local launcher writes it there, through ``ssh`` or a
    namespace entry too), the first line of standard input, which is then replaced by
    ``/dev/null``: the secret was never in any environment.

    With ``reexec`` (the agent's entry points), a secret found in the environment makes the
    process re-execute itself without it (this call then does not return in the first image);
    the second image finds it in the pipe. Without ``reexec`` (a library caller), the variable
    is only removed from ``os.environ``."""
    fd_text = os.environ.pop(SECRET_FD_ENV, None)
    if stdin:
        os.environ.pop(SECRET_ENV, None)
        return _read_stdin()
    if fd_text is not None:
        return _read_pipe(fd_text)
    secret = os.environ.pop(SECRET_ENV, None)
    if secret is None or not reexec:
        return secret
    if len(secret.encode()) > _MAX_SECRET:
        raise SecretError(f"${SECRET_ENV} is longer than {_MAX_SECRET} bytes")
    _reexec_without(secret)
    return secret  # only when the re-exec was not possible


def _read_pipe(fd_text: str) -> str:
    if not fd_text.isdigit():
        raise SecretError(f"${SECRET_FD_ENV} must be a descriptor number")
    fd = int(fd_text)
    chunks: list[bytes] = []
    try:
        while chunk := os.read(fd, _MAX_SECRET + 1):
            chunks.append(chunk)
            if sum(map(len, chunks)) > _MAX_SECRET:
                raise SecretError("the secret pipe holds more than a secret")
    except OSError as exc:
        raise SecretError(f"cannot read the secret from descriptor {fd}: {exc}") from None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def _read_stdin() -> str:
    data = b""
    try:
        while not data.endswith(b"\n") and len(data) <= _MAX_SECRET:
            chunk = os.read(0, _MAX_SECRET + 1 - len(data))
            if not chunk:
                break
            data += chunk
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError as exc:
        raise SecretError(f"cannot read the secret from standard input: {exc}") from None
    if len(data) > _MAX_SECRET:
        raise SecretError("standard input holds more than a secret")
    return data.decode(errors="replace").strip()


def _reexec_without(secret: str) -> None:
    argv = list(getattr(sys, "orig_argv", ()) or ())
    if not argv or not sys.executable:
        return
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, secret.encode())  # far below a pipe's buffer: never blocks
    finally:
        os.close(write_end)
    os.set_inheritable(read_end, True)
    env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    env[SECRET_FD_ENV] = str(read_end)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        os.execve(sys.executable, argv, env)
    except OSError:
        os.close(read_end)  # carry on with the secret in memory; environ still shows it


__all__ = ["SECRET_ENV", "SECRET_FD_ENV", "SecretError", "take_secret"]
