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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from trainguard.evidence.events import FailureEvent
from trainguard.recover.launchplan import LaunchPlan, RankLaunch
from trainguard.recover.liveness import ProcSample
from trainguard.snapshot.plane import SnapshotPlane


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do, declared (``capabilities = Capabilities(...)`` on the class) so the
    supervisor asks instead of testing the backend's name.

        caps = registry.capabilities_of(backend)
        if caps.reads_kernel_logs: ...   # each host's agent follows its own kernel log
    """

    can_signal_rank: bool = True
    """``AttemptHandle.signal_rank`` reaches a rank (fault drills, stack requests)."""
    has_local_pids: bool = True
    """The pids a handle reports are processes of this machine (``/proc``, py-spy work)."""
    reads_kernel_logs: bool = False
    """Each node's kernel log is read on the node (by its agent), not from this machine."""


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


@runtime_checkable
class ReportsNodeEvents(Protocol):
    """A handle whose hosts classify their own node evidence (kernel logs read by agents)."""

    def node_events(self) -> list[FailureEvent]:
        """Evidence found on the hosts since the last call."""
        ...


@runtime_checkable
class Settles(Protocol):
    """A handle that can be between a host's loss and the verdict on it."""

    def settling(self) -> bool:
        """A host just went silent: rank exits now may be its consequence; wait."""
        ...


@runtime_checkable
class WritesKernelLogs(Protocol):
    """A handle that appends to a node's kernel log on the node itself (XID drills)."""

    def append_kernel_line(self, node: str, line: str) -> None:
        ...


@runtime_checkable
class ReportsRankProcs(Protocol):
    """A handle whose hosts sample their own ranks' processes (state, CPU time) in ``/proc``."""

    def proc_samples(self) -> list[ProcSample]:
        """Each rank's newest sample received since the last call (the caller times them)."""
        ...


@runtime_checkable
class CollectsRankState(Protocol):
    """A handle whose hosts collect process states, collective states and stacks."""

    def collect(self, timeout_s: float) -> dict[int, Mapping[str, Any]]:
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


@runtime_checkable
class DeclaresCapabilities(Protocol):
    """A backend that declares its :class:`Capabilities`."""

    capabilities: Capabilities


@runtime_checkable
class HasControl(Protocol):
    """A backend an operator reaches while the run goes on (``trainguard inject`` through the
    controller)."""

    def control(self) -> dict[str, object]:
        """Address, session and secret of the controller."""
        ...


@runtime_checkable
class HasSnapshotPlane(Protocol):
    """A backend that moves the memory snapshot tier's bytes between its hosts
    (docs/design/recovery-in-seconds.md): the local backend's virtual nodes share this
    machine's memory; agents replicate over the network."""

    def snapshot_plane(self, root: Path, run_id: str,
                       nodes: tuple[str, ...]) -> SnapshotPlane:
        """The run's plane over ``nodes`` (the nodes and the spares), snapshots kept under
        ``root/run_id/<node>`` on each host; called once per run, before the first launch."""
        ...


@runtime_checkable
class Closeable(Protocol):
    """A backend holding something for the whole run (a reaper, a controller)."""

    def close(self) -> None:
        ...


__all__ = ["AttemptHandle", "Backend", "Capabilities", "Closeable", "CollectsRankState",
           "DeclaresCapabilities", "HasControl", "HasSnapshotPlane", "LaunchPlan", "RankExit",
           "RankLaunch", "ReportsNodeEvents", "ReportsRankProcs", "Settles", "WritesKernelLogs"]
