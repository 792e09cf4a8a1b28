"""Backends that launch agents, not ranks.

:class:`AgentBackend` wraps a scheduler backend (``local``, ``slurm``: which nodes exist, which
are drained, how to drain one) and an :class:`AgentLauncher` (how one agent per host is started:
a subprocess, optionally through a prefix such as ``ssh {node}`` or a namespace entry; or one
``srun`` task per node). Each attempt starts one agent per node (and per idle spare, which only
watches its kernel log); the agents dial the controller's :class:`~trainguard.agent.hub.AgentHub`
and the attempt is followed as a :class:`~trainguard.agent.remote.RemoteAttempt`.

The run's secret never goes on a command line.
:class:`~trainguard.agent.launch_local.LocalLauncher` writes it to each agent's standard input
(``--secret-stdin``; through ``ssh`` or a namespace entry too), so it is in no process's
environment; Slurm passes it in the step's environment (``TRAINGUARD_AGENT_SECRET``),
which the agent leaves at once (:mod:`trainguard.agent.secret`).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from trainguard.agent.hub import AgentHub
from trainguard.agent.launch_local import ArgvFor, LocalLauncher
from trainguard.agent.remote import AgentProcesses, RemoteAttempt
from trainguard.agent.wire import SECRET_ENV, new_secret
from trainguard.errors import ConfigError
from trainguard.recover.backend import Backend, Capabilities, Closeable, LaunchPlan

if TYPE_CHECKING:
    from trainguard.agent.snapplane import AgentSnapshotPlane
    from trainguard.check.checker import CheckOptions, CheckReport



class AgentLauncher(Protocol):
    """Starts one agent per node for an attempt."""

    name: str

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        """How the ranks reach the first node (rendezvous)."""
        ...

    def start(self, nodes: tuple[str, ...], argv_for: ArgvFor, env: Mapping[str, str],
              log_dir: Path, attempt: int) -> AgentProcesses:
        ...


def agent_argv(python: str, controller: tuple[str, int], node: str | None, session: str,
               attempt: int, extra: Sequence[str] = ()) -> list[str]:
    host, port = controller
    named = ["--node", node] if node is not None else []
    return [python, "-m", "trainguard.agent", "--controller-addr", f"{host}:{port}", *named,
            "--session", session, "--attempt", str(attempt), *extra]


def fencing_orphan_timeout(node_timeout_s: float, orphan_timeout_s: float | None = None
                           ) -> float:
    """How long an agent may miss the controller before it kills its ranks: 10 s less than
    the node timeout, but at least half of it (a heartbeat each way, the agent's check and the
    kill fit in the margin), so a host the controller declares lost has killed its own ranks
    before the relaunch (fencing; docs/multi-host.md, "Fencing a lost host"). `ConfigError` for a
    given one that is not shorter than the node timeout.

    >>> fencing_orphan_timeout(30.0), fencing_orphan_timeout(6.0)
    (20.0, 3.0)
    """
    if orphan_timeout_s is None:
        return max(node_timeout_s / 2, node_timeout_s - 10.0)
    if not 0 < orphan_timeout_s < node_timeout_s:
        raise ConfigError(f"the agents' orphan timeout ({orphan_timeout_s:g} s) must be shorter "
                          f"than the node timeout ({node_timeout_s:g} s): a lost host's ranks "
                          "must be dead before the relaunch")
    return orphan_timeout_s


class AgentBackend:
    """A scheduler backend whose attempts run through agents (see the module docstring)."""

    capabilities = Capabilities(can_signal_rank=True, has_local_pids=False,
                                reads_kernel_logs=True)
    """Ranks are signalled through their host's agent, run on other hosts (no pids of this
    machine), and each agent reads its own host's kernel log."""

    def __init__(self, inner: Backend, launcher: AgentLauncher, *, listen: str = "127.0.0.1",
                 advertise: str | None = None, port: int = 0, node_timeout_s: float = 30.0,
                 connect_timeout_s: float = 60.0, orphan_timeout_s: float | None = None,
                 python: str = sys.executable, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.launcher = launcher
        self.name = inner.name
        self.persistent_nodes = inner.persistent_nodes
        self._listen, self._advertise, self._port = listen, advertise, port
        self.node_timeout_s = node_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.orphan_timeout_s = fencing_orphan_timeout(node_timeout_s, orphan_timeout_s)
        self._python = python
        self._env = dict(os.environ if env is None else env)
        self._clock, self._sleep = clock, sleep
        self.secret = new_secret()
        self.session = uuid.uuid4().hex[:16]
        self.clean_timeout_s: float | None = None
        """How long the snapshot clean-up waits for its agents (None: the plane's default,
        ``trainguard.agent.snapplane.CLEAN_TIMEOUT_S``)."""
        self.hub: AgentHub | None = None
        self._since: float | None = None
        self._seen: set[tuple[object, ...]] = set()
        self._plane: AgentSnapshotPlane | None = None

    # -- the scheduler's part ----------------------------------------------------------------

    def check(self, command: tuple[str, ...], nodes: tuple[str, ...]) -> None:
        self.inner.check(command, nodes)

    def capacity(self) -> int | None:
        return self.inner.capacity()

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        return self.launcher.master_addr(nodes)

    def free_port(self, nodes: tuple[str, ...]) -> int:
        return self.inner.free_port(nodes)

    def unavailable(self, nodes: tuple[str, ...]) -> Mapping[str, str]:
        return self.inner.unavailable(nodes)

    def exclude(self, node: str, reason: str) -> None:
        self.inner.exclude(node, reason)

    # -- agents ------------------------------------------------------------------------------

    def controller(self) -> tuple[str, int]:
        """Start listening (once); the address agents dial."""
        if self.hub is None:
            self.hub = AgentHub(self.secret, self.session, host=self._listen, port=self._port,
                                clock=self._clock)
            self.hub.start()
        host, port = self.hub.address
        return (self._advertise or host, port)

    def reached(self) -> frozenset[str]:
        """Nodes whose agent has connected at least once in this run."""
        return frozenset() if self.hub is None else self.hub.reached()

    def launch(self, plan: LaunchPlan) -> RemoteAttempt:
        address = self.controller()
        assert self.hub is not None
        if self._since is None:
            self._since = self._clock()
        nodes = tuple(dict.fromkeys((*plan.nodes, *plan.watch_nodes)))
        self.hub.expect(plan.attempt, nodes)
        env = {**self._env, SECRET_ENV: self.secret}
        log_dir = plan.ranks[0].output.parent.parent / "agents" if plan.ranks \
            else plan.workdir / "agents"  # a session without ranks (host checks)
        procs = self.launcher.start(
            nodes, lambda node: agent_argv(self._python, address, node, self.session,
                                           plan.attempt), env, log_dir, plan.attempt)
        attempt = RemoteAttempt(
            plan, self.hub, procs, watch_nodes=plan.watch_nodes, kernel_logs=plan.kernel_logs,
            since=self._since, node_timeout_s=self.node_timeout_s,
            connect_timeout_s=self.connect_timeout_s, orphan_timeout_s=self.orphan_timeout_s,
            seen_events=self._seen, clock=self._clock, sleep=self._sleep,
            snapshots=self._plane if plan.host_dirs else None)
        self.hub.operator = attempt.operate
        return attempt

    def snapshot_plane(self, root: Path, run_id: str,
                       nodes: tuple[str, ...]) -> AgentSnapshotPlane:
        """The run's snapshot plane: the agents replicate each host's snapshots to its
        buddy's memory and fetch shards before a restore (:mod:`trainguard.agent.snapplane`)."""
        from trainguard.agent.snapplane import CLEAN_TIMEOUT_S, AgentSnapshotPlane

        def send(node: str, msg: Mapping[str, object]) -> bool:
            return self.hub is not None and self.hub.send(node, msg)

        self._plane = AgentSnapshotPlane(root, run_id, nodes, send, backend=self,
                                         clean_timeout_s=self.clean_timeout_s or CLEAN_TIMEOUT_S)
        return self._plane

    def check_hosts(self, hosts: Sequence[str], options: CheckOptions, work_dir: Path,
                    status: Callable[[str], None]) -> CheckReport:
        """``hosts`` checked by agents started for the purpose (:mod:`trainguard.check`)."""
        from trainguard.check.agents import CheckAgents
        from trainguard.check.checker import Checker

        with CheckAgents(self, hosts, work_dir, connect_timeout_s=self.connect_timeout_s,
                         clock=self._clock, sleep=self._sleep) as agents:
            for host, why in agents.unreachable.items():
                status(f"{host}: {why}")
            report = Checker(agents, clock=self._clock, status=status).run(
                hosts, options, agents.unreachable)
        good = [h for h in hosts if h not in report.flagged()]
        if not options.collective or len(good) < 2:
            return report
        return self._ring(report, good, work_dir / "allreduce", status, options.ring_timeout_s)

    def _ring(self, report: CheckReport, hosts: Sequence[str], work_dir: Path,
              status: Callable[[str], None], timeout_s: float | None) -> CheckReport:
        """The ring-wide all-reduce over the hosts that passed, added to ``report``;
        ``timeout_s``: the ring's and each subset round's limit (None: the defaults)."""
        from trainguard.check.agents import ring_plan, run_ring
        from trainguard.check.allreduce import collective_finding, parse_result
        from trainguard.check.ringrun import (
            RING_TIMEOUT_S,
            SUBSET_TIMEOUT_S,
            distinct_masters,
            split_ring,
            with_ring,
            with_split,
        )

        status(f"ring-wide all-reduce over {len(hosts)} host(s)")
        plan = ring_plan(hosts, work_dir, (self.master_addr(tuple(hosts)),
                                          self.free_port(tuple(hosts))), self._python)
        started = self._clock()
        text, why = run_ring(self, plan, timeout_s or max(RING_TIMEOUT_S, self.connect_timeout_s),
                             self._clock, self._sleep)
        result = parse_result(text) if not why else None
        if result is None and not why:
            why = "no result line from rank 0"
        finding = collective_finding(result, hosts, why)
        status(finding.reason)
        findings = [finding]
        if result is None:  # which host breaks it: rings over subsets (check.ringsplit)
            findings = with_split(finding, split_ring(
                self, hosts, work_dir, distinct_masters(self.master_addr, self.free_port),
                self._python, timeout_s=timeout_s or SUBSET_TIMEOUT_S, status=status,
                clock=self._clock, sleep=self._sleep))
            for f in findings:
                status(f.reason)
        return with_ring(report, findings, self._clock() - started)

    def control(self) -> dict[str, object]:
        """How an operator reaches this run (``trainguard inject``): address, session, secret.
        The supervisor keeps it in a file only its user can read."""
        host, port = self.controller()
        return {"host": host, "port": port, "session": self.session, "secret": self.secret}

    def close(self) -> None:
        if self.hub is not None:
            self.hub.close()
            self.hub = None
        if isinstance(self.inner, Closeable):
            self.inner.close()




LauncherFactory = Callable[[Backend, "str | None"], AgentLauncher]


def _local_launcher(inner: Backend, agent_exec: str | None) -> AgentLauncher:
    return LocalLauncher(agent_exec)


def _slurm_launcher(inner: Backend, agent_exec: str | None) -> AgentLauncher:
    from trainguard.recover.slurm.agents import SlurmLauncher

    if agent_exec is not None:
        raise ConfigError("--agent-exec is for the local backend; Slurm starts the agents "
                          "with srun")
    return SlurmLauncher(inner)


LAUNCHERS: dict[str, LauncherFactory] = {"local": _local_launcher, "slurm": _slurm_launcher}
"""How each scheduler backend starts agents: one line per backend."""


def with_agents(inner: Backend, *, agent_exec: str | None = None, advertise: str | None = None,
                listen: str | None = None, node_timeout_s: float = 30.0,
                secret_file: Path | None = None) -> AgentBackend:
    """``inner``'s nodes, run through agents (the CLI's default). ``agent_exec`` ``manual``
    (local backend): the agents are started by hand (:mod:`trainguard.agent.manual`), given
    the run's secret in ``secret_file`` (default: a new private file in ``$TMPDIR``)."""
    from trainguard.agent.manual import (
        MANUAL,
        MANUAL_CLEAN_TIMEOUT_S,
        MANUAL_CONNECT_TIMEOUT_S,
        ManualLauncher,
    )

    factory = LAUNCHERS.get(inner.name)
    if factory is None:
        raise ConfigError(f"the {inner.name} backend cannot start agents")
    manual = agent_exec == MANUAL and factory is _local_launcher
    launcher = ManualLauncher(secret_file or _private_file()) if manual \
        else factory(inner, agent_exec)
    # Nodes that do not outlive the job are virtual nodes of this machine: their agents run
    # here and dial loopback, unless --agent-exec starts them elsewhere.
    remote = inner.persistent_nodes or agent_exec is not None
    if advertise is None:
        advertise = socket.gethostname() if remote else "127.0.0.1"
    if listen is None:
        listen = advertise if _is_ip(advertise) else ("0.0.0.0" if remote else "127.0.0.1")
    backend = AgentBackend(inner, launcher, listen=listen, advertise=advertise,
                           node_timeout_s=node_timeout_s)
    if manual:  # people start them: more time than a launcher needs
        backend.connect_timeout_s = MANUAL_CONNECT_TIMEOUT_S
        backend.clean_timeout_s = MANUAL_CLEAN_TIMEOUT_S
    return backend


def _private_file() -> Path:
    fd, name = tempfile.mkstemp(prefix="trainguard-agent-secret-")
    os.close(fd)
    return Path(name)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


__all__ = ["LAUNCHERS", "AgentBackend", "AgentLauncher", "agent_argv", "with_agents"]
