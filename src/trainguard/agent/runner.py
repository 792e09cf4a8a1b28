"""``trainguard agent``: one per host and attempt, the controller's hands on that host.

It dials the controller, waits for the attempt's launch message, starts the host's ranks, and
from then on streams what happens (output, SDK events, exits, stopped ranks, kernel-log
evidence) while it carries out commands (stop, signal a rank, collect stacks and collective
state, append a kernel-log line for a fault drill). It never outlives its controller for long:
when the controller has been unreachable for the orphan timeout (no message, not even its
heartbeat), the agent stops its ranks and exits, so a killed controller leaves nothing behind
on any host.

Fencing: the controller's silence is a lease. Once it has run out (a cut link, or this agent
stopped and continued), the agent kills its ranks at once, before it handles anything else
(output, commands, a reconnect), and exits: the controller's node timeout is longer than the
orphan timeout it gives the agent, so a lost host's ranks are dead before the relaunch. A
controller that answers a reconnect with "your attempt is over" (:class:`StaleAttempt`) gets
the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.agent.checks import CHECK_COMMANDS, LinkServers, probe_link, run_check
from trainguard.agent.client import Connection, Identity, Outbox, StaleAttempt, dial
from trainguard.agent.clock import clock_reply, run_start_on_host
from trainguard.agent.host import HostWork
from trainguard.agent.snapshots import SnapshotService, copy_fields, remove_run
from trainguard.agent.wire import WireError, integer, pack
from trainguard.errors import LaunchError, SnapshotError, TrainguardError
from trainguard.snapshot.layout import HostDirs

log = logging.getLogger(__name__)

EXIT_ORPHANED = 3
"""The agent's exit status when it gave up on an unreachable controller."""
EXIT_FENCED = 4
"""The agent's exit status when the controller said its attempt is over."""

_ENDINGS = {0: "the controller ended the attempt",
            EXIT_ORPHANED: "gave up on an unreachable controller",
            EXIT_FENCED: "the controller said the attempt is over", 143: "terminated"}


def connected_line(cfg: AgentConfig) -> str:
    """The status line an agent logs once, when it first reaches its controller."""
    me = cfg.me
    return (f"agent of {me.node}: connected to controller {cfg.host}:{cfg.port} "
            f"(session {me.session}, attempt {me.attempt})")


def done_line(node: str, status: int) -> str:
    """The status line an agent logs as it exits.

    >>> done_line("host1", 0)
    'agent of host1: done, exit status 0 (the controller ended the attempt)'
    """
    why = _ENDINGS.get(status)
    return f"agent of {node}: done, exit status {status}" + (f" ({why})" if why else "")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    host: str
    port: int
    me: Identity
    work_dir: Path
    poll_s: float = 0.05
    """How often the ranks are looked at. Each look costs a wake-up of the event loop (about
    0.2 ms of CPU on a small VM): at 50 ms an agent with 8 ranks stays under 1 % of a core, and
    a rank's line still reaches the controller well within 100 ms (benchmarks/bench_agents.py)."""
    heartbeat_s: float = 1.0
    orphan_timeout_s: float = 15.0
    """Give up (stop the ranks, exit) after the controller is silent this long; the launch
    message may change it."""
    stop_grace_s: float = 10.0


class Agent:
    """One agent's life (see the module docstring); :meth:`run` returns its exit status."""

    def __init__(self, config: AgentConfig, host: HostWork,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = config
        self.host = host
        self._clock = clock
        self.outbox = Outbox()
        self._conn: Connection | None = None
        self._heard = clock()
        self._orphan_s = config.orphan_timeout_s
        self._done = asyncio.Event()
        self._status = 0
        self._stopping = False
        self._launched = False
        self._fenced = False
        self._links = LinkServers()
        self._reached = False
        """The controller answered once (its status line is logged)."""
        self._snaps: SnapshotService | None = None
        self._fetching: set[int] = set()
        """Ranks whose shard is still to be fetched before this host's ranks start."""
        self._fetched = asyncio.Event()

    def run(self) -> int:
        return asyncio.run(self._main())

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._terminated)
        pump = asyncio.create_task(self._pump())
        link = asyncio.create_task(self._link())
        await self._done.wait()
        link.cancel()
        pump.cancel()
        await self._flush()
        if self._conn is not None:
            self._conn.writer.close()
        self._links.close()
        if self._snaps is not None:
            self._snaps.close()
        self.host.close()
        log.info("%s", done_line(self.cfg.me.node, self._status))
        return self._status

    def _terminated(self) -> None:
        log.info("agent of %s: terminated; stopping its ranks", self.cfg.me.node)
        asyncio.get_running_loop().create_task(self._stop_and_exit(143))

    async def _stop_and_exit(self, status: int) -> None:
        if not self._stopping:
            self._stopping = True
            await asyncio.to_thread(self.host.stop, self.cfg.stop_grace_s)
        self._status = status
        self._done.set()

    def _lease_lost(self) -> bool:
        """The controller has been silent for longer than the orphan timeout."""
        return self._clock() - self._heard > self._orphan_s

    def _fence(self, why: str, status: int = EXIT_ORPHANED) -> None:
        """Kill the ranks now, in the loop's own thread (nothing else runs first: no output
        relayed, no command obeyed, no grace in which a rank could write), then exit."""
        if not self._fenced:
            self._fenced = self._stopping = True
            log.warning("agent of %s: %s: killing its ranks", self.cfg.me.node, why)
            self.host.stop(0.0)
            if self._snaps is not None:  # a fenced agent neither replicates nor serves
                self._snaps.close(wait=False)
        self._status = status
        self._done.set()

    def _fence_if_lease_lost(self) -> bool:
        if self._fenced:
            return True
        if not self._lease_lost():
            return False
        self._fence(f"controller {self.cfg.host}:{self.cfg.port} silent for "
                    f"{self._clock() - self._heard:.0f} s (orphan timeout {self._orphan_s:g} s)")
        return True

    async def _flush(self) -> None:
        """Last output and exits, sent if the connection is still there."""
        for msg in self.host.poll(time.time(), hold_exits=False):
            self._send(self.outbox.add(msg))
        if self._conn is not None:
            with contextlib.suppress(ConnectionError, OSError):
                await asyncio.wait_for(self._conn.writer.drain(), 2.0)

    # -- the connection ----------------------------------------------------------------------

    async def _link(self) -> None:
        """Stay connected; give up after the orphan timeout without the controller."""
        delay = 0.1
        while True:
            if self._fence_if_lease_lost():
                return
            try:
                conn = await dial(self.cfg.host, self.cfg.port, self.cfg.me)
            except StaleAttempt as exc:
                self._fence(str(exc), EXIT_FENCED)
                return
            except (OSError, WireError, TimeoutError) as exc:
                if self._lease_lost():
                    self._fence(f"controller {self.cfg.host}:{self.cfg.port} unreachable "
                                f"for {self._clock() - self._heard:.0f} s ({exc})")
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            delay = 0.1
            self._heard = self._clock()
            self.outbox.ack(conn.acked)
            self._conn = conn
            if not self._reached:
                self._reached = True
                log.info("%s", connected_line(self.cfg))
            conn.send(self.outbox.pending())
            try:
                await self._receive(conn)
            except (ConnectionError, OSError, WireError) as exc:
                log.info("agent of %s: connection lost: %s", self.cfg.me.node, exc)
            finally:
                if not self._done.is_set() or conn.writer.is_closing():
                    self._conn = None
                    conn.writer.close()
                # else: on the way out (``bye``), _main sends the last look on this connection
                # and then closes it; dropping it here sent the last words nowhere
            if self._done.is_set():
                return

    async def _receive(self, conn: Connection) -> None:
        for msg in conn.early:
            await self._command(msg)
        while True:
            left = self._orphan_s - (self._clock() - self._heard)
            try:
                # asyncio.timeout, not wait_for: no extra task per message received.
                async with asyncio.timeout(max(0.1, min(left, 1.0))):
                    data = await conn.reader.read(conn.frames.limit)
            except TimeoutError:
                if self._fence_if_lease_lost():
                    return
                continue
            if self._fence_if_lease_lost():
                return  # what arrived is older than the lease (this agent was stopped)
            if not data:
                raise ConnectionError("the controller closed the connection")
            self._heard = self._clock()
            for msg in conn.feed(data):
                await self._command(msg)
                if self._done.is_set():
                    return

    def _send(self, *bodies: bytes) -> None:
        """Packed messages, sealed for the current connection (one write), if there is one."""
        conn = self._conn
        if conn is not None and not conn.writer.is_closing():
            conn.send(bodies)

    def _emit(self, msg: dict[str, Any]) -> None:
        self._send(self.outbox.add(msg))

    # -- commands ----------------------------------------------------------------------------

    async def _command(self, msg: dict[str, Any]) -> None:
        kind = msg.get("t")
        try:
            if kind == "ack":
                self.outbox.ack(integer(msg, "seq"))
            elif kind == "hb":
                pass
            elif kind == "clock":  # the controller measures this host's clock offset
                reply = clock_reply(msg, self.host.wall_time())
                if reply is not None:
                    self._emit(reply)
            elif kind == "launch":
                await self._launch(msg)
            elif kind == "signal":
                self.host.signal(integer(msg, "rank"), integer(msg, "signum"))
            elif kind == "stop":
                grace = msg.get("grace_s")
                grace_s = float(grace) if isinstance(grace, (int, float)) else 10.0
                self._stopping = True
                self._fetched.set()  # ranks still waiting for a shard are not started
                asyncio.get_running_loop().create_task(
                    asyncio.to_thread(self.host.stop, grace_s))
            elif kind == "collect":
                asyncio.get_running_loop().create_task(self._collect(msg))
            elif kind in CHECK_COMMANDS:
                asyncio.get_running_loop().create_task(self._check(str(kind), msg))
            elif kind == "xid":
                line = msg.get("line")
                if not isinstance(line, str) or len(line) > 4096:
                    raise WireError("xid: line must be a string of at most 4096 characters")
                path = self.host.append_kernel_line(line)
                self._emit({"t": "note", "text": f"appended to {path}"})
            elif kind in ("snapbuddy", "snapfetch", "snapclean"):
                self._snapshot_command(str(kind), msg)
            elif kind == "bye":
                await self._stop_and_exit(0)
            else:
                log.info("agent of %s: unknown command %r ignored", self.cfg.me.node,
                         str(kind)[:40])
        except (TrainguardError, OSError) as exc:
            self._emit({"t": "error", "what": str(kind)[:40], "text": str(exc)[:2000]})

    async def _launch(self, msg: dict[str, Any]) -> None:
        if self._launched:
            return  # sent again after a reconnect
        self._launched = True
        orphan = msg.get("orphan_timeout_s")
        if isinstance(orphan, (int, float)) and orphan > 0:
            self._orphan_s = float(orphan)
        wait_s = await self._start_snapshots(msg.get("snapshot"))
        if wait_s is None:
            await self._start_ranks(msg)
        else:  # the ranks start once their shards are here: commands go on meanwhile
            asyncio.get_running_loop().create_task(self._start_after_fetch(msg, wait_s))

    async def _start_after_fetch(self, msg: dict[str, Any], wait_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await self._fetched.wait()
        if self._stopping:
            self._emit({"t": "error", "what": "launch",
                        "text": "stopped before its ranks started (waiting for shards)"})
            return
        if self._fetching:  # the ranks start; restoring a missing shard fails them
            self._emit({"t": "error", "what": "snapfetch", "text": "shard(s) of rank(s) "
                        f"{sorted(self._fetching)} not fetched within {wait_s:g} s"})
        await self._start_ranks(msg)

    async def _start_ranks(self, msg: dict[str, Any]) -> None:
        klog = msg.get("kernel_log")
        # The run's start on this host's own clock (the controller's may be off by hours).
        since = run_start_on_host(msg, self.host.wall_time())
        try:
            pids = await asyncio.to_thread(self.host.launch, msg)
        except LaunchError as exc:
            self._emit({"t": "error", "what": "launch", "text": str(exc)[:2000]})
        else:
            self._emit({"t": "started", "pids": {str(r): p for r, p in pids.items()}})
        try:  # after the ranks: loading the rules must not delay them
            self.host.watch_kernel_log(klog if isinstance(klog, str) and klog else None, since)
        except TrainguardError as exc:  # the ranks still run; the controller is told
            self._emit({"t": "error", "what": "kernel_log", "text": str(exc)[:2000]})

    async def _start_snapshots(self, spec: object) -> float | None:
        """The launch message's ``snapshot`` field: this host's snapshot service started
        (agent.snapshots), reported; how long to wait for shards before the ranks start
        (None: start them now)."""
        if not isinstance(spec, dict):
            return None
        try:
            dirs = HostDirs(Path(str(spec.get("root"))), str(spec.get("run")), self.cfg.me.node)
            service = SnapshotService(dirs, self.cfg.me.secret, self.cfg.me.attempt,
                                      addr=self._local_addr(),
                                      replicate=spec.get("replicate") is True,
                                      live=lambda: not self._fenced and not self._lease_lost())
            served = await asyncio.to_thread(service.start)
        except (TrainguardError, OSError) as exc:
            self._emit({"t": "error", "what": "snapshot", "text": str(exc)[:2000]})
            return None
        self._snaps = service
        if served is not None:
            self._emit({"t": "snapserve", "addr": served[0], "port": served[1]})
        for inv in service.take():
            self._emit(inv)
        fetch = spec.get("fetch")
        if not isinstance(fetch, list) or not fetch or served is None:
            return None
        self._fetching = {r for r in fetch if isinstance(r, int) and not isinstance(r, bool)}
        wait = spec.get("fetch_timeout_s")
        return float(wait) if isinstance(wait, (int, float)) and 0 < wait <= 3600 else 60.0

    def _snapshot_command(self, kind: str, msg: dict[str, Any]) -> None:
        """``snapbuddy``, ``snapfetch``, ``snapclean`` (agent.snapshots)."""
        if kind == "snapclean":
            dirs = HostDirs(Path(str(msg.get("root"))), str(msg.get("run")), self.cfg.me.node)
            req = integer(msg, "req")
            removed = remove_run(dirs)
            self._emit({"t": "reply", "req": req, "removed": removed})
            return
        service = self._snaps
        if service is None or not service.replicate:
            raise SnapshotError(f"{kind}: no snapshot service on this host")
        if kind == "snapbuddy":
            node, addr, port = msg.get("node"), msg.get("addr"), msg.get("port")
            if node is None:
                service.set_buddy(None, None)
            elif isinstance(node, str) and isinstance(addr, str) and isinstance(port, int) \
                    and 0 < port < 65536:
                service.set_buddy(node, (addr, port))
            else:
                raise WireError("snapbuddy: node, addr and port must be given")
            return
        asyncio.get_running_loop().create_task(self._fetch(service, msg, integer(msg, "req")))

    async def _fetch(self, service: SnapshotService, msg: dict[str, Any], req: int) -> None:
        rank = msg.get("rank")
        try:
            copy = await asyncio.to_thread(service.fetch, msg)
            reply: dict[str, Any] = {"copy": copy_fields(copy)}
        except (TrainguardError, OSError) as exc:
            reply = {"error": f"snapfetch: {exc}"[:2000]}
        self._emit({"t": "reply", "req": req, **reply})
        self._fetching.discard(rank if isinstance(rank, int) else -1)
        if not self._fetching:
            self._fetched.set()

    async def _collect(self, msg: dict[str, Any]) -> None:
        req = integer(msg, "req")
        timeout = msg.get("timeout_s")
        result = await asyncio.to_thread(
            self.host.collect, float(timeout) if isinstance(timeout, (int, float)) else 3.0)
        self._emit({"t": "reply", "req": req, **result})

    async def _check(self, kind: str, msg: dict[str, Any]) -> None:
        """A host-check command (:mod:`trainguard.agent.checks`), answered with its ``req``."""
        try:
            req = integer(msg, "req")
        except WireError as exc:
            self._emit({"t": "error", "what": kind, "text": str(exc)})
            return
        node = self.cfg.me.node
        try:
            if kind == "check":
                reply = await asyncio.to_thread(run_check, msg, node)
            elif kind == "link_serve":
                reply = self._links.serve(msg, self._local_addr(), self.cfg.me.secret)
            else:
                reply = await asyncio.to_thread(probe_link, msg, node, self.cfg.me.secret)
        except (TrainguardError, WireError, OSError, ValueError) as exc:
            reply = {"error": f"{kind}: {exc}"[:2000]}
        self._emit({"t": "reply", "req": req, **reply})

    def _local_addr(self) -> str:
        """The address this host reaches the controller from: other hosts can reach it too."""
        conn = self._conn
        name = conn.writer.get_extra_info("sockname") if conn is not None else None
        return str(name[0]) if name else "127.0.0.1"

    # -- the pump ----------------------------------------------------------------------------

    async def _pump(self) -> None:
        """Poll the host every ``poll_s``; heartbeat every ``heartbeat_s``."""
        next_beat = 0.0
        while True:
            if self._fence_if_lease_lost():
                return
            now = self._clock()
            # One write (one send syscall) for everything this look found.
            # Output is read only while the outbox has room (backpressure: a stalled
            # controller leaves it in the ranks' files, not in this agent's memory).
            batch = [self.outbox.add(msg)
                     for msg in self.host.poll(time.time(), self.outbox.room)]
            if self._snaps is not None:
                batch += [self.outbox.add(msg) for msg in self._snaps.take()]
            if batch:
                self._send(*batch)
            if now >= next_beat:
                next_beat = now + self.cfg.heartbeat_s
                self._send(_HEARTBEAT)
            # A backlog (output left in the files) is read as fast as the controller takes it.
            await asyncio.sleep(0 if self.host.behind and self.outbox.room else self.cfg.poll_s)


_HEARTBEAT = pack({"t": "hb"})


__all__ = ["EXIT_FENCED", "EXIT_ORPHANED", "Agent", "AgentConfig"]
