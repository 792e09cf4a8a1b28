"""The controller's end of the wire: one TCP listener that every agent of the run dials.

The hub authenticates each connection (see :mod:`trainguard.agent.wire`), queues what agents
send for the supervisor's poll loop (:meth:`AgentHub.take`), acknowledges it so an agent can
drop what arrived, and passes the controller's commands on (:meth:`AgentHub.send`). It runs its
own asyncio loop in a daemon thread; every public method is thread-safe. A connection that sends
garbage, a wrong MAC, a frame over the limit, or nothing during the handshake is closed with one
log line; the others, and the run, go on.

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
from dataclasses import dataclass
from typing import Any

from trainguard.agent.wire import (
    HANDSHAKE_FRAME,
    HANDSHAKE_TIMEOUT_S,
    MAX_FRAME,
    PROTOCOL,
    FrameReader,
    WireError,
    integer,
    mac,
    nonce,
    pack,
    read_one,
    same_mac,
    text,
)
from trainguard.errors import LaunchError

log = logging.getLogger(__name__)

_WRITE_BUFFER_MAX = 8 << 20
"""An agent that does not read its commands for this many bytes is dropped."""

Operator = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message from an agent, in arrival order."""

    node: str
    attempt: int
    msg: Mapping[str, Any]
    at: float


@dataclass(frozen=True, slots=True)
class PeerView:
    """What the hub knows of one node's agent."""

    connected: bool
    last_seen: float
    """When anything last arrived from it (or when it was expected, before it connected)."""
    ever_connected: bool
    closed_reason: str | None = None
    connection: int = 0
    """How many times it connected (a new number after each reconnect)."""


class _Peer:
    def __init__(self, node: str, attempt: int, since: float) -> None:
        self.node = node
        self.attempt = attempt
        self.seq = 0
        self.last_seen = since
        self.writer: asyncio.StreamWriter | None = None
        self.ever = False
        self.closed_reason: str | None = None
        self.connections = 0


class AgentHub:
    """Accepts the run's agents and relays messages both ways (see the module docstring)."""

    def __init__(self, secret: str, session: str, *, host: str = "127.0.0.1", port: int = 0,
                 clock: Callable[[], float] = time.time, heartbeat_s: float = 1.0,
                 operator: Operator | None = None) -> None:
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
        self._peers: dict[str, _Peer] = {}
        self._attempt = -1
        self.rejected = 0
        """Connections refused or dropped for a protocol violation (for tests and status)."""
        self.address: tuple[str, int] = (host, port)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> tuple[str, int]:
        """Listen; returns the (host, port) agents should dial."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
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
            self._peers = {n: _Peer(n, attempt, now) for n in nodes}
            self._inbox = [m for m in self._inbox if m.attempt == attempt]
        for peer in old.values():
            if peer.writer is not None:
                self._call(peer.writer.close)

    def take(self) -> list[Inbound]:
        """Everything received since the last call."""
        with self._lock:
            out, self._inbox = self._inbox, []
        return out

    def peers(self) -> dict[str, PeerView]:
        with self._lock:
            return {n: PeerView(p.writer is not None, p.last_seen, p.ever, p.closed_reason,
                                p.connections)
                    for n, p in self._peers.items()}

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
        if writer.is_closing():
            return
        if writer.transport.get_write_buffer_size() > _WRITE_BUFFER_MAX:
            log.warning("agent of %s does not read its commands: dropping its connection", node)
            writer.close()
            return
        writer.write(data)

    async def _heartbeats(self) -> None:
        beat = pack({"t": "hb"})
        while True:
            await asyncio.sleep(self._heartbeat_s)
            with self._lock:
                writers = [(n, p.writer) for n, p in self._peers.items() if p.writer is not None]
            for node, writer in writers:
                self._write(node, writer, beat)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        where = writer.get_extra_info("peername")
        peer: _Peer | None = None
        try:
            role, node, attempt, frames = await self._handshake(reader, writer)
            if role == "operator":
                await self._operate(reader, writer, frames)
                return
            with self._lock:
                peer = self._peers.get(node)
                if peer is None or peer.attempt != attempt:
                    raise WireError(f"agent of {node} for attempt {attempt} is not expected "
                                    f"(current attempt {self._attempt})")
                old, peer.writer, peer.ever = peer.writer, writer, True
                peer.connections += 1
                peer.last_seen = self._clock()
                peer.closed_reason = None
            if old is not None and old is not writer:
                old.close()  # a reconnect replaces the connection it lost
            await self._receive(peer, reader, writer, frames)
        except WireError as exc:
            self.rejected += 1
            log.warning("agent connection from %s dropped: %s", where, exc)
        except (ConnectionError, OSError) as exc:
            log.info("agent connection from %s lost: %s", where, exc)
        finally:
            if peer is not None:
                with self._lock:
                    if peer.writer is writer:
                        peer.writer = None
                        peer.closed_reason = "connection closed"
            writer.close()

    async def _handshake(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                         ) -> tuple[str, str, int, FrameReader]:
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
        theirs = hello.get("nonce")
        if role not in ("agent", "operator") or not isinstance(theirs, bytes) \
                or len(theirs) != 16:
            raise WireError("malformed hello")
        expected = mac(self._secret, b"hello", ours, theirs, role, node, session, str(attempt))
        if not same_mac(expected, hello.get("mac")):
            raise WireError(f"wrong secret (hello as {role} of {node!r})")
        if session != self.session:
            raise WireError(f"hello for another run ({session!r})")
        with self._lock:
            peer = self._peers.get(node)
            if role == "agent" and (peer is None or peer.attempt != attempt):
                raise WireError(f"agent of {node} for attempt {attempt} is not expected "
                                f"(current attempt {self._attempt})")
            acked = peer.seq if peer is not None else 0
        writer.write(pack({"t": "welcome", "acked": acked,
                           "mac": mac(self._secret, b"welcome", theirs, ours)}))
        frames.relimit(MAX_FRAME)
        return role, node, attempt, frames

    async def _receive(self, peer: _Peer, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, frames: FrameReader) -> None:
        while True:
            data = await reader.read(MAX_FRAME)
            if not data:
                return
            msgs = frames.feed(data)
            now = self._clock()
            fresh = []
            with self._lock:
                if self._peers.get(peer.node) is not peer:
                    return  # a newer attempt took over
                peer.last_seen = now
                for msg in msgs:
                    seq = msg.get("seq")
                    if isinstance(seq, int) and not isinstance(seq, bool):
                        if seq <= peer.seq:
                            continue  # sent again after a reconnect; already have it
                        peer.seq = seq
                    if msg.get("t") != "hb":
                        fresh.append(Inbound(peer.node, peer.attempt, msg, now))
                self._inbox.extend(fresh)
                acked = peer.seq
            if any(isinstance(m.get("seq"), int) for m in msgs):
                self._write(peer.node, writer, pack({"t": "ack", "seq": acked}))

    async def _operate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       frames: FrameReader) -> None:
        while True:
            data = await reader.read(MAX_FRAME)
            if not data:
                return
            for msg in frames.feed(data):
                if self.operator is None:
                    answer: dict[str, Any] = {"ok": False, "message": "no attempt is running"}
                else:
                    try:
                        answer = self.operator(msg)
                    except WireError as exc:
                        answer = {"ok": False, "message": str(exc)}
                writer.write(pack({"t": "answer", **answer}))
                await writer.drain()


__all__ = ["AgentHub", "Inbound", "Operator", "PeerView"]
