"""Agents on the hosts for the length of a check: started like an attempt's, with no ranks.

The backend's launcher starts one ``trainguard agent`` per host (locally, through
``--agent-exec``, or with ``srun`` inside a Slurm allocation), exactly as for a training
attempt; the check then talks to them through requests and replies. A host whose agent does not
connect within the connect timeout is reported unreachable, and the others are checked.

    with CheckAgents(backend, ("n1", "n2"), work_dir) as agents:
        report = Checker(agents).run(agents.hosts, options, agents.unreachable)
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from trainguard.agent.remote import RemoteAttempt
from trainguard.errors import ConfigError
from trainguard.recover.launchplan import LaunchPlan, RankLaunch

CHECK_ATTEMPT_BASE = 1_000_000
"""Check sessions' attempt numbers start here, apart from a run's attempts (0, 1, ...)."""

_numbers = itertools.count(CHECK_ATTEMPT_BASE)


class LaunchesAgents(Protocol):
    """What a check needs of a backend with agents
    (:class:`trainguard.agent.backend.AgentBackend`)."""

    def launch(self, plan: LaunchPlan) -> RemoteAttempt: ...


class CheckAgents:
    """One agent per host, for one check (see the module docstring)."""

    def __init__(self, backend: LaunchesAgents, hosts: Sequence[str], work_dir: Path, *,
                 connect_timeout_s: float = 60.0, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not hosts:
            raise ConfigError("no hosts to check")
        if len(set(hosts)) != len(hosts):
            raise ConfigError("a host is named twice")
        self.backend = backend
        self.hosts = tuple(hosts)
        self.work_dir = work_dir
        self.connect_timeout_s = connect_timeout_s
        self._clock, self._sleep = clock, sleep
        self._attempt: RemoteAttempt | None = None
        self.unreachable: dict[str, str] = {}

    def __enter__(self) -> CheckAgents:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Start the agents and wait (up to the connect timeout) for every one to connect."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        plan = LaunchPlan(attempt=next(_numbers), command=(), nodes=self.hosts, ranks=(),
                          workdir=self.work_dir)
        self._attempt = self.backend.launch(plan)
        deadline = self._clock() + self.connect_timeout_s
        while self._clock() < deadline:
            if self._attempt.connected() >= set(self.hosts):
                break
            self._sleep(0.05)
        missing = set(self.hosts) - self._attempt.connected()
        self.unreachable = {h: f"its agent did not connect within {self.connect_timeout_s:g} s"
                            for h in self.hosts if h in missing}

    def request(self, nodes: Iterable[str], msg: Mapping[str, Any],
                timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        return self._live().request(nodes, msg, timeout_s)

    def request_each(self, messages: Mapping[str, Mapping[str, Any]],
                     timeout_s: float) -> Mapping[str, Mapping[str, Any]]:
        return self._live().request_each(messages, timeout_s)

    def _live(self) -> RemoteAttempt:
        if self._attempt is None:
            raise RuntimeError("CheckAgents used before open()")
        return self._attempt

    def close(self) -> None:
        """Every agent exits."""
        if self._attempt is not None:
            self._attempt.close()
            self._attempt = None


def ring_plan(hosts: Sequence[str], work_dir: Path, master: tuple[str, int],
              python: str, mbytes: float = 16.0) -> LaunchPlan:
    """One rank per host running the all-reduce check (:mod:`trainguard.check.allreduce`)."""
    addr, port = master
    ranks = []
    for rank, host in enumerate(hosts):
        out = work_dir / host / f"rank{rank}.log"
        env = {"RANK": str(rank), "WORLD_SIZE": str(len(hosts)), "LOCAL_RANK": "0",
               "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank), "NODE_RANK": str(rank),
               "MASTER_ADDR": addr, "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
               "PYTHONUNBUFFERED": "1",
               "TRAINGUARD_EVENTS": str(work_dir / host / f"rank{rank}.events.jsonl")}
        ranks.append(RankLaunch(rank, 0, host, rank, env, out))
    # The ranks run in "/": the controller's work dir need not exist on the hosts.
    return LaunchPlan(attempt=next(_numbers),
                      command=(python, "-m", "trainguard.check.allreduce", "--mbytes",
                               f"{mbytes:g}"),
                      nodes=tuple(hosts), ranks=tuple(ranks), workdir=Path("/"))


def run_ring(backend: LaunchesAgents, plan: LaunchPlan, timeout_s: float,
             clock: Callable[[], float] = time.time,
             sleep: Callable[[float], None] = time.sleep) -> tuple[str, str]:
    """Launch ``plan`` through the agents and wait for every rank (stopped at ``timeout_s``);
    ``(rank 0's output, why it failed or "")``."""
    attempt = backend.launch(plan)
    why = ""
    try:
        deadline = clock() + timeout_s
        codes: dict[int, int] = {}
        while attempt.running() and clock() < deadline:
            codes.update({ex.rank: ex.returncode for ex in attempt.poll()})
            sleep(0.05)
        codes.update({ex.rank: ex.returncode for ex in attempt.poll()})
        if attempt.running():
            why = f"not done in {timeout_s:g} s"
            attempt.stop(5.0)
        failed = {r: c for r, c in codes.items() if c != 0}
        if failed and not why:
            why = "; ".join(f"rank {r} on {plan.ranks[r].node} exited {c}"
                            for r, c in sorted(failed.items()))
    finally:
        attempt.close()
    try:
        text = plan.ranks[0].output.read_text(errors="replace")
    except OSError:
        text = ""
    return text, why


__all__ = ["CHECK_ATTEMPT_BASE", "CheckAgents", "LaunchesAgents", "ring_plan", "run_ring"]
