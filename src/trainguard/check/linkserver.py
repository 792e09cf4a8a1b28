"""The link probe's server side: one authenticated measurement session, strangers ignored.

See :mod:`trainguard.check.linkprobe` for the protocol and the client. Every connection
authenticates in a thread of its own within :data:`HANDSHAKE_S`, at most :data:`MAX_PENDING`
at once (past it the oldest is dropped): garbage or a silent connection is hung up on and
counted, never ends the server, and never holds the real client past its timeout. The first
connection to prove the key gets the session; the server closes after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import select
import socket
import threading
import time
from dataclasses import dataclass

from trainguard.check.linkwire import (
    DTRAIL,
    MAGIC,
    NONCE_LEN,
    UREPLY,
    XFER,
    Conn,
    LinkClosed,
    LinkTimeout,
    digest,
    link_key,
)
from trainguard.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServeReport:
    """How a :class:`LinkServer` ended."""

    measured: bool
    """An authenticated session ran (to its end or its deadline)."""
    rejected: int
    """Connections dropped: wrong token, bad greeting, too slow to authenticate."""
    reason: str = ""


HANDSHAKE_S = 2.0
"""How long a connection has to authenticate (each in a thread of its own)."""
MAX_PENDING = 64
"""Connections authenticating at once; past it, the oldest is dropped."""


class LinkServer:
    """Accepts ONE authenticated measurement session within ``timeout_s``, then closes.

    Connections authenticate concurrently, each within :data:`HANDSHAKE_S`: strangers that
    send garbage or nothing are dropped without ending the server or holding up the real
    client. With the run's ``secret``, the key is :func:`~trainguard.check.linkwire.link_key`
    (the token alone is not enough).

    >>> srv = LinkServer("127.0.0.1", "s3cret").start()   # doctest: +SKIP
    >>> srv.port, srv.wait(10.0), srv.close()              # doctest: +SKIP
    """

    def __init__(self, host: str, token: str, *, port: int = 0, timeout_s: float = 60.0,
                 max_burst_bytes: int = 1 << 30, max_total_bytes: int = 16 << 30,
                 secret: bytes | None = None, handshake_s: float = HANDSHAKE_S) -> None:
        if not token:
            raise ConfigError("link.token must not be empty")
        if not 0 <= port <= 65535:
            raise ConfigError(f"link.port must be 0..65535, got {port}")
        if not timeout_s > 0:
            raise ConfigError(f"link.timeout_s must be > 0, got {timeout_s}")
        self._key = link_key(token, secret)
        self._timeout_s = timeout_s
        self._handshake_s = handshake_s
        self._limits = (max_burst_bytes, max_total_bytes)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._sock = socket.create_server((host, port), family=family)
        except OSError as exc:
            raise ConfigError(f"link server: cannot listen on {host}:{port}: {exc}") from exc
        self.port: int = self._sock.getsockname()[1]
        self._conn: socket.socket | None = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._report: ServeReport | None = None
        self._lock = threading.Lock()
        self._pending: list[socket.socket] = []
        """Connections still authenticating (oldest first)."""
        self._winner: socket.socket | None = None
        self._rejected = 0
        self._wake_r, self._wake_w = socket.socketpair()

    def start(self) -> LinkServer:
        """Serve in a background thread; :meth:`wait` for the outcome."""
        self._thread = threading.Thread(target=self._run, name=f"link-server-{self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        self._report = self.serve_once()

    def wait(self, timeout_s: float) -> ServeReport | None:
        """The outcome, or None when still serving after ``timeout_s``."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self._report

    def close(self) -> None:
        """Stop serving now (an ongoing session is cut)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        for sock in (self._conn, self._sock):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def serve_once(self) -> ServeReport:
        """Blocking: accept until one client authenticates, measure with it, close."""
        deadline = time.monotonic() + self._timeout_s
        try:
            conn = self._accept_until_authenticated(deadline)
            if conn is None:
                why = "closed" if self._closed.is_set() else f"no client in {self._timeout_s:g} s"
                return ServeReport(False, self._rejected, why)
            self._conn = conn
            with conn:
                reason = self._session(Conn(conn), deadline)
            return ServeReport(True, self._rejected, reason)
        except (OSError, ValueError) as exc:  # ValueError: select() on a socket close() shut
            return ServeReport(False, self._rejected,
                               "closed" if self._closed.is_set() else str(exc))
        finally:
            self._sock.close()
            self._drop_pending()
            self._wake_r.close()
            self._wake_w.close()
            if self._rejected:
                log.warning("link server on port %d: dropped %d connection(s) that did not "
                            "authenticate", self.port, self._rejected)

    def _accept_until_authenticated(self, deadline: float) -> socket.socket | None:
        """Accept connections, each authenticated by a thread of its own, until one succeeds
        (returned), the deadline passes or the server is closed (None)."""
        while not self._closed.is_set():
            with self._lock:
                if self._winner is not None:
                    return self._winner
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self._sock, self._wake_r], [], [], remaining)
            if self._wake_r in ready:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            if self._sock not in ready:
                continue
            try:
                conn, peer = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                continue
            with self._lock:
                self._pending.append(conn)
                oldest = self._pending.pop(0) if len(self._pending) > MAX_PENDING else None
            if oldest is not None:
                _hang_up(oldest)
            threading.Thread(target=self._greet, args=(conn, peer, deadline), daemon=True,
                             name=f"link-greet-{self.port}").start()
        return None

    def _greet(self, sock: socket.socket, peer: object, deadline: float) -> None:
        ok = False
        try:
            ok = self._authenticate(Conn(sock), deadline)
        finally:
            with self._lock:
                mine = sock in self._pending
                if mine:
                    self._pending.remove(sock)
                won = ok and mine and self._winner is None and not self._closed.is_set()
                if won:
                    self._winner = sock
            if won:
                with contextlib.suppress(OSError):
                    self._wake_w.send(b"x")
            else:
                log.debug("link server: dropped %s (authentication failed)", peer)
                _hang_up(sock)

    def _drop_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for sock in pending:
            _hang_up(sock)

    def _authenticate(self, conn: Conn, deadline: float) -> bool:
        auth_deadline = min(deadline, time.monotonic() + self._handshake_s)
        nonce = os.urandom(NONCE_LEN)
        try:
            conn.send_all(MAGIC + nonce, auth_deadline)
            reply = conn.read_exact(len(MAGIC) + hashlib.sha256().digest_size, auth_deadline)
            ok = reply[:len(MAGIC)] == MAGIC and hmac.compare_digest(
                reply[len(MAGIC):], digest(self._key, nonce))
        except (LinkTimeout, LinkClosed, OSError):
            ok = False
        if not ok:
            with self._lock:
                self._rejected += 1     # counted before the client hears it
        try:
            conn.send_all(b"+" if ok else b"-", auth_deadline)
        except (LinkTimeout, LinkClosed, OSError):
            return False
        return ok

    def _session(self, conn: Conn, deadline: float) -> str:
        max_burst, max_total = self._limits
        total = 0
        try:
            for _ in range(256):
                cmd = conn.read_exact(1, deadline)
                if cmd == b"P":
                    conn.send_all(b"p" + conn.read_exact(8, deadline), deadline)
                    continue
                if cmd not in (b"U", b"D"):
                    return "" if cmd == b"Q" else f"unknown command {cmd!r}"
                _, nbytes, budget_ms = XFER.unpack(cmd + conn.read_exact(12, deadline))
                total += nbytes
                if nbytes > max_burst or total > max_total:
                    return f"refused a transfer of {nbytes} bytes (limits {max_burst}/{max_total})"
                until = min(deadline, time.monotonic() + budget_ms / 1000)
                if cmd == b"U":
                    t0 = time.perf_counter_ns()
                    got = conn.count_in(nbytes, until)
                    elapsed = time.perf_counter_ns() - t0
                    conn.send_all(UREPLY.pack(b"u", got, elapsed), deadline)
                    if got < nbytes:     # cut at the budget: what is still on its way is zeros
                        conn.skip_zeros(nbytes - got, deadline)
                else:
                    sent = conn.send_zeros(nbytes, until)
                    conn.send_all(DTRAIL.pack(b"d", sent), deadline)
            return "too many commands"
        except LinkTimeout:
            return "session deadline"
        except (LinkClosed, OSError):
            return "client hung up"




def _hang_up(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


__all__ = ["HANDSHAKE_S", "MAX_PENDING", "LinkServer", "ServeReport"]
