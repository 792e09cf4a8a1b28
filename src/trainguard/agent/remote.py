"""The controller's view of one attempt run by agents: an
:class:`~trainguard.recover.backend.AttemptHandle` built only from what the agents send.

What arrives is written where the supervisor keeps its records: each rank's output and SDK
events go to the same run-directory files a single-host run writes (``attempts/<i>/<node>/``),
so every reader of a run directory (the supervisor's own watches, ``trace show``, the report)
works unchanged, and nothing is ever read from another host's filesystem.

A host whose agent is silent for ``node_timeout_s`` (crashed host, cut network, killed agent),
or whose agent never connects, is **lost**: a fatal ``node_lost`` event on that host, which the
supervisor handles like any fatal node evidence (stop, implicate, exclude, resume on a spare).
If no agent at all connects, the launch itself is broken (a wrong controller address, a
launcher that cannot start agents): that is a :class:`~trainguard.errors.LaunchError`, never a
reason to take hosts out of service.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from trainguard.agent.clock import ClockOffsets
from trainguard.agent.hub import AgentHub, Inbound
from trainguard.agent.launchlog import launcher_ended, no_agent_error
from trainguard.agent.mirror import AppendFiles
from trainguard.agent.validate import check_message, rank_entries, rank_key
from trainguard.agent.wire import WireError, integer
from trainguard.errors import LaunchError, TrainguardError
from trainguard.evidence.events import STORED_CHARS, EvidenceLine, FailureEvent
from trainguard.recover.backend import LaunchPlan, RankExit
from trainguard.recover.liveness import ProcSample
from trainguard.taxonomy import Action, Category, Severity

log = logging.getLogger(__name__)

_STOP_MARGIN_S = 5.0
"""Beyond the stop grace, how long to wait for agents to report the last exits."""

_BYE_WAIT_S = 3.0
"""How long the attempt's end waits for each agent's last words (what it read after its ranks
ended) before it stops listening."""


class AgentProcesses(Protocol):
    """The local processes that started the agents (subprocesses, ``srun``): what the
    controller can see of them without the network."""

    def exited(self) -> Mapping[str, int]:
        """Nodes whose agent launcher ended, with its exit status."""
        ...

    def close(self, wait_s: float) -> None:
        """The attempt is over: give the launchers ``wait_s`` to end, then kill them."""
        ...


@runtime_checkable
class LauncherLogs(Protocol):
    """Agent launchers whose output this machine keeps, one log per node: quoted when a
    launcher ends before its agent connects (:mod:`trainguard.agent.launchlog`)."""

    def log_of(self, node: str) -> Path | None:
        """Where ``node``'s launcher wrote its output (None: nowhere here)."""
        ...


@runtime_checkable
class Fences(Protocol):
    """Agent launchers that can fence a lost host: kill its agent, and with it its ranks,
    from here (the launcher's process group, the Slurm step or job), before a relaunch."""

    def fence(self, nodes: tuple[str, ...]) -> None:
        """Kill ``nodes``' agents now and wait (bounded) until they are gone."""
        ...


class SnapshotLink(Protocol):
    """The snapshot plane's side of an attempt (:class:`trainguard.agent.snapplane.
    AgentSnapshotPlane`): what goes into each launch message, what it receives, what it
    sends as the agents report."""

    def launch_fields(self, node: str) -> dict[str, Any]:
        """The launch message's ``snapshot`` field for ``node`` (without root and run)."""
        ...

    def claims(self, req: int) -> bool:
        """A ``reply`` with this ``req`` answers the plane's request."""
        ...

    def receive(self, node: str, msg: Mapping[str, Any]) -> None:
        """A checked ``snapinv``, ``snapserve`` or claimed ``reply`` from ``node``."""
        ...

    def tick(self) -> None:
        """Send what the agents' reports made possible (buddies' addresses, fetches)."""
        ...


def snapshot_field(host_dir: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The launch message's ``snapshot`` field: the host's directory as root and run id
    (``<root>/<run>/<node>``, :class:`~trainguard.snapshot.layout.HostDirs`), and ``fields``.
    Without a plane (warm standbys only) ``replicate`` is false: the agent touches the lease."""
    host = Path(host_dir)
    return {"root": str(host.parent.parent), "run": host.parent.name, "replicate": False,
            **fields}


def node_lost_event(node: str, why: str) -> FailureEvent:
    summary = f"node lost: {why}"
    return FailureEvent(
        category=Category.SCHEDULER_NODE_FAILURE, action=Action.EXCLUDE_NODE,
        severity=Severity.FATAL, signature="node_lost", summary=summary[:300], host=node,
        evidence=(EvidenceLine("agent", 0, summary[:STORED_CHARS]),))


def _event_key(ev: FailureEvent) -> tuple[object, ...]:
    return (ev.host, ev.signature, tuple((e.path, e.line_no, e.text) for e in ev.evidence))


def spare_warm_field(plan: LaunchPlan, spare: str) -> dict[str, Any] | None:
    """What a spare's agent needs to pre-warm standbys for the ranks it may take over: the
    first node's slot environments, moved to the spare's warm directory (None: warm starts
    off, or no directory for the spare)."""
    host = plan.host_dirs.get(spare)
    if host is None or not plan.nodes:
        return None
    envs = []
    for rl in plan.ranks:
        if rl.node == plan.nodes[0] and "TRAINGUARD_WARM_DIR" in rl.env:
            envs.append({**rl.env, "TRAINGUARD_WARM_DIR": str(Path(host) / "warm"),
                         "TRAINGUARD_NODE": spare})
    return {"host_dir": host, "envs": envs} if envs else None


class RemoteAttempt:
    """One attempt's ranks on the agents' hosts (see the module docstring)."""

    def __init__(self, plan: LaunchPlan, hub: AgentHub, procs: AgentProcesses, *,
                 watch_nodes: Iterable[str] = (), kernel_logs: Mapping[str, str] | None = None,
                 since: float = 0.0, node_timeout_s: float = 30.0,
                 connect_timeout_s: float = 60.0, orphan_timeout_s: float = 30.0,
                 seen_events: set[tuple[object, ...]] | None = None,
                 snapshots: SnapshotLink | None = None,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.plan = plan
        self._hub = hub
        self._procs = procs
        self._clock = clock
        self._sleep = sleep
        self.node_timeout_s = node_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._node_of = {rl.rank: rl.node for rl in plan.ranks}
        self._files = {rl.rank: (rl.output, Path(rl.env["TRAINGUARD_EVENTS"]))
                       for rl in plan.ranks}
        for output, events in self._files.values():
            output.parent.mkdir(parents=True, exist_ok=True)
            output.touch(exist_ok=True)
            events.touch(exist_ok=True)
        self._mirror = AppendFiles()
        """The rank files' append descriptors, kept open across messages."""
        self.nodes = tuple(dict.fromkeys((*plan.nodes, *watch_nodes)))
        logs = kernel_logs or {}
        self._launch: dict[str, dict[str, Any]] = {node: {
            "t": "launch", "attempt": plan.attempt, "command": list(plan.command),
            "workdir": str(plan.workdir), "kernel_log": logs.get(node), "since": since,
            "orphan_timeout_s": orphan_timeout_s,
            "ranks": [{"rank": rl.rank, "local_rank": rl.local_rank,
                       "node_rank": rl.node_rank, "env": dict(rl.env)}
                      for rl in plan.ranks if rl.node == node]} for node in self.nodes}
        self._snap = snapshots
        for node in watch_nodes:  # hot spares keep standby interpreters warm too
            spare_warm = spare_warm_field(plan, node)
            if spare_warm is not None and not self._launch[node]["ranks"]:
                self._launch[node]["warm"] = spare_warm
        for node, launch in self._launch.items():
            if node in plan.host_dirs:
                launch["snapshot"] = snapshot_field(
                    plan.host_dirs[node], snapshots.launch_fields(node) if snapshots else {})
        self._sent: dict[str, int] = {}
        """The connection each node's launch message went out on."""
        self._answered: set[str] = set()
        """Nodes whose agent answered the launch (``started`` or a launch ``error``)."""
        self._exits: list[RankExit] = []
        self._reported: set[int] = set()
        self._stopped: dict[str, frozenset[int]] = {}
        self._samples: dict[int, ProcSample] = {}
        """The newest ``procstat`` of each rank not yet taken by :meth:`proc_samples`."""
        self._events: list[FailureEvent] = []
        self._seen = seen_events if seen_events is not None else set()
        self.lost: dict[str, str] = {}
        self.broken: str | None = None
        """Why the launch is broken (no agent connected), once found: said once, by the
        :class:`~trainguard.errors.LaunchError` that :meth:`poll` raised."""
        self.errors: list[str] = []
        self._node_replies: dict[tuple[int, str], Mapping[str, Any]] = {}
        self._req = 0
        self.pids_seen: dict[int, int] = {}
        self.started_at = clock()
        self._since = since
        self._clocks = ClockOffsets()

    # -- following the agents ----------------------------------------------------------------

    def _pump(self) -> None:
        peers = self._hub.peers()
        for node, view in peers.items():
            # Sent on each new connection until the agent answers (it ignores a repeat): a
            # connection can drop between our send and its read.
            if view.connected and node not in self._answered and node not in self.lost \
                    and self._sent.get(node) != view.connection \
                    and self._hub.send(node, self._with_elapsed(self._launch[node])):
                self._sent[node] = view.connection
        now = self._clock()
        for node, view in peers.items():  # each host's clock, sampled (trainguard.agent.clock)
            if view.connected and node in self._launch and self._clocks.due(node, now) \
                    and self._hub.send(node, {"t": "clock", "t0": now}):
                self._clocks.sent(node, now)
        self._take()
        if self._snap is not None:
            self._snap.tick()
        self._liveness(peers)

    def _take(self) -> None:
        """What the agents sent since the last look, each message checked and dispatched."""
        for inbound in self._hub.take():
            try:
                check_message(inbound.msg)  # every field read below has its type
                self._dispatch(inbound)
            except (TrainguardError, OSError, ValueError, LookupError, TypeError,
                    AttributeError, OverflowError) as exc:  # a lying agent: drop, go on
                log.warning("message %r from %s's agent ignored: %s",
                            str(inbound.msg.get("t"))[:40], inbound.node, exc)

    def _dispatch(self, inbound: Inbound) -> None:
        msg, node = inbound.msg, inbound.node
        kind = msg.get("t")
        if kind in ("out", "sdk"):
            rank = self._own_rank(node, integer(msg, "rank"))
            # check_message has made sure ``data`` is bytes
            self._mirror.append(self._files[rank][0 if kind == "out" else 1], msg["data"])
        elif kind == "exit":
            rank = self._own_rank(node, integer(msg, "rank"))
            if rank not in self._reported:
                self._reported.add(rank)
                self._exits.append(RankExit(rank, integer(msg, "code")))
        elif kind == "clock":
            self._clocks.reply(node, msg.get("t0"), msg.get("host"), inbound.at)
        elif kind == "procstat":
            self._procstat(node, msg.get("ranks"))
        elif kind == "procs":
            stopped = msg.get("stopped")
            if isinstance(stopped, list):
                self._stopped[node] = frozenset(r for r in stopped if isinstance(r, int))
        elif kind == "klog":
            raw = msg.get("event")
            if not isinstance(raw, dict):
                raise WireError("klog: event must be a map")
            ev = FailureEvent.from_dict({**raw, "host": node})
            key = _event_key(ev)
            if key not in self._seen:  # each attempt's agent reads the log's recent history
                self._seen.add(key)
                self._events.append(ev)
        elif kind == "started":
            self._answered.add(node)
            pids = msg.get("pids")
            if isinstance(pids, dict):
                self.pids_seen.update({rank_key(r, "started"): p for r, p in pids.items()
                                       if self._node_of.get(rank_key(r, "started")) == node})
        elif kind in ("snapinv", "snapserve") and self._snap is not None:
            self._snap.receive(node, msg)
        elif kind == "reply":
            if self._snap is not None and self._snap.claims(integer(msg, "req")):
                self._snap.receive(node, msg)
            else:
                self._node_replies[(integer(msg, "req"), node)] = msg
        elif kind == "error":
            text = f"{node}: {str(msg.get('what'))[:40]}: {str(msg.get('text'))[:500]}"
            self.errors.append(text)
            log.warning("agent error: %s", text)
            if msg.get("what") == "launch":
                self._answered.add(node)
                for rank, n in self._node_of.items():
                    if n == node and rank not in self._reported:
                        self._reported.add(rank)
                        self._exits.append(RankExit(rank, 127))

    def _procstat(self, node: str, ranks: object) -> None:
        """An agent's ``[[rank, state, cpu_s], ...]`` (its shape checked by check_message):
        every rank its host's, else the whole message is dropped."""
        if not isinstance(ranks, list) or len(ranks) > len(self._node_of):
            raise WireError("procstat: ranks must be a list of at most one entry per rank")
        found: dict[int, ProcSample] = {}
        for rank, state, cpu in ranks:
            self._own_rank(node, rank)
            found[rank] = ProcSample(rank, self._clock(), state, float(cpu))
        self._samples.update(found)

    def proc_samples(self) -> list[ProcSample]:
        """Each rank's newest state and CPU time its agent sent since the last call (the
        caller times them: they are as old as its last poll at most)."""
        samples, self._samples = list(self._samples.values()), {}
        return samples

    def _with_elapsed(self, launch: dict[str, Any]) -> dict[str, Any]:
        """The launch message with how long ago the run started: a duration, which the agent
        places on its own clock (the controller's may be off; trainguard.agent.clock)."""
        if self._since <= 0:
            return launch
        return {**launch, "elapsed_s": max(0.0, self._clock() - self._since)}

    def clock_offsets(self) -> dict[str, dict[str, float | int]]:
        """Each host's clock minus the controller's, from the sample with the smallest round
        trip, with its uncertainty (for the attempt's record)."""
        return {node: off.to_dict() for node, off in sorted(self._clocks.offsets().items())}

    def _own_rank(self, node: str, rank: int) -> int:
        if self._node_of.get(rank) != node:
            raise WireError(f"rank {rank} does not run on {node}")
        return rank

    def _liveness(self, peers: Mapping[str, Any]) -> None:
        if self.broken is not None:
            return  # said once; what is left is to stop and close
        now = self._clock()
        launchers = self._procs.exited()
        anyone = any(v.ever_connected for v in peers.values())
        if not anyone and (now - self.started_at > self.connect_timeout_s
                           or len(launchers) == len(self.nodes)):
            self.broken = self._no_agent(launchers)
            raise LaunchError(self.broken)
        for node in self.nodes:
            view = peers.get(node)
            if view is None or node in self.lost:
                continue
            why = None
            if not view.ever_connected:
                # A launcher that failed while no agent has connected yet may be the launch
                # that is broken for all (they fail one by one): lost once another connects.
                if node in launchers and anyone:
                    why = (f"{node}'s agent did not connect: "
                           f"{self._launcher_ended(node, launchers[node])}")
                elif now - self.started_at > self.connect_timeout_s:
                    why = f"{node}'s agent did not connect within {self.connect_timeout_s:g} s"
            elif not view.connected or now - view.last_seen > self.node_timeout_s:
                silent = now - view.last_seen
                if silent > self.node_timeout_s:
                    how = view.closed_reason or "no heartbeat"
                    why = f"{node}'s agent silent for {silent:.0f} s ({how})"
            if why is not None:
                self.lost[node] = why
                log.warning("%s", why)
                self._events.append(node_lost_event(node, why))

    def _log_of(self, node: str) -> Path | None:
        return self._procs.log_of(node) if isinstance(self._procs, LauncherLogs) else None

    def _launcher_ended(self, node: str, status: int) -> str:
        return launcher_ended(node, status, self._log_of(node))

    def _no_agent(self, launchers: Mapping[str, int]) -> str:
        """The error of a launch no agent connected from (:func:`no_agent_error`)."""
        return no_agent_error(self.nodes, launchers, {n: self._log_of(n) for n in self.nodes},
                              self.errors, self.connect_timeout_s)

    # -- AttemptHandle -----------------------------------------------------------------------

    def poll(self) -> list[RankExit]:
        self._pump()
        exits, self._exits = self._exits, []
        return exits

    def running(self) -> frozenset[int]:
        return frozenset(r for r in self._node_of if r not in self._reported)

    def pids(self) -> Mapping[int, int]:
        """Each rank's process id *on its own host*, as its agent reported it (for people and
        ``state.json``; the backend declares it has no local pids, so nothing here signals or
        inspects them)."""
        return dict(self.pids_seen)

    def is_stopped(self, rank: int) -> bool:
        return rank in self._stopped.get(self._node_of.get(rank, ""), frozenset())

    def signal_rank(self, rank: int, signum: int) -> None:
        node = self._node_of.get(rank)
        if node is None:
            raise LaunchError(f"no rank {rank} in this attempt")
        if not self._hub.send(node, {"t": "signal", "rank": rank, "signum": int(signum)}):
            raise LaunchError(f"{node}'s agent is not connected")

    def node_events(self) -> list[FailureEvent]:
        """Kernel-log evidence from the agents and lost nodes, since the last call."""
        events, self._events = self._events, []
        return events

    def settling(self) -> bool:
        """An agent is disconnected but not yet declared lost: a failure seen now may be its
        consequence (peers of a dead host crash first), so wait for the verdict."""
        peers = self._hub.peers()
        return any(v.ever_connected and not v.connected and n not in self.lost
                   for n, v in peers.items() if n in self.plan.nodes)

    def append_kernel_line(self, node: str, line: str) -> None:
        if not self._hub.send(node, {"t": "xid", "line": line}):
            raise LaunchError(f"{node}'s agent is not connected")

    def request(self, nodes: Iterable[str], msg: Mapping[str, Any],
                timeout_s: float) -> dict[str, Mapping[str, Any]]:
        """``msg`` (with a fresh ``req``) to each node's agent at once; their replies, by node.
        A node whose agent is not connected, or did not answer within ``timeout_s``, is
        absent."""
        return self.request_each({n: msg for n in nodes}, timeout_s)

    def request_each(self, messages: Mapping[str, Mapping[str, Any]],
                     timeout_s: float) -> dict[str, Mapping[str, Any]]:
        """A message of its own to each node's agent, all sent before any answer is awaited
        (one ``req`` for all); replies by node, as :meth:`request`."""
        self._req += 1
        req = self._req
        asked = {n for n, msg in messages.items() if self._hub.send(n, {**msg, "req": req})}
        deadline = self._clock() + timeout_s
        got: dict[str, Mapping[str, Any]] = {}
        while asked - set(got) - set(self.lost) and self._clock() < deadline:
            self._sleep(0.02)
            self._pump()
            got.update(self._take_replies(req))
        got.update(self._take_replies(req))
        return got

    def connected(self) -> frozenset[str]:
        """Nodes whose agent is connected now."""
        self._pump()
        return frozenset(n for n, v in self._hub.peers().items()
                         if v.connected and n in self.nodes)

    def collect(self, timeout_s: float) -> dict[int, Mapping[str, Any]]:
        """Each rank's process state, collective state and stacks, asked of every agent at
        once; ranks of hosts that did not answer within ``timeout_s`` + 2 s are absent."""
        got = self.request(self.plan.nodes, {"t": "collect", "timeout_s": timeout_s},
                           timeout_s + 2.0)
        out: dict[int, Mapping[str, Any]] = {}
        for node, reply in got.items():
            try:
                entries = rank_entries(reply.get("ranks"))
            except WireError as exc:  # a lying agent: its host's ranks are simply unknown
                log.warning("collect reply from %s's agent ignored: %s", node, exc)
                continue
            out.update({rank: info for rank, info in entries.items()
                        if self._node_of.get(rank) == node})
        return out

    def _take_replies(self, req: int) -> dict[str, Mapping[str, Any]]:
        found = {node: msg for (r, node), msg in self._node_replies.items() if r == req}
        for node in found:
            del self._node_replies[(req, node)]
        return found

    def operate(self, msg: Mapping[str, Any]) -> dict[str, Any]:
        """An operator's request (``trainguard inject`` against the running job), answered in
        one line: ``signal`` a rank, or append a kernel-log ``line`` on a node."""
        op = msg.get("op")
        try:
            if op == "signal":
                rank, signum = integer(msg, "rank"), integer(msg, "signum")
                if not 0 < signum < signal.NSIG:
                    raise WireError(f"no signal {signum}")
                self.signal_rank(rank, signum)
                pid = self.pids_seen.get(rank)
                return {"ok": True, "message": f"sent {signal.Signals(signum).name} to rank "
                        f"{rank} on {self._node_of[rank]}"
                        + (f" (pid {pid} there)" if pid is not None else "")}
            if op == "kernel_line":
                node, line = msg.get("node"), msg.get("line")
                if node not in self.nodes or not isinstance(line, str) or len(line) > 4096:
                    raise WireError(f"node {str(node)[:64]!r} is not part of this attempt "
                                    f"({', '.join(self.nodes)})")
                self.append_kernel_line(str(node), line)
                return {"ok": True, "message": f"appended to {node}'s kernel log"}
        except (LaunchError, WireError) as exc:
            return {"ok": False, "message": str(exc)}
        return {"ok": False, "message": f"unknown request {str(op)[:40]!r}"}

    def stop(self, grace_s: float) -> list[RankExit]:
        """Every agent stops its ranks (TERM, KILL after ``grace_s``); ranks whose host is
        lost or does not answer in time are reported killed. After a broken launch (no agent
        ever connected) no rank ever started: none is reported."""
        with contextlib.suppress(LaunchError):  # found broken now: said by the attempt's end
            self._pump()
        if self.broken is not None:
            self._reported.update(self._node_of)
            self._exits = []
            return []
        for node in {self._node_of[r] for r in self.running()}:
            self._hub.send(node, {"t": "stop", "grace_s": grace_s})
        deadline = self._clock() + grace_s + _STOP_MARGIN_S
        while self.running() and self._clock() < deadline:
            if all(self._node_of[r] in self.lost for r in self.running()):
                break
            self._sleep(0.05)
            self._pump()
        for rank in sorted(self.running()):
            self._reported.add(rank)
            self._exits.append(RankExit(rank, -signal.SIGKILL))
        exits, self._exits = self._exits, []
        return exits

    def _last_words(self) -> None:
        """Tell every agent ``bye`` and take what each sends before it hangs up: its last look
        at the ranks' files and at its kernel log (an XID logged as the ranks ended), up to
        :data:`_BYE_WAIT_S`. Nothing is launched and no host is judged lost meanwhile: an agent
        hanging up now is the agent obeying."""
        peers = self._hub.peers()
        waiting = {n for n in self.nodes if n not in self.lost
                   and (view := peers.get(n)) is not None and view.connected}
        for node in self.nodes:
            self._hub.send(node, {"t": "bye"})
        deadline = self._clock() + _BYE_WAIT_S
        while True:
            self._take()
            peers = self._hub.peers()
            waiting = {n for n in waiting if (view := peers.get(n)) is not None
                       and view.connected}
            if not waiting:
                self._take()  # what came in just before the last hang-up
                return
            if self._clock() >= deadline:
                log.info("agent(s) of %s did not hang up within %g s of bye",
                         ", ".join(sorted(waiting)), _BYE_WAIT_S)
                return
            self._sleep(0.02)

    def close(self) -> None:
        """The attempt is over: every agent exits (its ranks are gone by now). A lost host is
        fenced first, before anything is relaunched: its agent's launcher is killed (the agent
        and its ranks die with it), or the agents' Slurm step or job is cancelled; a lost
        host's agent that reconnects later is told its attempt is over and kills its ranks."""
        with contextlib.suppress(LaunchError):  # a broken launch: nothing more to say of it
            self._pump()
        self._last_words()
        self._mirror.close()  # the last pieces are written; nothing more is mirrored
        lost = tuple(n for n in self.nodes if n in self.lost)
        if lost and isinstance(self._procs, Fences):
            log.info("fencing lost host(s) %s", ", ".join(lost))
            self._procs.fence(lost)
        self._procs.close(wait_s=5.0)


__all__ = ["AgentProcesses", "Fences", "LauncherLogs", "RemoteAttempt", "SnapshotLink",
           "node_lost_event", "snapshot_field"]
