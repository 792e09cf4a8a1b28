"""Agents started as local subprocesses: :class:`LocalLauncher` starts one per node, on this
machine or through a command prefix (``ssh {node}``, a namespaced test host's entry), and
:class:`SubprocessAgents` holds them: exits, logs, the end of an attempt, and fencing a lost
host (docs/multi-host.md, "Fencing a lost host").
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from trainguard.agent.wire import SECRET_ENV
from trainguard.errors import ConfigError, LaunchError

log = logging.getLogger(__name__)

ArgvFor = Callable[[str | None], list[str]]
"""The agent command for a node (None: one command for every node, which then names
itself from ``$SLURMD_NODENAME`` or its hostname)."""


class SubprocessAgents:
    """Agents started as local subprocesses (one per node), each writing to its own log."""

    def __init__(self, procs: Mapping[str, subprocess.Popen[bytes]],
                 logs: Mapping[str, Path] | None = None) -> None:
        self._procs = dict(procs)
        self._logs = dict(logs or {})

    def log_of(self, node: str) -> Path | None:
        """The file ``node``'s launcher (and agent) wrote its output to."""
        return self._logs.get(node)

    def exited(self) -> Mapping[str, int]:
        return {n: code for n, p in self._procs.items() if (code := p.poll()) is not None}

    def close(self, wait_s: float) -> None:
        """Let the agents exit on their own (they were told ``bye``; their ranks are gone) for
        ``wait_s``, then kill them, without holding up the next attempt: the waiting is done
        by a background thread."""
        threading.Thread(target=self.reap, args=(wait_s,), name="agent-reaper",
                         daemon=True).start()

    def fence(self, nodes: tuple[str, ...]) -> None:
        """Kill ``nodes``' agents now, even stopped ones, and wait until nothing they started
        runs: SIGKILL, no grace, to each launcher's session and every descendant of it on this
        machine (the agent and its ranks when the launcher enters a namespaced host; through
        ``ssh`` only the client is here, and the remote agent dies with its session), then
        wait until each is gone or a zombie. ``PR_SET_PDEATHSIG`` alone would kill the ranks
        only some time after their agent."""
        for node in nodes:
            proc = self._procs.get(node)
            if proc is not None and proc.poll() is None:
                _kill_now(node, proc)

    def reap(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` for every agent to exit, then kill those left as `fence`
        does: each launcher's session and every descendant of it on this machine (a rank that
        left the launcher's process group dies too)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(p.poll() is None for p in self._procs.values()):
            time.sleep(0.02)
        for node, proc in self._procs.items():
            if proc.poll() is None:
                _kill_now(node, proc)


def _kill_now(node: str, proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to ``proc``'s process tree and its session, then wait for it."""
    from trainguard.recover.reaper import Tree, kill_tree, start_time

    tree = Tree()
    start = start_time(proc.pid)
    if start is not None:
        tree.add(proc.pid, start)
    left = kill_tree(tree, grace_s=0.0)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever the scan could not see
    proc.wait()
    if left:
        log.warning("killing %s's agent: %d process(es) still alive after SIGKILL (pids %s; "
                    "uninterruptible I/O?)", node, len(left),
                    ", ".join(str(pid) for pid, _ in sorted(left)))


class LocalLauncher:
    """One agent subprocess per node on this machine, or through ``exec_prefix`` (a command
    template with ``{node}``: ``ssh {node}``, ``ENTER {node}`` for a namespaced test host)."""

    name = "local"

    def __init__(self, exec_prefix: str | None = None) -> None:
        if exec_prefix is not None and "{node}" not in exec_prefix:
            raise ConfigError(f"--agent-exec must contain {{node}} (or be `manual`), got "
                              f"{exec_prefix!r}")
        self.exec_prefix = exec_prefix

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        # Virtual nodes share this machine's loopback; real (or namespaced) hosts do not.
        return "127.0.0.1" if self.exec_prefix is None else nodes[0]

    def prefix(self, node: str) -> list[str]:
        if self.exec_prefix is None:
            return []
        return [part.replace("{node}", node) for part in shlex.split(self.exec_prefix)]

    def start(self, nodes: tuple[str, ...], argv_for: ArgvFor, env: Mapping[str, str],
              log_dir: Path, attempt: int) -> SubprocessAgents:
        from trainguard.recover.local import die_with_parent

        log_dir.mkdir(parents=True, exist_ok=True)
        procs: dict[str, subprocess.Popen[bytes]] = {}
        logs = {node: log_dir / f"agent-{node}.log" for node in nodes}
        argv: list[str] = []
        try:
            secret = env.get(SECRET_ENV)
            clean = {k: v for k, v in env.items() if k != SECRET_ENV}
            for node in nodes:
                argv = [*self.prefix(node), *argv_for(node),
                        *(["--secret-stdin"] if secret is not None else [])]
                with open(logs[node], "ab") as out:
                    proc = procs[node] = subprocess.Popen(
                        argv, env=clean,
                        stdin=subprocess.DEVNULL if secret is None else subprocess.PIPE,
                        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                        preexec_fn=die_with_parent)
                if secret is not None and proc.stdin is not None:
                    with contextlib.suppress(BrokenPipeError):  # it died: reported as it exits
                        proc.stdin.write(secret.encode() + b"\n")
                    with contextlib.suppress(BrokenPipeError):
                        proc.stdin.close()
        except OSError as exc:
            SubprocessAgents(procs).reap(0.0)
            what = f" ({argv[0]})" if argv else ""
            raise LaunchError(f"cannot start an agent{what}: {exc.strerror or exc}") from exc
        return SubprocessAgents(procs, logs)


__all__ = ["ArgvFor", "LocalLauncher", "SubprocessAgents"]
