"""The dialing end of the wire: an agent's (or an operator's) authenticated connection, and the
agent's outbox of messages the controller has not acknowledged yet.

Every message an agent sends about its ranks carries a sequence number. The controller
acknowledges what it has; the agent keeps the rest (bounded in bytes) and sends it again after
a reconnect, so a short network blip loses no event and the controller drops what it already
had.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any

from trainguard.agent.wire import (
    HANDSHAKE_FRAME,
    HANDSHAKE_TIMEOUT_S,
    MAX_FRAME,
    PROTOCOL,
    FrameReader,
    WireError,
    mac,
    nonce,
    pack,
    read_one,
    same_mac,
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


@dataclass(slots=True)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    frames: FrameReader
    acked: int
    """The highest sequence number the controller already had."""
    early: list[dict[str, Any]]
    """Messages that arrived with the handshake's last one (to be handled first)."""


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
        writer.write(pack({
            "t": "hello", "role": me.role, "node": me.node, "session": me.session,
            "attempt": me.attempt, "nonce": ours,
            "mac": mac(me.secret, b"hello", theirs, ours, me.role, me.node, me.session,
                       str(me.attempt))}, HANDSHAKE_FRAME))
        early: list[dict[str, Any]] = []
        welcome = await read_one(reader, frames, HANDSHAKE_TIMEOUT_S, rest=early)
        if welcome.get("t") != "welcome" or not same_mac(
                mac(me.secret, b"welcome", ours, theirs), welcome.get("mac")):
            raise WireError(f"the controller at {host}:{port} did not prove the run's secret")
        acked = welcome.get("acked")
        frames.relimit(MAX_FRAME)
        return Connection(reader, writer, frames, acked if isinstance(acked, int) else 0,
                          early)
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
            conn.writer.write(pack({"t": "op", **request}))
            while True:
                data = await asyncio.wait_for(conn.reader.read(MAX_FRAME), timeout_s)
                if not data:
                    raise WireError("the controller closed the connection")
                for msg in conn.frames.feed(data):
                    if msg.get("t") == "answer":
                        return msg
        finally:
            conn.writer.close()

    return asyncio.run(go())


class Outbox:
    """Sequence-numbered messages awaiting the controller's acknowledgement."""

    def __init__(self, limit_bytes: int = OUTBOX_BYTES) -> None:
        self.limit = limit_bytes
        self._queue: deque[tuple[int, bytes]] = deque()
        self._bytes = 0
        self._seq = 0
        self.dropped = 0
        """Messages discarded because the controller was away too long for the buffer."""

    def add(self, msg: dict[str, Any]) -> bytes:
        """Number ``msg``, keep it until acknowledged; returns its bytes for sending now."""
        self._seq += 1
        data = pack({**msg, "seq": self._seq})
        self._queue.append((self._seq, data))
        self._bytes += len(data)
        while self._bytes > self.limit and len(self._queue) > 1:
            _, old = self._queue.popleft()
            self._bytes -= len(old)
            self.dropped += 1
        return data

    def ack(self, seq: int) -> None:
        while self._queue and self._queue[0][0] <= seq:
            _, data = self._queue.popleft()
            self._bytes -= len(data)

    @property
    def last_seq(self) -> int:
        """The sequence number of the latest message added."""
        return self._seq

    def pending(self) -> list[bytes]:
        """Everything not yet acknowledged, oldest first (to send again after a reconnect)."""
        return [data for _, data in self._queue]

    def __len__(self) -> int:
        return len(self._queue)


__all__ = ["OUTBOX_BYTES", "Connection", "Identity", "Outbox", "dial"]
