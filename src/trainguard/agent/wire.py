"""The wire between the agents and the controller: msgpack messages over one TCP connection.

Why these pieces:
- **msgpack** frames the stream: its streaming ``Unpacker`` splits a byte stream into messages
  and enforces a buffer limit and per-field limits itself, so an oversized or malformed frame is
  an exception, never an unbounded read. Binary payloads (rank output) travel as bytes, without
  base64.
- **asyncio** (the standard library) does the I/O on both sides.
- The handshake is an HMAC-SHA256 challenge–response in both directions over a per-run secret
  (``hmac``/``secrets``): the secret itself never crosses the network, and an agent only obeys a
  controller that knows it too.
- After the handshake every frame is a sealed :class:`Channel` envelope: one or more messages,
  a per-direction counter and an HMAC-SHA256 under a key derived for this connection alone from
  the secret and both nonces. A forged, altered, replayed, reordered or dropped frame is a
  :class:`WireError` (why a MAC and not TLS: docs/design/wire-protocol.md).

Every message is a map with a string ``t`` (its type). Anything else, a frame over the limit, a
wrong MAC or a silent peer is a :class:`WireError` for that connection only.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from typing import Any

import msgpack

from trainguard.agent.secret import SECRET_ENV
from trainguard.errors import TrainguardError

PROTOCOL = "trainguard-agent/2"
MAX_FRAME = 1 << 20
"""Largest frame (a sealed envelope) either side accepts after the handshake (bytes)."""
MAX_BODY = MAX_FRAME - 256
"""Largest single message: it must fit an envelope with its counter and MAC."""
HANDSHAKE_FRAME = 4096
"""Largest message before the peer is authenticated."""
HANDSHAKE_TIMEOUT_S = 5.0
CHUNK = 256 << 10
"""Rank output and event bytes travel in pieces of at most this size."""
READ_SIZE = 32 << 10
"""The msgpack buffer each :class:`FrameReader` starts with (bytes). msgpack's default is
``min(limit, 1 MiB)``, allocated up front and filled page by page as the stream moves through
it: about 1 MiB resident per connection. This one grows (to at most ``limit``) only when a
frame needs it."""


class WireError(TrainguardError):
    """A malformed, oversized, unauthenticated or late message: the connection is dropped."""


def new_secret() -> str:
    """A fresh per-run secret (hex)."""
    return secrets.token_hex(32)


def nonce() -> bytes:
    return secrets.token_bytes(16)


def instance_id() -> bytes:
    """A fresh id for one agent process: its reconnects present it again, so the hub can tell
    the agent it knows from another one claiming the same node (:mod:`trainguard.agent.hub`)."""
    return secrets.token_bytes(16)


def mac(secret: bytes, label: bytes, *parts: bytes | str) -> bytes:
    """HMAC-SHA256 of ``label`` and ``parts``, each length-prefixed (no ambiguity)."""
    h = hmac.new(secret, label, hashlib.sha256)
    for part in parts:
        raw = part.encode() if isinstance(part, str) else part
        h.update(len(raw).to_bytes(4, "big"))
        h.update(raw)
    return h.digest()


def same_mac(expected: bytes, got: object) -> bool:
    return isinstance(got, bytes) and hmac.compare_digest(expected, got)


def _no_ext(code: int, data: bytes) -> Any:
    raise WireError(f"msgpack extension type {code} is not part of the protocol")


def pack(msg: Mapping[str, Any], limit: int = MAX_BODY) -> bytes:
    """One message as bytes; :class:`WireError` when it would exceed ``limit``."""
    data: bytes = msgpack.packb(dict(msg), use_bin_type=True)
    if len(data) > limit:
        raise WireError(f"message {msg.get('t')!r} is {len(data)} bytes (limit {limit})")
    return data


class FrameReader:
    """Splits received bytes into messages, with every size bounded by ``limit``."""

    def __init__(self, limit: int = MAX_FRAME) -> None:
        self.limit = limit
        self._unpacker = self._new(limit)

    @staticmethod
    def _new(limit: int) -> msgpack.Unpacker:
        return msgpack.Unpacker(max_buffer_size=limit, read_size=min(limit, READ_SIZE),
                                raw=False, strict_map_key=True, ext_hook=_no_ext,
                                use_list=True)

    def relimit(self, limit: int) -> None:
        """Raise the limit after the handshake (nothing may be buffered then)."""
        self.limit = limit
        self._unpacker = self._new(limit)

    def feed(self, data: bytes, whole: bool = False) -> list[dict[str, Any]]:
        """The complete messages ``data`` finishes; :class:`WireError` on anything malformed
        (with ``whole``, also when ``data`` ends inside a message)."""
        out: list[dict[str, Any]] = []
        start = self._unpacker.tell()
        view = memoryview(data)
        while view:
            take = view[:self.limit]
            view = view[self.limit:]
            try:
                self._unpacker.feed(take)
            except msgpack.BufferFull:
                raise WireError(f"frame larger than {self.limit} bytes") from None
            try:
                for msg in self._unpacker:
                    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
                        raise WireError("a message that is not a typed map")
                    out.append(msg)
            except WireError:
                raise
            except Exception as exc:  # msgpack's FormatError, StackError, ValueError, ...
                raise WireError(f"malformed frame: {type(exc).__name__}: {exc}") from None
        if whole and self._unpacker.tell() - start != len(data):
            raise WireError("a sealed frame ends inside a message")
        return out


async def read_one(reader: asyncio.StreamReader, frames: FrameReader,
                   timeout_s: float, rest: list[dict[str, Any]] | None = None
                   ) -> dict[str, Any]:
    """The next single message (handshake steps), within ``timeout_s``. Messages that came
    in the same read go to ``rest`` when given (a peer may send its next message right after
    the handshake's last one), else they are an error."""
    pending: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pending:
        left = deadline - loop.time()
        if left <= 0:
            raise WireError("no handshake message in time")
        try:
            data = await asyncio.wait_for(reader.read(frames.limit), left)
        except TimeoutError:
            raise WireError("no handshake message in time") from None
        if not data:
            raise WireError("connection closed during the handshake")
        pending = frames.feed(data)
    if len(pending) > 1:
        if rest is None:
            raise WireError("unexpected extra message during the handshake")
        rest.extend(pending[1:])
    return pending[0]


_TAG = 32
"""HMAC-SHA256 tag length (bytes)."""
_COUNTER = 8


def session_keys(secret: bytes, server_nonce: bytes, client_nonce: bytes,
                 *identity: str | bytes) -> tuple[bytes, bytes]:
    """This connection's keys, (client to server, server to client), derived from the run's
    secret, both nonces and the dialer's identity: never the same for two connections."""
    root = mac(secret, b"session", server_nonce, client_nonce, *identity)
    return mac(root, b"c2s"), mac(root, b"s2c")


class Channel:
    """Per-message integrity for one authenticated connection (both directions).

    Each frame is ``{"t": "m", "n": counter, "b": messages, "h": tag}``: ``b`` holds one or
    more packed messages, ``n`` counts this direction's frames from 1 and ``h`` is the HMAC of
    both under this direction's key. A frame is accepted only with the next counter and the
    right tag, so nothing can be forged, altered, replayed, reordered or left out unnoticed.
    """

    def __init__(self, key_out: bytes, key_in: bytes) -> None:
        self._out, self._in = key_out, key_in
        self._sent = 0
        self._received = 0
        self._bodies = FrameReader(MAX_FRAME)
        """One reader for every received body: a body is checked to end on a message boundary
        (``whole``), so nothing is left buffered between frames; after a bad one the connection
        is dropped."""

    def _tag(self, key: bytes, counter: int, body: bytes) -> bytes:
        return hmac.new(key, counter.to_bytes(_COUNTER, "big") + body, hashlib.sha256).digest()

    def _envelope(self, body: bytes) -> bytes:
        self._sent += 1
        return pack({"t": "m", "n": self._sent, "b": body,
                     "h": self._tag(self._out, self._sent, body)}, MAX_FRAME)

    def seal(self, bodies: Iterable[bytes]) -> bytes:
        """Packed messages (each at most :data:`MAX_BODY`) as frames to write, as few as fit."""
        frames: list[bytes] = []
        group: list[bytes] = []
        size = 0
        for body in bodies:
            if group and size + len(body) > MAX_BODY:
                frames.append(self._envelope(b"".join(group)))
                group, size = [], 0
            group.append(body)
            size += len(body)
        if group:
            frames.append(self._envelope(b"".join(group)))
        return b"".join(frames)

    def open(self, frame: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The messages of one received frame; :class:`WireError` unless it is the next frame
        of this connection, untouched."""
        counter, body, tag = frame.get("n"), frame.get("b"), frame.get("h")
        if frame.get("t") != "m" or not isinstance(body, bytes) or not isinstance(tag, bytes) \
                or not isinstance(counter, int) or isinstance(counter, bool):
            raise WireError("an unsealed frame after the handshake")
        if counter != self._received + 1:
            raise WireError(f"frame {counter} out of order (expected {self._received + 1}): "
                            "replayed or dropped")
        if not hmac.compare_digest(self._tag(self._in, counter, body), tag):
            raise WireError("a frame with a wrong MAC (forged or altered)")
        self._received = counter
        return self._bodies.feed(body, whole=True)


def text(msg: Mapping[str, Any], key: str, limit: int = 256) -> str:
    """A string field, bounded; :class:`WireError` otherwise."""
    value = msg.get(key)
    if not isinstance(value, str) or len(value) > limit:
        raise WireError(f"field {key!r} of {msg.get('t')!r} must be a string of at most "
                        f"{limit} characters")
    return value


def integer(msg: Mapping[str, Any], key: str) -> int:
    value = msg.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise WireError(f"field {key!r} of {msg.get('t')!r} must be an integer")
    return value


__all__ = ["CHUNK", "HANDSHAKE_FRAME", "HANDSHAKE_TIMEOUT_S", "MAX_BODY", "MAX_FRAME",
           "PROTOCOL", "READ_SIZE", "SECRET_ENV", "Channel", "FrameReader", "WireError",
           "instance_id", "integer", "mac", "new_secret", "nonce", "pack", "read_one", "same_mac",
           "session_keys", "text"]
