"""The ``local`` backend: virtual nodes on this machine.

Each rank is its own session and process group (``start_new_session``) so stopping a rank also
stops what it spawned (data-loader workers, compilers). Nothing of the job outlives its
supervisor: each rank asks the kernel to SIGKILL it if the supervisor dies (``PR_SET_PDEATHSIG``),
and the backend's :mod:`~trainguard.recover.reaper` process, told every rank's pid, kills the rest
of the tree (a ``bash -c`` wrapper's command, workers, a grandchild that called ``setsid``) once
the supervisor is gone. Output goes straight to a file per rank (no pipes that could fill up and
block a rank).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from trainguard.errors import LaunchError
from trainguard.recover.backend import Capabilities, LaunchPlan, RankExit
from trainguard.recover.reaper import ReaperLink
from trainguard.snapshot.plane import SnapshotPlane
from trainguard.trace.collect import process_state
from trainguard.warm.launcher import WarmLauncher, WarmTarget, plan_targets
from trainguard.warm.pool import WarmProc

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """SIGKILL when the supervisor dies; and be the subreaper of the rank's tree, so a
    grandchild whose parent exits (a daemonizing double fork) stays under the rank, where the
    reaper's scans of the tree still find it, instead of moving to init."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)


def resolve_command(program: str, path_env: str | None = None) -> str:
    """The executable ``program`` names; :class:`LaunchError` when there is none."""
    if os.sep in program:
        if not os.path.exists(program):
            raise LaunchError(f"command not found: {program}")
        if os.path.isdir(program) or not os.access(program, os.X_OK):
            raise LaunchError(f"command is not executable: {program}")
        return program
    found = shutil.which(program, path=path_env)
    if found is None:
        raise LaunchError(f"command not found on PATH: {program}")
    return found


class RankProcess(Protocol):
    """What :class:`LocalAttempt` uses of a rank's process: a :class:`subprocess.Popen`
    (cold start) or a :class:`~trainguard.warm.pool.WarmProc` (started in a standby)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...


class LocalAttempt:
    """The processes of one attempt on the local backend."""

    def __init__(self, procs: Mapping[int, RankProcess],
                 on_reaped: Callable[[int], None] | None = None) -> None:
        self._procs = dict(procs)
        self._reported: set[int] = set()
        self._on_reaped = on_reaped
        """Told each rank's pid once it is reaped (the reaper forgets it)."""

    def poll(self) -> list[RankExit]:
        exits = []
        for rank, proc in self._procs.items():
            if rank in self._reported:
                continue
            code = proc.poll()
            if code is not None:
                self._reported.add(rank)
                exits.append(RankExit(rank, code))
                if self._on_reaped is not None:
                    self._on_reaped(proc.pid)
        return exits

    def running(self) -> frozenset[int]:
        return frozenset(r for r in self._procs if r not in self._reported)

    @property
    def has_warm(self) -> bool:
        """Some rank runs in a standby: not our child, its exit is read from a socket."""
        return any(isinstance(p, WarmProc) for p in self._procs.values())

    def warm_ranks(self) -> frozenset[int]:
        """The ranks started in a warm standby."""
        return frozenset(r for r, p in self._procs.items() if isinstance(p, WarmProc))

    def pids(self) -> Mapping[int, int]:
        return {rank: proc.pid for rank, proc in self._procs.items()}

    def is_stopped(self, rank: int) -> bool:
        proc = self._procs.get(rank)
        if proc is None or proc.returncode is not None:
            return False
        return process_state(proc.pid) == "stopped"

    def signal_rank(self, rank: int, signum: int) -> None:
        proc = self._procs.get(rank)
        if proc is None:
            raise LaunchError(f"no rank {rank} in this attempt")
        _killpg(proc.pid, signum)

    def stop(self, grace_s: float) -> list[RankExit]:
        """SIGTERM + SIGCONT to every live group, SIGKILL after ``grace_s``, then reap."""
        self.terminate(grace_s)
        return self.poll()

    def close(self) -> None:
        """Nothing to release: the processes are this backend's own children."""

    def terminate(self, grace_s: float) -> None:
        """:meth:`stop` without reporting the exits (the next :meth:`poll` does): safe to call
        from another thread while one polls."""
        live = [p for r, p in self._procs.items() if r not in self._reported]
        for proc in live:
            if proc.poll() is None:
                _killpg(proc.pid, signal.SIGTERM)
                _killpg(proc.pid, signal.SIGCONT)  # a stopped process handles TERM only now
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(0.02)
        for proc in self._procs.values():
            # Also the group's other members (workers a rank spawned) whose leader is gone.
            _killpg(proc.pid, signal.SIGKILL)
        for proc in live:
            proc.wait()


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class ReaperSlot:
    """The reaper of one backend, so of one supervisor: started at the first launch, let go by
    :meth:`close` (it then kills whatever of the job is still alive, and exits)."""

    def __init__(self) -> None:
        self._link: ReaperLink | None = None

    def get(self) -> ReaperLink:
        if self._link is None:
            try:
                self._link = ReaperLink.start()
            except OSError as exc:
                raise LaunchError(f"cannot start the reaper process: {exc.strerror or exc}") \
                    from exc
        return self._link

    def close(self, wait_s: float = 5.0) -> None:
        if self._link is not None:
            self._link.close(wait_s=wait_s)
            self._link = None


class LocalBackend:
    """Virtual nodes on this machine: every node's ranks run here, rendezvous on 127.0.0.1."""

    name = "local"
    persistent_nodes = False
    capabilities = Capabilities(can_signal_rank=True, has_local_pids=True,
                                reads_kernel_logs=False)

    def __init__(self, base_env: Mapping[str, str] | None = None,
                 slots_per_node: int | None = None) -> None:
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._slots = slots_per_node
        self._reaper = ReaperSlot()
        self._warm = WarmLauncher(self._base_env)
        """Standby interpreters: claimed for ranks, pre-warmed for the next attempt."""

    def close(self) -> None:
        """Let the reaper go (it kills anything of the job still alive, then exits); stop
        keeping the warm standbys' leases (they exit once the lease is stale)."""
        self._warm.close()
        self._reaper.close()

    def capacity(self) -> int | None:
        """A virtual node is this machine: as many ranks as it has CPUs, unless told."""
        return self._slots if self._slots is not None else (os.cpu_count() or 1)

    def check(self, command: tuple[str, ...], nodes: tuple[str, ...]) -> None:
        resolve_command(command[0], self._base_env.get("PATH"))

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        return "127.0.0.1"

    def free_port(self, nodes: tuple[str, ...]) -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def exclude(self, node: str, reason: str) -> None:
        """Virtual nodes have no scheduler to tell."""

    def snapshot_plane(self, root: Path, run_id: str,
                       nodes: tuple[str, ...]) -> SnapshotPlane:
        """Virtual nodes share this machine's memory: slot files copied between their
        directories (:class:`~trainguard.snapshot.localplane.LocalPlane`)."""
        from trainguard.snapshot.localplane import LocalPlane

        return LocalPlane(root, run_id, nodes)

    def unavailable(self, nodes: tuple[str, ...]) -> Mapping[str, str]:
        return {}

    def prewarm(self, plan: LaunchPlan, host_dir: Path,
                envs: Sequence[Mapping[str, str]]) -> None:
        """Standbys in ``host_dir`` for ranks with these environments, with no rank of this
        host running (a hot spare's agent)."""
        program = resolve_command(plan.command[0], self._base_env.get("PATH"))
        warm = self._warm.command(program, plan.command, plan.workdir)
        if warm is not None and envs:
            self._warm.prewarm(warm, [WarmTarget(host_dir / "warm", host_dir / "lease",
                                                 {**self._base_env, **env}) for env in envs])

    def launch(self, plan: LaunchPlan) -> LocalAttempt:
        program = resolve_command(plan.command[0], self._base_env.get("PATH"))
        reaper = self._reaper.get()
        procs: dict[int, RankProcess] = {}
        warm = self._warm.command(program, plan.command, plan.workdir)
        try:
            for rl in plan.ranks:
                rl.output.parent.mkdir(parents=True, exist_ok=True)
                env = {**self._base_env, **rl.env}
                adopted = None if warm is None else self._warm.claim(warm, env, rl.output,
                                                                      plan.workdir)
                if adopted is not None:
                    procs[rl.rank] = adopted
                    reaper.add(adopted.pid)
                    continue
                # Never through a symlink someone placed where a rank's log goes.
                fd = os.open(rl.output, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644)
                with open(fd, "ab") as out:
                    procs[rl.rank] = subprocess.Popen(
                        [program, *plan.command[1:]], env=env, cwd=plan.workdir,
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                        start_new_session=True, preexec_fn=die_with_parent)
                reaper.add(procs[rl.rank].pid)
        except OSError as exc:
            LocalAttempt(procs, reaper.forget).stop(0.0)
            raise LaunchError(f"cannot start {plan.command[0]}: {exc.strerror or exc}") from exc
        attempt = LocalAttempt(procs, reaper.forget)
        log.debug("attempt %d launched: %s (warm: %s)", plan.attempt,
                  {r: p.pid for r, p in procs.items()}, sorted(attempt.warm_ranks()))
        if warm is not None:
            self._warm.prewarm(warm, plan_targets(
                plan.nodes, plan.watch_nodes, plan.host_dirs,
                [(rl.node, rl.local_rank, {**self._base_env, **rl.env}) for rl in plan.ranks]))
        return attempt


__all__ = ["LocalAttempt", "LocalBackend", "RankProcess", "ReaperSlot", "die_with_parent",
           "resolve_command"]
