"""Slurm starts the agents: one task per node (``srun --ntasks-per-node=1``), as a step of the
allocation or as a submitted job. Each agent names itself from ``$SLURMD_NODENAME`` and dials
the controller; the secret travels in the step's environment (``--export=ALL``), never in argv.

Fencing: when a host is lost, the agents' step (allocation mode, found by its unique step name)
or job (submit mode) is killed with ``scancel --signal=KILL`` before the relaunch, and the
controller waits (bounded) until Slurm reports it gone. A stopped agent and its ranks die too;
a host that ``slurmd`` cannot reach (a real partition) is beyond this: docs/multi-host.md,
"Fencing a lost host".
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

from trainguard.errors import LaunchError
from trainguard.recover.backend import Backend
from trainguard.recover.slurm.backend import _FINAL_JOB_STATES, SlurmBackend

log = logging.getLogger(__name__)

AGENT_JOB_OUTPUT = "/tmp/trainguard-agents-%j.out"
"""Submit mode: where the agents' batch job writes its own output, on its first node."""
FENCE_WAIT_S = 20.0
"""How long a fence waits for Slurm to report the agents' step or job gone."""


@runtime_checkable
class KillsSteps(Protocol):
    """The Slurm calls a fence needs (:class:`~trainguard.recover.slurm.commands.SlurmCommands`)."""

    def kill(self, job_or_step: str) -> None: ...

    def steps_named(self, job_id: str, name: str) -> list[str]: ...


class SrunAgents:
    """The agents' step (its ``srun`` process) or job, as the controller sees it."""

    def __init__(self, backend: SlurmBackend, nodes: tuple[str, ...],
                 srun: subprocess.Popen[bytes] | None, job_id: str | None,
                 step_name: str | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._backend = backend
        self._nodes = nodes
        self._srun = srun
        self._job = job_id
        self._step_name = step_name
        self._clock, self._sleep = clock, sleep
        self.fenced: list[str] = []
        """The steps or jobs killed by :meth:`fence` (for the record and tests)."""
        self._ended: int | None = None
        self._next_poll = 0.0
        reaper = backend.reaper
        if srun is not None:
            reaper.add(srun.pid)
        if job_id is not None:
            reaper.scancel(job_id)

    def _status(self) -> int | None:
        if self._ended is not None:
            return self._ended
        if self._srun is not None:
            self._ended = self._srun.poll()
        elif self._job is not None and time.monotonic() >= self._next_poll:
            self._next_poll = time.monotonic() + 1.0
            with contextlib.suppress(LaunchError):
                info = self._backend.commands.show_job(self._job)
                state = info.get("JobState", "").split()[0] if info else ""
                if state in _FINAL_JOB_STATES:
                    self._ended = 0 if state == "COMPLETED" else 1
        return self._ended

    def exited(self) -> Mapping[str, int]:
        code = self._status()
        return {} if code is None else {n: code for n in self._nodes}

    def fence(self, nodes: tuple[str, ...]) -> None:
        """A host is lost: SIGKILL the agents' step or job (every agent shares it; the attempt
        is over) and wait until it is gone, before anything is relaunched."""
        commands = self._backend.commands
        if not isinstance(commands, KillsSteps) or self._status() is not None:
            return
        targets: list[str] = []
        if self._job is not None:
            targets = [self._job]
        elif self._step_name is not None and self._backend.allocation is not None:
            with contextlib.suppress(LaunchError):
                targets = commands.steps_named(self._backend.allocation, self._step_name)
        for target in targets:
            try:
                commands.kill(target)
            except LaunchError as exc:
                log.warning("cannot cancel %s to fence %s: %s", target, ", ".join(nodes), exc)
                continue
            self.fenced.append(target)
            log.info("fenced %s: Slurm %s killed", ", ".join(nodes), target)
        if not self.fenced:
            log.warning("cannot fence %s: the agents' Slurm step was not found", ", ".join(nodes))
            return
        deadline = self._clock() + FENCE_WAIT_S
        while self._clock() < deadline and self._alive():
            self._sleep(0.2)

    def _alive(self) -> bool:
        if self._srun is not None:  # srun ends once its step's tasks are gone
            return self._srun.poll() is None
        self._next_poll = 0.0
        return self._status() is None

    def close(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self._status() is None:
            time.sleep(0.05)
        reaper = self._backend.reaper
        if self._srun is not None:
            if self._srun.poll() is None:
                self._srun.send_signal(signal.SIGTERM)
                try:
                    self._srun.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._srun.kill()
                    self._srun.wait()
            reaper.forget(self._srun.pid)
        if self._job is not None:
            if self._status() is None:
                with contextlib.suppress(LaunchError):
                    self._backend.commands.cancel(self._job)
            reaper.uncancel(self._job)


class SlurmLauncher:
    """One agent per node through Slurm (see the module docstring)."""

    name = "slurm"

    def __init__(self, backend: Backend) -> None:
        if not isinstance(backend, SlurmBackend):
            raise TypeError("SlurmLauncher needs the slurm backend")
        self.backend = backend

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        return nodes[0]

    def start(self, nodes: tuple[str, ...], argv_for: Callable[[str | None], list[str]],
              env: Mapping[str, str], log_dir: Path, attempt: int) -> SrunAgents:
        # The agents report over the network: their job's own output stays on the first node
        # (the run directory need not be visible there). A unique step name: the fence finds
        # the step by it.
        name = f"tg-agents-{attempt}-{uuid.uuid4().hex[:8]}"
        srun, job = self.backend.start_step(nodes, 1, argv_for(None), env, log_dir, Path.cwd(),
                                            attempt, output=AGENT_JOB_OUTPUT, overlap=True,
                                            step_name=name)
        return SrunAgents(self.backend, nodes, srun, job, name)


__all__ = ["AGENT_JOB_OUTPUT", "FENCE_WAIT_S", "KillsSteps", "SlurmLauncher", "SrunAgents"]
