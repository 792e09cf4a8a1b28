"""TCP link probe: round-trip time and throughput both ways between two hosts (stdlib only).

One host's agent opens a :class:`LinkServer` for a single measurement session; the other host's
agent runs :func:`measure` against it::

    srv = LinkServer("10.0.0.2", token).start()      # the controller sent both sides the token
    result = measure("10.0.0.2", srv.port, token, host="node1", peer="node2")
    srv.close()

The wire, after the TCP connect:

1. Server: ``TGL1`` + a 16-byte nonce. Client: ``TGL1`` + HMAC-SHA256(token, nonce). Server:
   ``+`` (go on) or ``-`` (and it hangs up): the token itself never crosses the wire.
2. Commands, each a letter then big-endian fields: ``P`` seq -> ``p`` seq (ping);
   ``U`` nbytes budget_ms + nbytes zero bytes -> ``u`` received elapsed_ns (client to server);
   ``D`` nbytes budget_ms -> zero bytes + ``d`` sent (server to client); ``Q`` ends.
3. Payload bytes are zeros and every command or reply starts with a non-zero letter, so a
   transfer cut short at its time budget needs no length up front: the receiver skips zeros
   up to the next letter. A very slow link therefore still yields a rate from what got
   through in the budget instead of a timeout.

Everything is bounded: each read and write by a deadline, every size by a limit, the server
by one authenticated session and its time limit. Connections authenticate concurrently, each
within a short handshake limit, so strangers (garbage, silence) are dropped without ending the
server or delaying the real client. The key is the token mixed with the run's secret
(:func:`~trainguard.check.linkwire.link_key`) where the agents pass it.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from trainguard.check.linkserver import LinkServer, ServeReport
from trainguard.check.linkwire import (
    DTRAIL,
    MAGIC,
    NONCE_LEN,
    PING,
    UREPLY,
    XFER,
    Conn,
    LinkClosed,
    LinkTimeout,
    digest,
    link_key,
)
from trainguard.check.model import Figure, ProbeResult, Status
from trainguard.errors import ConfigError

CHECK = "link"
DEFAULT_NBYTES = 64 << 20
"""Per burst and direction: ~20-70 ms on loopback or a veth pair (1-3 GB/s), so the 2 x 3
bursts of a healthy link take ~0.2-0.5 s."""


@dataclass(frozen=True, slots=True)
class _Burst:
    nbytes: int
    seconds: float
    cut: bool
    """Stopped at its time budget (the rate is from what got through)."""

    @property
    def mbps(self) -> float:
        return self.nbytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def measure(addr: str, port: int, token: str, *, host: str, peer: str,
            nbytes: int = DEFAULT_NBYTES, bursts: int = 3, pings: int = 20,
            timeout_s: float = 10.0, secret: bytes | None = None) -> ProbeResult:
    """Measure the link from this host (``host``) to ``peer``'s :class:`LinkServer`.

    Figures: ``rtt_ms`` (median of ``pings`` round trips), ``up_mbps`` (this host -> peer),
    ``down_mbps`` and ``link_mbps`` (the smaller), each the best of ``bursts`` transfers of
    ``nbytes``. Never raises for the network: a refused or unreachable peer, a wrong token or
    a link that passes nothing in the time is ``Status.ERROR`` with the reason.
    """
    if nbytes <= 0 or bursts <= 0 or pings <= 0 or not timeout_s > 0:
        raise ConfigError("link: nbytes, bursts, pings and timeout_s must be > 0")
    start = time.monotonic()
    deadline = start + timeout_s
    facts = (("peer", peer), ("addr", f"{addr}:{port}"))

    def result(status: Status, figures: tuple[Figure, ...] = (), reason: str = "",
               extra: tuple[tuple[str, str], ...] = ()) -> ProbeResult:
        return ProbeResult(CHECK, host, status, figures, reason,
                           round(time.monotonic() - start, 3), facts + extra)

    try:
        sock = socket.create_connection((addr, port), timeout=max(0.05, min(5.0, timeout_s)))
    except OSError as exc:
        return result(Status.ERROR, reason=f"cannot connect to {peer} at {addr}:{port}: "
                                           f"{exc.strerror or exc}")
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(sock)
        try:
            if (refused := _handshake(conn, link_key(token, secret), deadline)) is not None:
                return result(Status.ERROR, reason=f"{peer} {refused}")
            rtts = _pings(conn, pings, deadline)
            up, up_broken = _bursts(conn, b"U", nbytes, bursts, deadline, share=0.5)
            down: list[_Burst] = []
            if not up_broken:
                down, down_broken = _bursts(conn, b"D", nbytes, bursts, deadline, share=1.0)
                if not down_broken:     # a courtesy: the figures are in, even past the cap
                    with contextlib.suppress(LinkTimeout, OSError):
                        conn.send_all(b"Q", time.monotonic() + 0.1)
        except LinkTimeout:
            return result(Status.ERROR, reason=f"{peer} stopped answering within "
                                               f"{timeout_s:g} s")
        except (LinkClosed, OSError) as exc:
            return result(Status.ERROR, reason=f"{peer} closed the connection: {exc}")
    return _conclude(result, rtts, up, down, timeout_s)


def _handshake(conn: Conn, token: bytes, deadline: float) -> str | None:
    hello = conn.read_exact(len(MAGIC) + NONCE_LEN, deadline)
    if hello[:len(MAGIC)] != MAGIC:
        return "is not a trainguard link server"
    conn.send_all(MAGIC + digest(token, hello[len(MAGIC):]), deadline)
    try:
        verdict = conn.read_exact(1, deadline)
    except LinkClosed:
        verdict = b"-"
    return None if verdict == b"+" else "refused the token (authentication failed)"


def _pings(conn: Conn, count: int, deadline: float) -> list[float]:
    # Pings get at most a tenth of the time: on a slow link they are not the point.
    until = time.monotonic() + (deadline - time.monotonic()) * 0.1
    rtts: list[float] = []
    for seq in range(count):
        if rtts and time.monotonic() > until:
            break
        t0 = time.perf_counter()
        conn.send_all(PING.pack(b"P", seq), deadline)
        if conn.read_exact(PING.size, deadline) != PING.pack(b"p", seq):
            raise LinkClosed("ping echo mismatch")
        rtts.append((time.perf_counter() - t0) * 1000)
    return rtts


def _bursts(conn: Conn, cmd: bytes, nbytes: int, count: int, deadline: float,
            share: float) -> tuple[list[_Burst], bool]:
    """Up to ``count`` bursts within ``share`` of the time left; stops after a cut one (the
    link is slow: more bursts would only eat the time). Returns (bursts, connection broken)."""
    until = time.monotonic() + (deadline - time.monotonic()) * share
    out: list[_Burst] = []
    for i in range(count):
        left = until - time.monotonic()
        if left <= 0:
            break
        # The last 15% of each budget is for the reply to arrive.
        budget = left / (count - i) * 0.85
        burst, broken = (_upload if cmd == b"U" else _download)(conn, nbytes, budget, deadline)
        out.append(burst)
        if broken or burst.cut:
            return out, broken
    return out, False


def _grace(stop: float, budget_s: float, deadline: float) -> float:
    """How long to wait for the end of a transfer after its budget: a little, within the cap."""
    return max(stop + 0.05, min(deadline, stop + max(0.2, budget_s * 0.15)))


def _upload(conn: Conn, nbytes: int, budget_s: float, deadline: float) -> tuple[_Burst, bool]:
    t0 = time.perf_counter()
    stop = time.monotonic() + budget_s
    try:
        conn.send_all(XFER.pack(b"U", nbytes, max(1, int(budget_s * 1000))), stop)
    except LinkTimeout:     # not even the request got through: nothing passes
        return _Burst(0, time.perf_counter() - t0, cut=True), True
    sent = conn.send_zeros(nbytes, stop)
    grace = _grace(stop, budget_s, deadline)
    try:
        _, got, _ = UREPLY.unpack(conn.read_exact(UREPLY.size, grace))
    except LinkTimeout:
        # The peer stopped reading: rate from what the kernel accepted; the stream is lost.
        return _Burst(sent, time.perf_counter() - t0, cut=True), True
    return _Burst(got, time.perf_counter() - t0, cut=got < nbytes), False


def _download(conn: Conn, nbytes: int, budget_s: float, deadline: float) -> tuple[_Burst, bool]:
    t0 = time.perf_counter()
    stop = time.monotonic() + budget_s
    try:
        conn.send_all(XFER.pack(b"D", nbytes, max(1, int(budget_s * 1000))), stop)
    except LinkTimeout:     # not even the request got through: nothing passes
        return _Burst(0, time.perf_counter() - t0, cut=True), True
    grace = _grace(stop, budget_s, deadline)
    got = conn.skip_zeros(nbytes, grace, tolerate_timeout=True)
    try:
        _, sent = DTRAIL.unpack(conn.read_exact(DTRAIL.size, grace))
    except LinkTimeout:
        return _Burst(got, time.perf_counter() - t0, cut=True), True
    return _Burst(got, time.perf_counter() - t0, cut=sent < nbytes), False


def _conclude(result: Callable[..., ProbeResult], rtts: list[float], up: list[_Burst],
              down: list[_Burst], timeout_s: float) -> ProbeResult:
    if not up or max(b.nbytes for b in up) == 0 or (down and max(b.nbytes for b in down) == 0):
        way = "to" if not up or max(b.nbytes for b in up) == 0 else "from"
        return result(Status.ERROR, reason=f"no data {way} the peer in {timeout_s:g} s")
    figures = [Figure("rtt_ms", round(statistics.median(rtts), 4), "ms",
                      higher_is_better=False)]
    up_mbps = max(b.mbps for b in up)
    figures.append(Figure("up_mbps", round(up_mbps, 2), "MB/s"))
    rates = [up_mbps]
    extra: list[tuple[str, str]] = []
    if down:
        down_mbps = max(b.mbps for b in down)
        figures.append(Figure("down_mbps", round(down_mbps, 2), "MB/s"))
        rates.append(down_mbps)
    else:
        extra.append(("partial", "the peer stopped reading: server->client not measured"))
    figures.append(Figure("link_mbps", round(min(rates), 2), "MB/s"))
    if any(b.cut for b in (*up, *down)):
        extra.append(("cut", "a transfer hit its time budget: rate from what got through"))
    return result(Status.OK, tuple(figures), extra=tuple(extra))


__all__ = ["DEFAULT_NBYTES", "LinkServer", "ServeReport", "measure"]

