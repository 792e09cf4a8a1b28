"""The dialing end of the wire: an agent's (or an operator's) authenticated connection, and the
agent's outbox of messages the controller has not acknowledged yet.

Every message an agent sends about its ranks carries a sequence number. The controller
acknowledges what it has; the agent keeps the rest (bounded in bytes) and sends it again after
a reconnect, so a short network blip loses no event and the controller drops what it already
had. After the handshake every frame is sealed (:class:`~trainguard.agent.wire.Channel`): use
:meth:`Connection.send` and :meth:`Connection.feed`, never the raw stream.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainguard.agent.wire import (
    HANDSHAKE_FRAME,
    HANDSHAKE_TIMEOUT_S,
    MAX_FRAME,
    PROTOCOL,
    Channel,
    FrameReader,
    WireError,
    instance_id,
    mac,
    nonce,
    pack,
    read_one,
    same_mac,
    session_keys,
)

OUTBOX_BYTES = 16 << 20
"""Unacknowledged messages an agent keeps while the controller is unreachable."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who is dialing, for which run."""

    role: str
    """``agent`` or ``operator``."""
    node: str
    session: str
    attempt: int
    secret: bytes
    instance: bytes = field(default_factory=instance_id)
    """This agent process's id, the same on each of its reconnects (see the hub)."""


@dataclass(slots=True)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    frames: FrameReader
    channel: Channel
    """Seals what goes out and checks what comes in (:class:`~trainguard.agent.wire.Channel`)."""
    acked: int
    """The highest sequence number the controller already had."""
    early: list[dict[str, Any]]
    """Messages that arrived with the handshake's last one (to be handled first)."""

    def send(self, bodies: Iterable[bytes]) -> None:
        """Packed messages, sealed and written (in one write)."""
        data = self.channel.seal(bodies)
        if data:
            self.writer.write(data)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The messages that received ``data`` completes, each frame checked."""
        return [msg for frame in self.frames.feed(data) for msg in self.channel.open(frame)]


class StaleAttempt(WireError):
    """The controller, proving the run's secret, says this agent's attempt is over: the agent
    must kill its ranks (its host was declared lost and the job relaunched without it)."""


def _raise_if_stale(reply: dict[str, Any], me: Identity, ours: bytes, theirs: bytes) -> None:
    current = reply.get("attempt")
    if reply.get("t") == "stale" and isinstance(current, int) and not isinstance(current, bool) \
            and same_mac(mac(me.secret, b"stale", ours, theirs, str(current)), reply.get("mac")):
        raise StaleAttempt(f"the controller runs attempt {current}: attempt {me.attempt} is over")


async def dial(host: str, port: int, me: Identity, timeout_s: float = 5.0) -> Connection:
    """Connect and authenticate both ways; :class:`WireError` or ``OSError`` when it fails."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(host, port, limit=MAX_FRAME), timeout_s)
    try:
        frames = FrameReader(HANDSHAKE_FRAME)
        challenge = await read_one(reader, frames, HANDSHAKE_TIMEOUT_S)
        theirs = challenge.get("nonce")
        if challenge.get("t") != "challenge" or challenge.get("proto") != PROTOCOL \
                or not isinstance(theirs, bytes) or len(theirs) != 16:
            raise WireError(f"{host}:{port} is not a trainguard controller ({PROTOCOL})")
        ours = nonce()
        who = (me.role, me.node, me.session, str(me.attempt), me.instance)
        writer.write(pack({
            "t": "hello", "role": me.role, "node": me.node, "session": me.session,
            "attempt": me.attempt, "nonce": ours, "instance": me.instance,
            "mac": mac(me.secret, b"hello", theirs, ours, *who)}, HANDSHAKE_FRAME))
        rest: list[dict[str, Any]] = []
        welcome = await read_one(reader, frames, HANDSHAKE_TIMEOUT_S, rest=rest)
        _raise_if_stale(welcome, me, ours, theirs)
        acked = welcome.get("acked")
        if welcome.get("t") != "welcome" or not isinstance(acked, int) \
                or isinstance(acked, bool) or not same_mac(
                    mac(me.secret, b"welcome", ours, theirs, str(acked)), welcome.get("mac")):
            raise WireError(f"the controller at {host}:{port} did not prove the run's secret")
        to_server, to_client = session_keys(me.secret, theirs, ours, *who)
        channel = Channel(to_server, to_client)
        frames.relimit(MAX_FRAME)
        early = [msg for frame in rest for msg in channel.open(frame)]
        return Connection(reader, writer, frames, channel, acked, early)
    except BaseException:
        writer.close()
        raise


def ask(host: str, port: int, session: str, secret: str, request: dict[str, Any],
        timeout_s: float = 10.0) -> dict[str, Any]:
    """One operator request to a running controller, and its answer (``ok``, ``message``);
    :class:`WireError` or ``OSError`` when the controller cannot be reached or refuses."""

    async def go() -> dict[str, Any]:
        conn = await dial(host, port, Identity("operator", "operator", session, 0,
                                               secret.encode()), timeout_s)
        try:
            conn.send([pack({"t": "op", **request})])
            while True:
                data = await asyncio.wait_for(conn.reader.read(MAX_FRAME), timeout_s)
                if not data:
                    raise WireError("the controller closed the connection")
                for msg in conn.feed(data):
                    if msg.get("t") == "answer":
                        return msg
        finally:
            conn.writer.close()

    return asyncio.run(go())


@dataclass(slots=True)
class _Kept:
    """One unacknowledged message, packed."""

    data: bytes
    output: tuple[str, int | None] | None = None
    """``(kind, rank)`` for rank output (``out``, ``sdk``): the only messages ever shed."""
    size: int = 0
    """Rank output: the payload's bytes; a drop marker: the bytes it stands for."""


OUTPUT_KINDS = frozenset({"out", "sdk"})
"""Messages that carry a rank's output or SDK events: shed (oldest first, leaving a marker)
when the outbox is full. Everything else (exits, kernel-log evidence, replies) is kept."""


def drop_marker(kind: str, nbytes: int) -> bytes:
    """What stands in a rank's output (or SDK event stream, as a JSON line) for the ``nbytes``
    the outbox shed (pure).

    >>> drop_marker("out", 5)
    b'[trainguard: 5 bytes of rank output dropped]\\n'
    """
    if kind == "sdk":
        return b'{"kind": "dropped", "source": "trainguard", "bytes": %d}\n' % nbytes
    return b"[trainguard: %d bytes of rank output dropped]\n" % nbytes


class Outbox:
    """Sequence-numbered messages awaiting the controller's acknowledgement, bounded in bytes.

    Rank output is read only while there is :attr:`room` (the agent leaves it in the rank's
    file otherwise: backpressure, so a stalled controller costs the agent no memory). Should
    the outbox still pass its limit, the oldest rank output is shed and a marker (one per rank
    and stream, at the place of the gap) says how many bytes are missing; exits, kernel-log
    evidence and every other message are never shed. The marker may overcount by what the
    controller already received but had not acknowledged when a connection broke.
    """

    def __init__(self, limit_bytes: int = OUTBOX_BYTES) -> None:
        self.limit = limit_bytes
        self._queue: OrderedDict[int, _Kept] = OrderedDict()
        self._output: deque[int] = deque()
        """Sequence numbers of rank output still kept, oldest first (some may be acked)."""
        self._markers: dict[tuple[str, int | None], int] = {}
        """The sequence number of each stream's pending drop marker."""
        self._bytes = 0
        self._seq = 0
        self.dropped = 0
        """Messages of rank output shed because the controller was away too long."""
        self.dropped_bytes = 0

    def add(self, msg: dict[str, Any]) -> bytes:
        """Number ``msg``, keep it until acknowledged; returns its bytes for sending now."""
        self._seq += 1
        data = pack({**msg, "seq": self._seq})
        kind, rank, payload = msg.get("t"), msg.get("rank"), msg.get("data")
        kept = _Kept(data)
        if kind in OUTPUT_KINDS and isinstance(payload, bytes):
            kept.output = (str(kind), rank if isinstance(rank, int) else None)
            kept.size = len(payload)
            self._output.append(self._seq)
        self._queue[self._seq] = kept
        self._bytes += len(data)
        self._shed()
        return data

    def _shed(self) -> None:
        while self._bytes > self.limit and self._output:
            seq = self._output.popleft()
            kept = self._queue.get(seq)
            if kept is None or kept.output is None:
                continue  # acknowledged meanwhile
            kind, rank = key = kept.output
            lost = kept.size
            old = self._markers.pop(key, None)
            marker = self._queue.get(old) if old is not None else None
            if old is not None and marker is not None:
                # Nothing of this stream lies between the old marker and here (all older
                # output is shed already): one marker, moved to the end of the gap.
                lost += marker.size
                self._bytes -= len(marker.data)
                del self._queue[old]
            data = pack({"t": kind, **({} if rank is None else {"rank": rank}),
                         "data": drop_marker(kind, lost), "seq": seq})
            self._queue[seq] = _Kept(data, None, lost)  # same place in the order
            self._markers[key] = seq
            self._bytes += len(data) - len(kept.data)
            self.dropped += 1
            self.dropped_bytes += kept.size

    def ack(self, seq: int) -> None:
        while self._queue:
            first = next(iter(self._queue))
            if first > seq:
                break
            self._bytes -= len(self._queue.popitem(last=False)[1].data)

    @property
    def last_seq(self) -> int:
        """The sequence number of the latest message added."""
        return self._seq

    @property
    def nbytes(self) -> int:
        """Bytes kept now."""
        return self._bytes

    @property
    def room(self) -> int:
        """How many bytes of rank output may be read now: output is read while the outbox
        holds less than half its limit; the other half is headroom for the messages that are
        never shed and for what one look reads."""
        return max(0, self.limit // 2 - self._bytes)

    def pending(self) -> list[bytes]:
        """Everything not yet acknowledged, oldest first (to send again after a reconnect)."""
        return [kept.data for kept in self._queue.values()]

    def __len__(self) -> int:
        return len(self._queue)


__all__ = ["OUTBOX_BYTES", "Connection", "Identity", "Outbox", "StaleAttempt", "dial"]
