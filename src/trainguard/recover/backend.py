"""The launch-backend interface: how one attempt's ranks are started, watched and stopped.

The supervisor decides *what* runs where (a :class:`LaunchPlan`: the command, the nodes in rank
order, each rank's environment); a backend decides *how*:

- ``local`` (this package): virtual nodes on this machine, one process group per rank;
- ``slurm``: one ``srun`` step per attempt on the allocation's nodes, excluded nodes left out;
- ``kubernetes``: one pod per node (an indexed Job), excluded nodes as anti-affinity.

Backends report per-rank exits where they can see them; a backend that only sees one status per
node (``srun`` without per-task status) reports it for every rank of the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RankLaunch:
    """One process of an attempt."""

    rank: int
    local_rank: int
    node: str
    node_rank: int
    env: Mapping[str, str]
    """Variables added to the backend's base environment (torch.distributed + trainguard)."""
    output: Path
    """Where the rank's stdout and stderr go (appended)."""


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """Everything a backend needs to start one attempt."""

    attempt: int
    command: tuple[str, ...]
    nodes: tuple[str, ...]
    ranks: tuple[RankLaunch, ...]
    workdir: Path
    """Working directory of every rank."""
    watch_nodes: tuple[str, ...] = ()
    """Idle spares: no ranks, but their kernel logs are followed (backends with agents)."""
    kernel_logs: Mapping[str, str] = field(default_factory=dict)
    """Each node's kernel log (the ``--kernel-log`` template expanded), for backends whose
    agents read it on the node itself."""


@dataclass(frozen=True, slots=True)
class RankExit:
    rank: int
    returncode: int
    """Negative: killed by that signal (``subprocess`` convention)."""


class AttemptHandle(Protocol):
    """A launched attempt, as the supervisor sees it."""

    def poll(self) -> list[RankExit]:
        """Ranks that exited since the last call (never reported twice)."""
        ...

    def running(self) -> frozenset[int]:
        """Ranks not yet reported as exited."""
        ...

    def pids(self) -> Mapping[int, int]:
        """Process ids by rank, where the backend can see them (empty for remote backends)."""
        ...

    def is_stopped(self, rank: int) -> bool:
        """The rank's process is stopped (SIGSTOP); False where the backend cannot tell."""
        ...

    def signal_rank(self, rank: int, signum: int) -> None:
        """Deliver ``signum`` to the rank's process group (fault injection, operators)."""
        ...

    def stop(self, grace_s: float) -> list[RankExit]:
        """Stop every remaining rank: SIGTERM (and SIGCONT) to each process group, SIGKILL
        after ``grace_s``; returns when all are gone, with their exits."""
        ...

    def close(self) -> None:
        """The attempt is over (its ranks are gone): release what launched it."""
        ...


class Backend(Protocol):
    """Starts attempts and knows the nodes' addresses."""

    name: str
    persistent_nodes: bool
    """Nodes outlive the job (real machines): exclusions stay until an operator releases them.
    False for virtual nodes, whose exclusions end with the session."""

    def check(self, command: tuple[str, ...], nodes: tuple[str, ...]) -> None:
        """Raise :class:`~trainguard.errors.LaunchError` (one clear line) when the job cannot
        launch at all: the command does not exist, a node is unknown..."""
        ...

    def capacity(self) -> int | None:
        """Ranks one node can hold (GPUs, CPU slots); None when the backend cannot tell."""
        ...

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        """Address of the rendezvous host (the first node) as the ranks should dial it."""
        ...

    def free_port(self, nodes: tuple[str, ...]) -> int:
        """A TCP port likely free on the first node."""
        ...

    def launch(self, plan: LaunchPlan) -> AttemptHandle:
        ...

    def unavailable(self, nodes: tuple[str, ...]) -> Mapping[str, str]:
        """Nodes among ``nodes`` the scheduler will not run on (drained, down), with why."""
        ...

    def exclude(self, node: str, reason: str) -> None:
        """Take ``node`` out of the scheduler's service (Slurm: drain with ``reason``); the
        supervisor already avoids it. A no-op where the backend has no scheduler."""
        ...


__all__ = ["AttemptHandle", "Backend", "LaunchPlan", "RankExit", "RankLaunch"]
