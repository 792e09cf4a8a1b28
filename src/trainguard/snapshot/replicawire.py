"""Agent-to-agent snapshot transfers: a replica server on each host and its client.

Each host's agent runs one :class:`ReplicaServer`; another host's agent pushes a committed slot
to it (``put``: a replica of its own rank's snapshot) or pulls one from it (``get``: a shard
fetched before a restore). Both ends hold the run's secret; the key is derived from it
(:func:`replica_key`), so neither the secret nor the key crosses the wire.

The wire, after the TCP connect (integers big-endian):

1. Server: ``TGR1`` + nonce_s (16 bytes).
2. Client: ``TGR1`` + nonce_c (16) + length (4) + a JSON request + HMAC(key, ``c`` nonce_s
   nonce_c request). The request names the operation, the sender's node and agent attempt,
   the rank, step, slot attempt, digest and size.
3. Server: ``+`` or ``-``, length (4), a JSON body, HMAC(key, ``s`` nonce_c nonce_s status
   body): the client knows it talks to a holder of the key too. A failed MAC gets a bare
   ``-`` and a hang-up.
4. ``put``: the client streams ``size`` payload bytes; the server writes them into the next
   replica slot of the sending node (:func:`~trainguard.snapshot.slot.next_slot`: two per
   source rank at most), checks the digest and only then commits the slot, and answers as in 3
   (MAC prefix ``d``). ``get``: the body of 3 is the slot's header, the payload follows; the
   client writes it into its slot and commits it only when the digest is the one asked for.

A transfer cut midway, or whose digest does not match, leaves an invalid (uncommitted) slot,
never restored. The server refuses a sender of another agent attempt (a stale agent), more
than ``max_inflight_bytes`` being received at once, and a second transfer of the same slot
at the same time.

    >>> srv = ReplicaServer(dirs, b"secret", attempt=3).start()        # doctest: +SKIP
    >>> push_slot(("10.0.0.2", srv.port), b"secret", "n1", 3, own_slot)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import shutil
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.errors import SnapshotError
from trainguard.snapshot.layout import HostDirs
from trainguard.snapshot.slot import (
    ALGO,
    HEADER_BYTES,
    SlotHeader,
    SlotView,
    SlotWriter,
    commit,
    digest_of,
    next_slot,
    read_header,
    slot_paths,
)

log = logging.getLogger(__name__)

MAGIC = b"TGR1"
NONCE = 16
_MAC = hashlib.sha256().digest_size
_LEN = struct.Struct("!I")
_MAX_JSON = 4096
CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Limits of one host's replica server and of each transfer."""

    max_inflight_bytes: int = 8 << 30
    """Payload bytes being received at once, over all transfers; more is refused (busy)."""
    idle_timeout_s: float = 10.0
    """A transfer with no progress for this long is cut (the slot stays invalid)."""
    max_connections: int = 16
    """Connections served at once; more are hung up on."""

    def __post_init__(self) -> None:
        if self.max_inflight_bytes < 1:
            raise ValueError("replica.max_inflight_bytes must be >= 1")
        if not self.idle_timeout_s > 0:
            raise ValueError("replica.idle_timeout_s must be > 0")
        if self.max_connections < 1:
            raise ValueError("replica.max_connections must be >= 1")


@dataclass(frozen=True, slots=True)
class Wanted:
    """The slot a ``get`` asks for (what the controller chose)."""

    rank: int
    step: int
    attempt: int
    digest: str


class ReplicaRefused(SnapshotError):
    """The other end said no (its reason in the message), or could not be trusted."""


def replica_key(secret: bytes) -> bytes:
    """The key replica transfers authenticate with, derived from the run's secret."""
    return hmac.new(secret, b"trainguard-replica-key\0", hashlib.sha256).digest()


def _mac(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        data = sock.recv(n - len(out))
        if not data:
            raise ConnectionError("the peer closed the connection")
        out += data
    return bytes(out)


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from ``sock`` (each read bounded by the socket's timeout)."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:got + CHUNK])
        if n == 0:
            raise ConnectionError(f"the peer closed the connection after {got} of "
                                  f"{len(view)} bytes")
        got += n


def _json(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ConnectionError(f"malformed JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConnectionError("expected a JSON object")
    return doc


def _int(doc: dict[str, Any], key: str, low: int = 0, high: int = 1 << 62) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ConnectionError(f"request field {key!r} must be an integer in [{low}, {high}]")
    return value


def _send_status(sock: socket.socket, key: bytes, prefix: bytes, nonce_c: bytes,
                 nonce_s: bytes, ok: bool, body: dict[str, Any]) -> None:
    status = b"+" if ok else b"-"
    raw = json.dumps(body, sort_keys=True).encode()[:_MAX_JSON]
    sock.sendall(status + _LEN.pack(len(raw)) + raw
                 + _mac(key, prefix, nonce_c, nonce_s, status, raw))


def _read_status(sock: socket.socket, key: bytes, prefix: bytes, nonce_c: bytes,
                 nonce_s: bytes) -> tuple[bool, dict[str, Any]]:
    status = _read_exact(sock, 1)
    if status not in (b"+", b"-"):
        raise ReplicaRefused(f"unexpected answer {status!r}")
    try:
        (length,) = _LEN.unpack(_read_exact(sock, _LEN.size))
    except ConnectionError:
        if status == b"-":
            raise ReplicaRefused("refused: wrong secret or stale agent") from None
        raise
    if length > _MAX_JSON:
        raise ReplicaRefused("answer too long")
    raw = _read_exact(sock, length)
    if not hmac.compare_digest(_read_exact(sock, _MAC),
                               _mac(key, prefix, nonce_c, nonce_s, status, raw)):
        raise ReplicaRefused("the server's answer is not authenticated (wrong secret)")
    return status == b"+", _json(raw)


class ReplicaServer:
    """Serves one host's snapshot slots to the run's other agents (module docstring).

    ``attempt``: this agent's attempt; a sender of another attempt is refused (stale).
    ``live``: False once this agent is fenced: nothing more is received or served."""

    def __init__(self, dirs: HostDirs, secret: bytes, attempt: int, *, host: str = "127.0.0.1",
                 port: int = 0, config: ReplicaConfig | None = None,
                 live: Callable[[], bool] = lambda: True,
                 on_copy: Callable[[Path, SlotHeader], None] | None = None) -> None:
        self.dirs = dirs
        self._key = replica_key(secret)
        self.attempt = attempt
        self.cfg = config or ReplicaConfig()
        self._live = live
        self._on_copy = on_copy
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._sock = socket.create_server((host, port), family=family)
        except OSError as exc:
            raise SnapshotError(f"replica server: cannot listen on {host}:{port}: "
                                f"{exc.strerror or exc}") from exc
        self.host = host
        self.port: int = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._inflight = 0
        self._busy: set[tuple[str, int]] = set()
        self._conns: set[socket.socket] = set()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.refused = 0
        """Connections refused (authentication, stale sender, limits) or cut."""

    def start(self) -> ReplicaServer:
        self._thread = threading.Thread(target=self._accept, name=f"replica-{self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop now: ongoing transfers are cut (their slots stay invalid)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                full = len(self._conns) >= self.cfg.max_connections
                if not full:
                    self._conns.add(conn)
            if full or not self._live():
                self.refused += 1
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name=f"replica-conn-{self.port}").start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self.cfg.idle_timeout_s)
            self._session(conn)
        except (OSError, ConnectionError, SnapshotError) as exc:
            self.refused += 1
            log.info("replica server %s:%d: connection dropped: %s", self.host, self.port, exc)
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _session(self, conn: socket.socket) -> None:
        nonce_s = os.urandom(NONCE)
        conn.sendall(MAGIC + nonce_s)
        head = _read_exact(conn, len(MAGIC) + NONCE + _LEN.size)
        if head[:len(MAGIC)] != MAGIC:
            raise ConnectionError("not a replica client")
        nonce_c = head[len(MAGIC):len(MAGIC) + NONCE]
        (length,) = _LEN.unpack(head[len(MAGIC) + NONCE:])
        if length > _MAX_JSON:
            raise ConnectionError("request too long")
        raw = _read_exact(conn, length)
        if not hmac.compare_digest(_read_exact(conn, _MAC),
                                   _mac(self._key, b"c", nonce_s, nonce_c, raw)):
            conn.sendall(b"-")
            raise ConnectionError("wrong secret")
        req = _json(raw)
        answer = self._check(req)
        if answer is not None:
            _send_status(conn, self._key, b"s", nonce_c, nonce_s, False, {"error": answer})
            raise SnapshotError(answer)
        if req.get("op") == "put":
            self._put(conn, req, nonce_c, nonce_s)
        else:
            self._get(conn, req, nonce_c, nonce_s)

    def _check(self, req: dict[str, Any]) -> str | None:
        """Why ``req`` is refused, or None."""
        if not self._live():
            return "this agent is fenced"
        if req.get("op") not in ("put", "get"):
            return f"unknown operation {str(req.get('op'))[:20]!r}"
        try:
            attempt = _int(req, "agent_attempt")
            _int(req, "rank", 0, 1 << 24)
            if req.get("op") == "put":
                self.dirs.replica(str(req.get("src")))  # a name that can be a directory
                _int(req, "size", 0, 1 << 50)
        except (ConnectionError, SnapshotError) as exc:
            return str(exc)
        if attempt != self.attempt:
            return (f"sender of attempt {attempt} refused by the agent of attempt "
                    f"{self.attempt} (stale)")
        return None

    def _put(self, conn: socket.socket, req: dict[str, Any], nonce_c: bytes,
             nonce_s: bytes) -> None:
        src, rank, size = str(req["src"]), int(req["rank"]), int(req["size"])
        digest = str(req.get("digest", ""))[:64]
        directory = self.dirs.replica(src)
        why = None
        with self._lock:
            if (src, rank) in self._busy:
                why = f"a replica of {src}'s rank {rank} is already being received"
            elif self._inflight + size > self.cfg.max_inflight_bytes:
                why = (f"busy: {self._inflight} bytes in flight, limit "
                       f"{self.cfg.max_inflight_bytes}")
            else:
                self._busy.add((src, rank))
                self._inflight += size
        if why is not None:
            _send_status(conn, self._key, b"s", nonce_c, nonce_s, False, {"error": why})
            raise SnapshotError(why)
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            path = next_slot(directory, rank)
            free = shutil.disk_usage(directory).free + _size_of(path)
            if HEADER_BYTES + size > free:
                why = f"no room for {size} bytes in {directory} ({free} free)"
                _send_status(conn, self._key, b"s", nonce_c, nonce_s, False, {"error": why})
                raise SnapshotError(why)
            _send_status(conn, self._key, b"s", nonce_c, nonce_s, True, {"path": str(path)})
            try:
                header = _receive_slot(conn, path, size, req, digest,
                                       node=str(req.get("node", src)))
            except SnapshotError as exc:
                with contextlib.suppress(OSError):
                    _send_status(conn, self._key, b"d", nonce_c, nonce_s, False,
                                 {"error": str(exc)})
                raise
        finally:
            with self._lock:
                self._busy.discard((src, rank))
                self._inflight -= size
        _send_status(conn, self._key, b"d", nonce_c, nonce_s, True,
                     {"path": str(path), "digest": header.digest})
        if self._on_copy is not None:
            self._on_copy(path, header)

    def _get(self, conn: socket.socket, req: dict[str, Any], nonce_c: bytes,
             nonce_s: bytes) -> None:
        want = Wanted(int(req["rank"]), _int(req, "step"), _int(req, "attempt"),
                      str(req.get("digest", ""))[:64])
        found = find_slot(self.dirs, want)
        if found is None:
            why = (f"no committed slot of rank {want.rank} step {want.step} attempt "
                   f"{want.attempt} digest {want.digest} on {self.dirs.node}")
            _send_status(conn, self._key, b"s", nonce_c, nonce_s, False, {"error": why})
            raise SnapshotError(why)
        path, header = found
        with SlotView(path, header) as view:
            _send_status(conn, self._key, b"s", nonce_c, nonce_s, True, header.to_json())
            for start in range(0, len(view.payload), CHUNK):
                conn.sendall(view.payload[start:start + CHUNK])


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _receive_slot(sock: socket.socket, path: Path, size: int, meta: dict[str, Any],
                  digest: str, node: str) -> SlotHeader:
    """``size`` payload bytes from ``sock`` into ``path``, committed only when their digest
    is ``digest`` (else the slot stays invalid and :class:`SnapshotError` is raised)."""
    with SlotWriter(path, size) as w:
        _recv_into(sock, w.payload)
        actual = digest_of(w.payload)
    if actual != digest:
        raise SnapshotError(f"received slot {path}: digest {actual} is not the sender's "
                            f"{digest} (corrupted in transit); not committed")
    try:
        header = SlotHeader(_int(meta, "rank", 0, 1 << 24), _int(meta, "world", 1, 1 << 24),
                            _int(meta, "step"), _int(meta, "attempt"), size, digest, ALGO, node,
                            float(meta.get("created", 0.0)))
    except (ConnectionError, TypeError, ValueError) as exc:
        raise SnapshotError(f"received slot {path}: bad header field: {exc}") from exc
    commit(path, header)
    return header


def find_slot(dirs: HostDirs, want: Wanted) -> tuple[Path, SlotHeader] | None:
    """The committed slot on this host (own, replica or fetched) that is ``want``."""
    candidates = list(slot_paths(dirs.own, want.rank))
    replicas = dirs.host / "replica"
    with contextlib.suppress(OSError):
        for sub in sorted(replicas.iterdir()):
            candidates += slot_paths(sub, want.rank)
    candidates.append(fetched_path(dirs, want.rank))
    for path in candidates:
        header = read_header(path)
        if header is not None and header.rank == want.rank and (
                header.step, header.attempt, header.digest) == (want.step, want.attempt,
                                                                 want.digest):
            return path, header
    return None


def fetched_path(dirs: HostDirs, rank: int) -> Path:
    """Where a shard fetched for ``rank`` lands on this host."""
    return dirs.fetched / f"rank{rank:05d}.snap"


def _open(addr: tuple[str, int], key: bytes, req: dict[str, Any], timeout_s: float
          ) -> tuple[socket.socket, bytes, bytes, dict[str, Any]]:
    """Connect, authenticate both ways, send ``req``; the socket, nonces and the answer."""
    try:
        sock = socket.create_connection(addr, timeout=timeout_s)
    except OSError as exc:
        raise SnapshotError(f"cannot reach the replica server {addr[0]}:{addr[1]}: "
                            f"{exc.strerror or exc}") from exc
    try:
        sock.settimeout(timeout_s)
        hello = _read_exact(sock, len(MAGIC) + NONCE)
        if hello[:len(MAGIC)] != MAGIC:
            raise ReplicaRefused(f"{addr[0]}:{addr[1]} is not a replica server")
        nonce_s, nonce_c = hello[len(MAGIC):], os.urandom(NONCE)
        raw = json.dumps(req, sort_keys=True).encode()
        sock.sendall(MAGIC + nonce_c + _LEN.pack(len(raw)) + raw
                     + _mac(key, b"c", nonce_s, nonce_c, raw))
        ok, body = _read_status(sock, key, b"s", nonce_c, nonce_s)
        if not ok:
            raise ReplicaRefused(f"{addr[0]}:{addr[1]} refused: "
                                 f"{str(body.get('error'))[:500]}")
    except (OSError, ConnectionError) as exc:
        sock.close()
        raise SnapshotError(f"replica transfer with {addr[0]}:{addr[1]}: {exc}") from exc
    except SnapshotError:
        sock.close()
        raise
    return sock, nonce_c, nonce_s, body


def push_slot(addr: tuple[str, int], secret: bytes, node: str, agent_attempt: int,
              path: Path, timeout_s: float = 10.0) -> tuple[str, SlotHeader]:
    """Send this host's committed slot ``path`` to the replica server at ``addr``; returns
    the replica's path on that host and the header. :class:`SnapshotError` when it fails (the
    receiver's slot is then invalid)."""
    header = read_header(path)
    if header is None:
        raise SnapshotError(f"snapshot slot {path} is missing, torn or not committed")
    key = replica_key(secret)
    req = {"op": "put", "src": node, "agent_attempt": agent_attempt, **header.to_json(),
           "size": header.payload_bytes}
    sock, nonce_c, nonce_s, _ = _open(addr, key, req, timeout_s)
    try:
        with SlotView(path, header) as view:
            for start in range(0, len(view.payload), CHUNK):
                sock.sendall(view.payload[start:start + CHUNK])
        ok, body = _read_status(sock, key, b"d", nonce_c, nonce_s)
    except (OSError, ConnectionError, ValueError) as exc:
        raise SnapshotError(f"replica of {path} to {addr[0]}:{addr[1]} cut: {exc}") from exc
    finally:
        sock.close()
    if not ok:
        raise ReplicaRefused(f"replica of {path} refused: {str(body.get('error'))[:500]}")
    return str(body.get("path", "")), header


def fetch_slot(addr: tuple[str, int], secret: bytes, node: str, agent_attempt: int,
               want: Wanted, dst: Path, timeout_s: float = 10.0) -> SlotHeader:
    """Pull ``want`` from the replica server at ``addr`` into ``dst`` (committed only when
    its digest is ``want.digest``); :class:`SnapshotError` otherwise."""
    key = replica_key(secret)
    req = {"op": "get", "src": node, "agent_attempt": agent_attempt, "rank": want.rank,
           "step": want.step, "attempt": want.attempt, "digest": want.digest}
    sock, _, _, body = _open(addr, key, req, timeout_s)
    try:
        size = _int(body, "payload_bytes")
        if (_int(body, "rank"), _int(body, "step"), _int(body, "attempt"),
                body.get("digest")) != (want.rank, want.step, want.attempt, want.digest):
            raise SnapshotError(f"{addr[0]}:{addr[1]} offered another slot than asked")
        dst.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        return _receive_slot(sock, dst, size, body, want.digest, str(body.get("node", "")))
    except (OSError, ConnectionError) as exc:
        raise SnapshotError(f"fetch of rank {want.rank} from {addr[0]}:{addr[1]} cut: "
                            f"{exc}") from exc
    finally:
        sock.close()


__all__ = ["ReplicaConfig", "ReplicaRefused", "ReplicaServer", "Wanted", "fetch_slot",
           "fetched_path", "find_slot", "push_slot", "replica_key"]
