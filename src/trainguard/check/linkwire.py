"""The link probe's socket plumbing: deadline-bounded reads and writes, zero-payload transfers.

Every call takes an absolute ``time.monotonic()`` deadline, so no read or write can outlive
the measurement it belongs to. See :mod:`trainguard.check.linkprobe` for the protocol.
"""

from __future__ import annotations

import hashlib
import hmac
import socket
import struct
import time

MAGIC = b"TGL1"
NONCE_LEN = 16
CHUNK = 256 * 1024
PING = struct.Struct("!cQ")
"""``P`` seq -> ``p`` seq."""
XFER = struct.Struct("!cQI")
"""``U`` or ``D``, nbytes, budget_ms."""
UREPLY = struct.Struct("!cQQ")
"""``u`` received elapsed_ns."""
DTRAIL = struct.Struct("!cQ")
"""``d`` sent."""
_ZERO = bytes(CHUNK)
_ZERO_VIEW = memoryview(_ZERO)


class LinkTimeout(Exception):
    """A read or write did not finish by its deadline (internal: measure() turns it into an
    ERROR result)."""


class LinkClosed(Exception):
    """The peer hung up or broke the protocol (internal, like :class:`LinkTimeout`)."""


def digest(token: bytes, nonce: bytes) -> bytes:
    """What proves a client holds the token (the key), without sending it."""
    return hmac.new(token, b"trainguard-link\0" + nonce, hashlib.sha256).digest()


def link_key(token: str, secret: bytes | None = None) -> bytes:
    """The key a link session authenticates with. With the run's ``secret`` (which every
    agent holds) it is HMAC(secret, token): the per-measurement token travels in the agents'
    messages, but without the secret it opens nothing. Without one, the token itself."""
    if not secret:
        return token.encode()
    return hmac.new(secret, b"trainguard-link-key\0" + token.encode(), hashlib.sha256).digest()


class Conn:
    """A socket with a read-ahead buffer; every method is bounded by a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._pending = b""
        self._buf = bytearray(CHUNK)
        self._view = memoryview(self._buf)

    def _settimeout(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LinkTimeout("deadline passed")
        self.sock.settimeout(remaining)

    def _recv(self, most: int, deadline: float) -> int:
        """Receive up to ``most`` bytes into the buffer: at least one, or raise."""
        self._settimeout(deadline)
        try:
            n = self.sock.recv_into(self._view, min(most, CHUNK))
        except TimeoutError as exc:
            raise LinkTimeout("read timed out") from exc
        if n == 0:
            raise LinkClosed("the peer closed the connection")
        return n

    def _take(self, most: int) -> bytes:
        data, self._pending = self._pending[:most], self._pending[most:]
        return data

    def read_exact(self, n: int, deadline: float) -> bytes:
        out = bytearray(self._take(n))
        while len(out) < n:
            k = self._recv(n - len(out), deadline)
            out += self._view[:k]
        return bytes(out)

    def count_in(self, n: int, until: float) -> int:
        """Receive and discard up to ``n`` bytes, stopping at ``until``: the count."""
        got = len(self._take(n))
        while got < n:
            try:
                got += self._recv(n - got, until)
            except LinkTimeout:
                break
        return got

    def skip_zeros(self, limit: int, deadline: float, *, tolerate_timeout: bool = False) -> int:
        """Discard zero bytes up to the next non-zero one (kept for the next read): the count.
        More than ``limit`` zeros is a protocol error; at the deadline, return the count so far
        when ``tolerate_timeout``."""
        count = 0
        while True:
            if self._pending:
                data, self._pending = self._pending, b""
            else:
                try:
                    k = self._recv(limit - count + 1, deadline)
                except LinkTimeout:
                    if tolerate_timeout:
                        return count
                    raise
                data = bytes(self._view[:k])
            if data == _ZERO[:len(data)]:
                count += len(data)
            else:
                zeros = len(data) - len(data.lstrip(b"\0"))
                count += zeros
                self._pending = data[zeros:]
            if count > limit:
                raise LinkClosed(f"more than the {limit} bytes announced")
            if self._pending:
                return count

    def send_all(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self._settimeout(deadline)
            try:
                k = self.sock.send(view)
            except TimeoutError as exc:
                raise LinkTimeout("write timed out") from exc
            view = view[k:]

    def send_zeros(self, n: int, until: float) -> int:
        """Send up to ``n`` zero bytes, stopping at ``until``: the count the kernel took."""
        sent = 0
        while sent < n:
            remaining = until - time.monotonic()
            if remaining <= 0:
                break
            self.sock.settimeout(remaining)
            try:
                sent += self.sock.send(_ZERO_VIEW[:min(CHUNK, n - sent)])
            except TimeoutError:
                break
        return sent


__all__ = ["CHUNK", "DTRAIL", "MAGIC", "NONCE_LEN", "PING", "UREPLY", "XFER", "Conn", "LinkClosed",
           "LinkTimeout", "digest", "link_key"]
