"""The link-probe server among strangers: garbage and silent connections are dropped without
ending it or delaying the real client, and with the run's secret the token alone opens nothing."""

from __future__ import annotations

import os
import secrets
import socket
import time

from trainguard.check.linkprobe import LinkServer, measure
from trainguard.check.linkwire import MAGIC
from trainguard.check.model import Status

LO = "127.0.0.1"
SMALL = 4 << 20


def test_fifty_garbage_and_five_silent_connections_do_not_stop_the_real_client() -> None:
    token, secret = secrets.token_hex(16), secrets.token_bytes(32)
    srv = LinkServer(LO, token, timeout_s=30.0, secret=secret).start()
    silent: list[socket.socket] = []
    try:
        for i in range(50):
            with socket.create_connection((LO, srv.port), timeout=5.0) as s:
                # half answer the greeting with a wrong proof, half with junk of any length
                s.sendall(MAGIC + os.urandom(32) if i % 2 else os.urandom(7 + i))
        silent = [socket.create_connection((LO, srv.port), timeout=5.0) for _ in range(5)]
        t0 = time.monotonic()
        result = measure(LO, srv.port, token, host="a", peer="b", nbytes=SMALL,
                         timeout_s=5.0, secret=secret)
        took = time.monotonic() - t0
        assert result.status is Status.OK, result.reason
        assert took < 5.0
        report = srv.wait(10.0)
        assert report is not None and report.measured, report
        assert report.rejected >= 50
    finally:
        for s in silent:
            s.close()
        srv.close()


def test_the_token_without_the_runs_secret_is_refused() -> None:
    token, secret = secrets.token_hex(16), secrets.token_bytes(32)
    srv = LinkServer(LO, token, timeout_s=10.0, secret=secret).start()
    try:
        bad = measure(LO, srv.port, token, host="a", peer="b", nbytes=SMALL, timeout_s=3.0)
        assert bad.status is Status.ERROR and "authentication failed" in bad.reason
        other = measure(LO, srv.port, token, host="a", peer="b", nbytes=SMALL, timeout_s=3.0,
                        secret=secrets.token_bytes(32))
        assert other.status is Status.ERROR and "authentication failed" in other.reason
        good = measure(LO, srv.port, token, host="a", peer="b", nbytes=SMALL, timeout_s=5.0,
                       secret=secret)
        assert good.status is Status.OK, good.reason
    finally:
        srv.close()


def test_a_silent_stranger_is_dropped_within_the_handshake_limit() -> None:
    token = secrets.token_hex(16)
    srv = LinkServer(LO, token, timeout_s=20.0, handshake_s=0.3).start()
    try:
        with socket.create_connection((LO, srv.port), timeout=5.0) as s:
            s.settimeout(3.0)
            assert s.recv(64).startswith(MAGIC)
            t0 = time.monotonic()
            rest = s.recv(64)  # the server's "-" then EOF once the limit passes
            while rest and rest != b"":
                rest = s.recv(64)
            assert time.monotonic() - t0 < 2.0
        good = measure(LO, srv.port, token, host="a", peer="b", nbytes=SMALL, timeout_s=5.0)
        assert good.status is Status.OK, good.reason
    finally:
        srv.close()
