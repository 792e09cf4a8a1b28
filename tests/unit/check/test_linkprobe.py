"""The TCP link probe on loopback: real servers and clients in threads."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from trainguard.check.linkprobe import LinkServer, measure
from trainguard.check.linkwire import MAGIC, NONCE_LEN, Conn, digest
from trainguard.check.model import Status
from trainguard.check.pairing import Isolator
from trainguard.errors import ConfigError

LO = "127.0.0.1"
SMALL = 4 << 20


@pytest.fixture
def token() -> str:
    return secrets.token_hex(16)


@pytest.fixture
def server(token: str) -> Iterator[LinkServer]:
    srv = LinkServer(LO, token, timeout_s=20.0).start()
    try:
        yield srv
    finally:
        srv.close()


def test_measures_rtt_and_both_directions(server: LinkServer, token: str) -> None:
    result = measure(LO, server.port, token, host="node1", peer="node2", nbytes=SMALL)
    assert result.status is Status.OK, result.reason
    assert (result.check, result.host, dict(result.facts)["peer"]) == ("link", "node1", "node2")
    figures = {f.name: f for f in result.figures}
    assert 0 < figures["rtt_ms"].value < 50 and not figures["rtt_ms"].higher_is_better
    assert figures["up_mbps"].value > 10 and figures["down_mbps"].value > 10
    assert figures["link_mbps"].value == min(figures["up_mbps"].value,
                                             figures["down_mbps"].value)
    report = server.wait(5.0)
    assert report is not None and report.measured and report.rejected == 0


def test_server_closes_after_the_session(server: LinkServer, token: str) -> None:
    assert measure(LO, server.port, token, host="a", peer="b", nbytes=SMALL).status is Status.OK
    assert server.wait(5.0) is not None
    again = measure(LO, server.port, token, host="a", peer="b", nbytes=SMALL, timeout_s=2.0)
    assert again.status is Status.ERROR and "cannot connect" in again.reason


def test_wrong_token_is_refused_and_server_keeps_waiting(server: LinkServer,
                                                         token: str) -> None:
    bad = measure(LO, server.port, "not-" + token, host="a", peer="b", nbytes=SMALL)
    assert bad.status is Status.ERROR and "authentication failed" in bad.reason
    assert not bad.figures
    good = measure(LO, server.port, token, host="a", peer="b", nbytes=SMALL)
    assert good.status is Status.OK
    report = server.wait(5.0)
    assert report is not None and report.measured and report.rejected == 1


def test_a_stranger_that_says_nothing_is_dropped(token: str) -> None:
    srv = LinkServer(LO, token, timeout_s=1.0).start()
    try:
        with socket.create_connection((LO, srv.port), timeout=5.0) as s:
            s.settimeout(5.0)
            assert s.recv(64).startswith(MAGIC)
            report = srv.wait(5.0)
        assert report is not None and not report.measured
    finally:
        srv.close()


def test_unreachable_port_is_an_error_fast() -> None:
    with socket.socket() as s:              # a port nobody listens on
        s.bind((LO, 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    result = measure(LO, port, "t", host="a", peer="b", timeout_s=5.0)
    assert result.status is Status.ERROR and "cannot connect to b" in result.reason
    assert time.monotonic() - t0 < 2.0


def test_not_a_link_server_is_an_error(token: str) -> None:
    with socket.create_server((LO, 0)) as lst:
        def talk() -> None:
            conn, _ = lst.accept()
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        t = threading.Thread(target=talk, daemon=True)
        t.start()
        result = measure(LO, lst.getsockname()[1], token, host="a", peer="b", timeout_s=3.0)
        t.join(5.0)
    assert result.status is Status.ERROR and "not a trainguard link server" in result.reason


def _stalling_server(lst: socket.socket, token: str, stop: threading.Event,
                     reply_nothing_received: bool = False) -> None:
    """Authenticates and answers pings, then reads nothing once a transfer starts (after
    saying it received nothing, if asked to)."""
    conn, _ = lst.accept()
    with conn:
        c = Conn(conn)
        deadline = time.monotonic() + 30
        nonce = os.urandom(NONCE_LEN)
        c.send_all(MAGIC + nonce, deadline)
        assert c.read_exact(len(MAGIC) + 32, deadline)[len(MAGIC):] == digest(token.encode(),
                                                                             nonce)
        c.send_all(b"+", deadline)
        while c.read_exact(1, deadline) == b"P":
            c.send_all(b"p" + c.read_exact(8, deadline), deadline)
        if reply_nothing_received:
            c.send_all(b"u" + bytes(16), deadline)
        stop.wait(30)


def test_a_stalled_peer_still_gives_a_figure_within_the_cap(token: str) -> None:
    stop = threading.Event()
    with socket.create_server((LO, 0)) as lst:
        t = threading.Thread(target=_stalling_server, args=(lst, token, stop), daemon=True)
        t.start()
        try:
            t0 = time.monotonic()
            result = measure(LO, lst.getsockname()[1], token, host="a", peer="b",
                             nbytes=1 << 30, timeout_s=2.0)
            took = time.monotonic() - t0
        finally:
            stop.set()
            t.join(5.0)
    assert result.status is Status.OK, result.reason
    link = result.figure("link_mbps")
    assert link is not None and link.value > 0
    assert "partial" in dict(result.facts) and "cut" in dict(result.facts)
    assert took < 2.0 + 0.5


def test_a_link_that_passes_nothing_is_an_error(token: str) -> None:
    stop = threading.Event()
    with socket.create_server((LO, 0)) as lst:
        t = threading.Thread(target=_stalling_server, args=(lst, token, stop, True),
                             daemon=True)
        t.start()
        try:
            result = measure(LO, lst.getsockname()[1], token, host="a", peer="b",
                             nbytes=1 << 30, timeout_s=1.0)
        finally:
            stop.set()
            t.join(5.0)
    assert result.status is Status.ERROR
    assert result.reason == "no data to the peer in 1 s" and not result.figures


def test_a_slow_transfer_is_cut_at_its_budget_and_rated(server: LinkServer,
                                                        token: str) -> None:
    # 1 GiB per burst cannot pass in ~0.15 s here: each direction is cut at its budget,
    # not an error.
    t0 = time.monotonic()
    result = measure(LO, server.port, token, host="a", peer="b", nbytes=1 << 30,
                     timeout_s=1.0)
    assert time.monotonic() - t0 < 1.5
    assert result.status is Status.OK, result.reason
    assert "cut" in dict(result.facts) and "partial" not in dict(result.facts)
    assert all(f.value > 0 for f in result.figures)


@pytest.mark.parametrize("kwargs", [{"nbytes": 0}, {"bursts": 0}, {"timeout_s": 0.0}])
def test_bad_parameters_are_a_clear_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="must be > 0"):
        measure(LO, 1, "t", host="a", peer="b", **kwargs)  # type: ignore[arg-type]


def test_server_needs_a_token() -> None:
    with pytest.raises(ConfigError, match=r"link\.token"):
        LinkServer(LO, "")


_PAIR = """
import sys
from trainguard.check.linkprobe import LinkServer, measure
token, host, peer = sys.argv[1:4]
srv = LinkServer("127.0.0.1", token, timeout_s=10.0).start()
try:
    fig = measure("127.0.0.1", srv.port, token, host=host, peer=peer,
                  nbytes=16 << 20).figure("link_mbps")
    print(fig.value if fig is not None else "none")
finally:
    srv.close()
"""


def _measure_round(pairs: list[tuple[str, str]], token: str) -> dict[tuple[str, str],
                                                                      float | None]:
    """A round's pairs at the same moment, as the controller runs them: each pair in a process
    of its own, as on hosts of their own (pairs in threads of one process share one
    interpreter lock, and on a loaded machine one thread's pair reads half as fast)."""
    procs = [subprocess.Popen([sys.executable, "-c", _PAIR, token, *pair],
                              stdout=subprocess.PIPE, text=True) for pair in pairs]
    values: dict[tuple[str, str], float | None] = {}
    try:
        for pair, proc in zip(pairs, procs, strict=True):
            out, _ = proc.communicate(timeout=60)
            values[pair] = None if out.strip() in ("", "none") else float(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return values


def test_isolator_over_real_loopback_measurements_finds_nothing(token: str) -> None:
    iso = Isolator([f"node{i}" for i in range(4)])
    rounds = 0
    while (pairs := iso.next_round()) is not None:
        iso.record(_measure_round(pairs, token))
        rounds += 1
    assert iso.findings() == []
    assert rounds >= 1
