"""The controller's end of the wire: one TCP listener that every agent of the run dials.

The hub authenticates each connection (see :mod:`trainguard.agent.wire`), queues what agents
send for the supervisor's poll loop (:meth:`AgentHub.take`), acknowledges it so an agent can
drop what arrived, and passes the controller's commands on (:meth:`AgentHub.send`). It runs its
own asyncio loop in a daemon thread; every public method is thread-safe. A connection that sends
garbage, a wrong MAC, a frame over the limit, or nothing during the handshake is closed with one
log line; the others, and the run, go on. Connections that have not authenticated yet are capped
in all and per peer address (:mod:`trainguard.agent.admission`), and a flood is logged once per
interval.

After the handshake every frame is sealed with the connection's own keys
(:class:`~trainguard.agent.wire.Channel`), and an agent's sequence numbers must advance within
:data:`SEQ_WINDOW`: a message beyond it is dropped with one log line, never taken as the new
high-water mark.

**One agent instance per node and attempt.** Each agent process presents a random instance id
in its (authenticated) hello. The first one to authenticate for a node of the current attempt
owns that node's session; a reconnect presenting the same id replaces its lost connection, and
a connection presenting another id is refused, whether or not the owner is connected now. (The
backend starts exactly one agent per node and attempt; the ranks are that agent's children, so
no other process could carry on for it.)

**Backpressure.** What agents send waits in an inbox until the supervisor's poll takes it.
Above :data:`INBOX_HIGH_BYTES` (or :data:`INBOX_HIGH_MESSAGES`) queued, the connection readers
stop reading until :meth:`AgentHub.take` empties it: nothing is acknowledged meanwhile, so each
agent keeps what it has in its bounded outbox and stops reading its ranks' output. The inbox
exceeds the mark by at most one read per connection. Handshakes and the hub's heartbeats go on,
and a host whose reader is held this way counts as heard from (its ``last_seen`` is now), so
backpressure never makes it look lost.

An ``operator`` connection (``trainguard inject`` against a running job) authenticates the same
way and gets one answer per request from the ``operator`` callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from trainguard.agent.admission import RateLog, gate_for
from trainguard.agent.peers import SEQ_WINDOW, Inbound, Peer, PeerView, sequence_verdict
from trainguard.agent.wire import (
    HANDSHAKE_FRAME,
    HANDSHAKE_TIMEOUT_S,
    MAX_FRAME,
    PROTOCOL,
    Channel,
    FrameReader,
    WireError,
    integer,
    mac,
    nonce,
    pack,
    read_one,
    same_mac,
    session_keys,
    text,
)
from trainguard.errors import LaunchError
from trainguard.fdlimit import raise_nofile_limit, reserve_fds, soft_nofile_limit

log = logging.getLogger(__name__)

_WRITE_BUFFER_MAX = 8 << 20
"""An agent that does not read its commands for this many bytes is dropped."""

_OPERATORS_MAX = 8
"""Authenticated operator connections at once."""

INBOX_HIGH_BYTES = 64 << 20
"""Received bytes queued for the supervisor above which the hub stops reading agents."""
INBOX_HIGH_MESSAGES = 200_000
"""Queued messages above which the hub stops reading agents."""

Operator = Callable[[Mapping[str, Any]], dict[str, Any]]


class AgentHub:
    """Accepts the run's agents and relays messages both ways (see the module docstring)."""

    def __init__(self, secret: str, session: str, *, host: str = "127.0.0.1", port: int = 0,
                 clock: Callable[[], float] = time.time, heartbeat_s: float = 1.0,
                 operator: Operator | None = None, inbox_high_bytes: int = INBOX_HIGH_BYTES,
                 inbox_high_messages: int = INBOX_HIGH_MESSAGES) -> None:
        if inbox_high_bytes < 1 or inbox_high_messages < 1:
            raise ValueError("hub.inbox_high_bytes and hub.inbox_high_messages must be >= 1")
        self._secret = secret.encode()
        self.session = session
        self._host, self._port = host, port
        self._clock = clock
        self._heartbeat_s = heartbeat_s
        self.operator = operator
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._beats: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        self._inbox: list[Inbound] = []
        self._queued = 0
        """Bytes received for the messages in the inbox."""
        self._high = (inbox_high_bytes, inbox_high_messages)
        self._held = 0
        """Readers waiting for room in the inbox."""
        self._room = asyncio.Event()
        """Set (in the loop) when :meth:`take` made room; readers that find none wait on it."""
        self._closing = False
        self._peers: dict[str, Peer] = {}
        self._reached: set[str] = set()
        """Nodes whose agent authenticated at least once (any attempt)."""
        self._attempt = -1
        self.rejected = 0
        """Connections refused or dropped for a protocol violation (for tests and status)."""
        self.refused = 0
        """Connections closed unheard because too many others had not authenticated yet."""
        self.out_of_window = 0
        """Messages dropped for a sequence number outside the window."""
        self.address: tuple[str, int] = (host, port)
        self._gate = gate_for(soft_nofile_limit())
        self._operators = 0
        self._ratelog = RateLog(log)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> tuple[str, int]:
        """Listen; returns the (host, port) agents should dial."""
        ready = threading.Event()
        failure: list[BaseException] = []

        raise_nofile_limit()
        reserve_fds()
        self._gate = gate_for(soft_nofile_limit())

        def main() -> None:
            loop = asyncio.new_event_loop()
            loop.set_exception_handler(self._loop_error)
            self._loop = loop
            try:
                self._server = loop.run_until_complete(asyncio.start_server(
                    self._serve, self._host, self._port, limit=MAX_FRAME))
                sock = self._server.sockets[0].getsockname()
                self.address = (str(sock[0]), int(sock[1]))
                self._beats = loop.create_task(self._heartbeats())
            except OSError as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

        self._thread = threading.Thread(target=main, name="trainguard-hub", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise LaunchError(f"cannot listen for agents on {self._host}:{self._port}: "
                              f"{getattr(failure[0], 'strerror', None) or failure[0]}")
        return self.address

    def close(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return

        async def shutdown() -> None:
            self._closing = True
            self._room.set()  # held readers go on to read their connection's end
            if self._beats is not None:
                self._beats.cancel()
            if self._server is not None:
                self._server.close()
            for peer in self._peers.values():
                if peer.writer is not None:
                    peer.writer.close()
            loop.stop()

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(shutdown(), loop)
        self._thread.join(timeout=5)
        self._loop = None

    # -- the supervisor's side ---------------------------------------------------------------

    def expect(self, attempt: int, nodes: Iterable[str]) -> None:
        """From now on only ``nodes``' agents of ``attempt`` may connect (older ones are cut)."""
        now = self._clock()
        with self._lock:
            self._attempt = attempt
            old = self._peers
            self._peers = {n: Peer(n, attempt, now) for n in nodes}
            caps = gate_for(soft_nofile_limit(), len(self._peers))
            self._gate.total, self._gate.per_address = caps.total, caps.per_address
            self._gate.per_loopback = caps.per_loopback
            self._inbox = [m for m in self._inbox if m.attempt == attempt]
            if not self._inbox:
                self._queued = 0
        self._call(self._room.set)  # a held reader of the old attempt finds its peer gone
        for peer in old.values():
            if peer.writer is not None:
                self._call(peer.writer.close)

    def take(self) -> list[Inbound]:
        """Everything received since the last call."""
        with self._lock:
            out, self._inbox = self._inbox, []
            self._queued = 0
            held = self._held > 0
        if held:
            self._call(self._room.set)
        return out

    def queued(self) -> tuple[int, int]:
        """The inbox now: (bytes received for it, messages)."""
        with self._lock:
            return self._queued, len(self._inbox)

    def peers(self) -> dict[str, PeerView]:
        now = self._clock()
        with self._lock:
            return {n: PeerView(p.writer is not None, now if p.held else p.last_seen, p.ever,
                                p.closed_reason, p.connections)
                    for n, p in self._peers.items()}

    def reached(self) -> frozenset[str]:
        """Nodes whose agent has connected at least once since the hub started."""
        with self._lock:
            return frozenset(self._reached)

    def send(self, node: str, msg: Mapping[str, Any]) -> bool:
        """Queue ``msg`` for ``node``'s agent; False when it is not connected."""
        with self._lock:
            peer = self._peers.get(node)
            writer = peer.writer if peer is not None else None
        if writer is None:
            return False
        data = pack(msg)
        self._call(lambda: self._write(node, writer, data))
        return True

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's own errors (``accept`` out of descriptors, ...): one line per interval."""
        exc = context.get("exception")
        what = str(context.get("message", "error"))
        self._ratelog.warning(f"loop:{what}", "agent hub: %s%s", what,
                              f": {exc}" if exc is not None else "")

    # -- the loop's side ---------------------------------------------------------------------

    def _call(self, fn: Callable[[], object]) -> None:
        loop = self._loop
        if loop is None:
            return
        if threading.current_thread() is self._thread:
            fn()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(fn)

    def _write(self, node: str, writer: asyncio.StreamWriter, data: bytes) -> None:
        """``data`` (packed messages) sealed for ``node``'s current connection, if it is still
        ``writer`` (in the loop's thread only: the frame counter follows the write order)."""
        with self._lock:
            peer = self._peers.get(node)
            channel = peer.channel if peer is not None and peer.writer is writer else None
        if channel is None or writer.is_closing():
            return
        if writer.transport.get_write_buffer_size() > _WRITE_BUFFER_MAX:
            log.warning("agent of %s does not read its commands: dropping its connection", node)
            writer.close()
            return
        writer.write(channel.seal([data]))

    async def _heartbeats(self) -> None:
        beat = pack({"t": "hb"})
        while True:
            await asyncio.sleep(self._heartbeat_s)
            with self._lock:
                writers = [(n, p.writer) for n, p in self._peers.items() if p.writer is not None]
            for node, writer in writers:
                self._write(node, writer, beat)

    def _admit(self, address: str, writer: asyncio.StreamWriter) -> bool:
        if self._gate.admit(address):
            return True
        self.refused += 1
        self._ratelog.warning("flood", "agent hub: %d connection(s) refused so far: more than "
                              "%d waiting to authenticate, or %d from one address (latest "
                              "from %s)", self.refused, self._gate.total,
                              self._gate.cap(address), address)
        writer.transport.abort()
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        where = writer.get_extra_info("peername")
        address = str(where[0]) if isinstance(where, tuple) and where else "?"
        if not self._admit(address, writer):
            return
        peer: Peer | None = None
        operator = False
        try:
            try:
                role, node, attempt, instance, frames, channel = \
                    await self._handshake(reader, writer)
            finally:  # authenticated or not: its place is free
                self._gate.release(address)
            if role == "operator":
                if self._operators >= _OPERATORS_MAX:
                    raise WireError(f"more than {_OPERATORS_MAX} operator connections")
                self._operators += 1
                operator = True
                await self._operate(reader, writer, frames, channel)
                return
            with self._lock:
                peer = self._peers.get(node)
                if peer is None or peer.attempt != attempt:
                    raise WireError(f"agent of {node} for attempt {attempt} is not expected "
                                    f"(current attempt {self._attempt})")
                if peer.instance is not None and peer.instance != instance:
                    peer = None
                    raise WireError(f"{node} already has its agent for attempt {attempt}: "
                                    "a second agent instance is refused")
                peer.instance = instance
                self._reached.add(node)
                old, peer.writer, peer.ever = peer.writer, writer, True
                peer.channel = channel
                peer.connections += 1
                peer.last_seen = self._clock()
                peer.closed_reason = None
            if old is not None and old is not writer:
                old.close()  # the same agent's reconnect replaces the connection it lost
            await self._receive(peer, reader, writer, frames, channel)
        except WireError as exc:
            self.rejected += 1
            self._ratelog.warning("drop", "agent connection from %s dropped: %s", where, exc)
        except (ConnectionError, OSError) as exc:
            log.info("agent connection from %s lost: %s", where, exc)
        finally:
            if operator:
                self._operators -= 1
            if peer is not None:
                with self._lock:
                    if peer.writer is writer:
                        peer.writer = None
                        peer.channel = None
                        peer.closed_reason = "connection closed"
            writer.close()

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                         ) -> tuple[str, str, int, bytes, FrameReader, Channel]:
        ours = nonce()
        writer.write(pack({"t": "challenge", "proto": PROTOCOL, "nonce": ours}, HANDSHAKE_FRAME))
        frames = FrameReader(HANDSHAKE_FRAME)
        hello = await read_one(reader, frames, HANDSHAKE_TIMEOUT_S)
        if hello.get("t") != "hello":
            raise WireError(f"expected hello, got {str(hello.get('t'))[:40]!r}")
        role = text(hello, "role", 16)
        node = text(hello, "node", 64)
        session = text(hello, "session", 64)
        attempt = integer(hello, "attempt")
        theirs, instance = hello.get("nonce"), hello.get("instance")
        if role not in ("agent", "operator") or not isinstance(theirs, bytes) \
                or len(theirs) != 16 or not isinstance(instance, bytes) or len(instance) != 16:
            raise WireError("malformed hello")
        who = (role, node, session, str(attempt), instance)
        expected = mac(self._secret, b"hello", ours, theirs, *who)
        if not same_mac(expected, hello.get("mac")):
            raise WireError(f"wrong secret (hello as {role} of {node!r})")
        if session != self.session:
            raise WireError(f"hello for another run ({session!r})")
        with self._lock:
            peer = self._peers.get(node)
            if role == "agent" and (peer is None or peer.attempt != attempt):
                if attempt < self._attempt:  # authentic, its attempt is over: it must fence
                    writer.write(pack({"t": "stale", "attempt": self._attempt, "mac": mac(
                        self._secret, b"stale", theirs, ours, str(self._attempt))}))
                raise WireError(f"agent of {node} for attempt {attempt} is not expected "
                                f"(current attempt {self._attempt})")
            if role == "agent" and peer is not None and peer.instance is not None \
                    and peer.instance != instance:
                raise WireError(f"{node} already has its agent for attempt {attempt}: "
                                "a second agent instance is refused")
            acked = peer.seq if peer is not None else 0
        writer.write(pack({"t": "welcome", "acked": acked,
                           "mac": mac(self._secret, b"welcome", theirs, ours, str(acked))}))
        to_server, to_client = session_keys(self._secret, ours, theirs, *who)
        frames.relimit(MAX_FRAME)
        return role, node, attempt, instance, frames, Channel(to_client, to_server)

    async def _receive(self, peer: Peer, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, frames: FrameReader,
                       channel: Channel) -> None:
        while True:
            await self._room_for(peer)
            data = await reader.read(MAX_FRAME)
            if not data:
                return
            msgs, bad = _open_all(frames, channel, data)
            now = self._clock()
            fresh = []
            numbered = False
            with self._lock:
                if self._peers.get(peer.node) is not peer or peer.writer is not writer:
                    return  # a newer attempt, or this agent's newer connection, took over
                peer.last_seen = now
                for msg in msgs:
                    if "seq" in msg:
                        seq = msg["seq"]
                        numbered = True
                        verdict = sequence_verdict(peer.seq, seq)
                        if verdict == "refused":
                            self.out_of_window += 1
                            self._ratelog.warning(
                                f"seq:{peer.node}", "message %r from %s's agent dropped: "
                                "sequence number %s outside (%d, %d]", str(msg["t"])[:40],
                                peer.node, str(seq)[:24], peer.seq, peer.seq + SEQ_WINDOW)
                            continue
                        if verdict == "seen":
                            continue  # sent again after a reconnect; already have it
                        peer.seq = seq
                    if msg.get("t") != "hb":
                        fresh.append(Inbound(peer.node, peer.attempt, msg, now))
                self._inbox.extend(fresh)
                if fresh:
                    self._queued += len(data)
                acked = peer.seq
            if numbered:
                self._write(peer.node, writer, pack({"t": "ack", "seq": acked}))
            if bad is not None:
                raise bad

    async def _room_for(self, peer: Peer) -> None:
        """Return when the inbox is below its high-water mark; until then, ``peer``'s reader
        is held (backpressure: see the module docstring)."""
        while True:
            with self._lock:
                if self._closing or (self._queued < self._high[0]
                                     and len(self._inbox) < self._high[1]):
                    return
                if self._peers.get(peer.node) is not peer:
                    return  # a newer attempt took over: the read loop ends it
                self._held += 1
                peer.held += 1
                self._room.clear()  # under the lock: a take() after this sets it again
            try:
                await self._room.wait()
            finally:
                with self._lock:
                    self._held -= 1
                    peer.held -= 1
                    peer.last_seen = max(peer.last_seen, self._clock())

    async def _operate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       frames: FrameReader, channel: Channel) -> None:
        while True:
            data = await reader.read(MAX_FRAME)
            if not data:
                return
            for msg in [m for frame in frames.feed(data) for m in channel.open(frame)]:
                if self.operator is None:
                    answer: dict[str, Any] = {"ok": False, "message": "no attempt is running"}
                else:
                    try:
                        answer = self.operator(msg)
                    except WireError as exc:
                        answer = {"ok": False, "message": str(exc)}
                writer.write(channel.seal([pack({"t": "answer", **answer})]))
                await writer.drain()


def _open_all(frames: FrameReader, channel: Channel, data: bytes
              ) -> tuple[list[dict[str, Any]], WireError | None]:
    """The messages of the sealed frames ``data`` completes, up to the first bad one (which is
    returned: the messages before it still count)."""
    msgs: list[dict[str, Any]] = []
    try:
        for frame in frames.feed(data):
            msgs += channel.open(frame)
    except WireError as exc:
        return msgs, exc
    return msgs, None


__all__ = ["AgentHub", "Inbound", "Operator", "PeerView"]
