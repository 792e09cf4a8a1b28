"""Replica transfers between two hosts' agents, over real sockets on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.errors import SnapshotError
from trainguard.snapshot.layout import HostDirs
from trainguard.snapshot.replicawire import (
    MAGIC,
    NONCE,
    ReplicaConfig,
    ReplicaRefused,
    ReplicaServer,
    Wanted,
    _mac,
    fetch_slot,
    fetched_path,
    push_slot,
    replica_key,
)
from trainguard.snapshot.slot import read_header, read_verified, slot_paths, write_slot

SECRET = b"run-secret"


@pytest.fixture
def hosts(tmp_path: Path) -> tuple[HostDirs, HostDirs]:
    return (HostDirs(tmp_path / "h1", "run1", "n1").create(),
            HostDirs(tmp_path / "h2", "run1", "n2").create())


@pytest.fixture
def server(hosts: tuple[HostDirs, HostDirs]) -> Iterator[ReplicaServer]:
    srv = ReplicaServer(hosts[1], SECRET, attempt=2).start()
    yield srv
    srv.close()


def _own(dirs: HostDirs, rank: int, step: int, payload: bytes, slot: int = 0) -> Path:
    path = slot_paths(dirs.own, rank)[slot]
    write_slot(path, payload, rank=rank, world=4, step=step, attempt=2, node=dirs.node)
    return path


def test_push_then_fetch_round_trip(hosts: tuple[HostDirs, HostDirs],
                                    server: ReplicaServer) -> None:
    h1, h2 = hosts
    payload = os.urandom(3 << 20)  # several chunks
    src = _own(h1, 1, 7, payload)
    where, header = push_slot(("127.0.0.1", server.port), SECRET, "n1", 2, src)
    replica = Path(where)
    assert replica.parent == h2.replica("n1")
    got = read_header(replica)
    assert got is not None and (got.rank, got.step, got.attempt, got.digest, got.node) == (
        1, 7, 2, header.digest, "n1")
    assert read_verified(replica, None) == payload
    # n1 lost its memory; the shard comes back from n2's replica
    src.unlink()
    dst = fetched_path(h1, 1)
    fetched = fetch_slot(("127.0.0.1", server.port), SECRET, "n1", 2,
                         Wanted(1, 7, 2, header.digest), dst)
    assert fetched.digest == header.digest and read_verified(dst, None) == payload


def test_wrong_secret_is_refused_both_ways(hosts: tuple[HostDirs, HostDirs],
                                           server: ReplicaServer) -> None:
    src = _own(hosts[0], 0, 3, b"state")
    with pytest.raises(ReplicaRefused, match="wrong secret"):
        push_slot(("127.0.0.1", server.port), b"other", "n1", 2, src)
    assert read_header(slot_paths(hosts[1].replica("n1"), 0)[0]) is None
    with pytest.raises(SnapshotError):
        fetch_slot(("127.0.0.1", server.port), b"other", "n1", 2, Wanted(0, 3, 2, "x"),
                   fetched_path(hosts[0], 0))
    assert server.refused >= 2


def test_stale_sender_is_refused(hosts: tuple[HostDirs, HostDirs],
                                 server: ReplicaServer) -> None:
    src = _own(hosts[0], 0, 3, b"state")
    with pytest.raises(ReplicaRefused, match="stale"):
        push_slot(("127.0.0.1", server.port), SECRET, "n1", 1, src)


def test_fenced_server_serves_nothing(hosts: tuple[HostDirs, HostDirs]) -> None:
    live = [True]
    srv = ReplicaServer(hosts[1], SECRET, attempt=2, live=lambda: live[0]).start()
    try:
        src = _own(hosts[0], 0, 3, b"state")
        push_slot(("127.0.0.1", srv.port), SECRET, "n1", 2, src)
        live[0] = False
        with pytest.raises(SnapshotError):
            push_slot(("127.0.0.1", srv.port), SECRET, "n1", 2, src)
    finally:
        srv.close()


def _raw_put(port: int, key: bytes, req: dict[str, object], payload: bytes) -> socket.socket:
    """A client that speaks the protocol but sends what it likes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    hello = sock.recv(len(MAGIC) + NONCE, socket.MSG_WAITALL)
    nonce_s, nonce_c = hello[len(MAGIC):], os.urandom(NONCE)
    raw = json.dumps(req).encode()
    sock.sendall(MAGIC + nonce_c + struct.pack("!I", len(raw)) + raw
                 + _mac(key, b"c", nonce_s, nonce_c, raw))
    assert sock.recv(1) == b"+"
    (length,) = struct.unpack("!I", sock.recv(4, socket.MSG_WAITALL))
    sock.recv(length + 32, socket.MSG_WAITALL)
    sock.sendall(payload)
    return sock


def _req(size: int, digest: str, step: int = 9) -> dict[str, object]:
    return {"op": "put", "src": "n1", "agent_attempt": 2, "rank": 0, "world": 1, "step": step,
            "attempt": 2, "digest": digest, "size": size, "node": "n1", "created": 1.0}


def test_transfer_cut_midway_is_never_committed(hosts: tuple[HostDirs, HostDirs]) -> None:
    srv = ReplicaServer(hosts[1], SECRET, attempt=2,
                        config=ReplicaConfig(idle_timeout_s=1.0)).start()
    try:
        old = _own(hosts[0], 0, 5, b"x" * 1000)
        push_slot(("127.0.0.1", srv.port), SECRET, "n1", 2, old)  # replica slot .a: step 5
        sock = _raw_put(srv.port, replica_key(SECRET), _req(1 << 20, "00000000"), b"y" * 5000)
        sock.close()  # cut after 5000 of 1 MiB
        srv.close()  # waits for nothing; the connection thread saw the cut
        a, b = slot_paths(hosts[1].replica("n1"), 0)
        assert read_header(b) is None  # the torn transfer went to the other slot
        header = read_header(a)
        assert header is not None and header.step == 5  # the last good replica is kept
    finally:
        srv.close()


def test_digest_mismatch_is_refused(hosts: tuple[HostDirs, HostDirs],
                                    server: ReplicaServer) -> None:
    sock = _raw_put(server.port, replica_key(SECRET), _req(4, "deadbeef"), b"abcd")
    try:
        assert sock.recv(1) == b"-"
    finally:
        sock.close()
    for path in slot_paths(hosts[1].replica("n1"), 0):
        assert read_header(path) is None


def test_at_most_two_replica_slots_per_source_rank(hosts: tuple[HostDirs, HostDirs],
                                                   server: ReplicaServer) -> None:
    for step in range(1, 6):
        src = _own(hosts[0], 0, step, bytes([step]) * 100, slot=step % 2)
        push_slot(("127.0.0.1", server.port), SECRET, "n1", 2, src)
    names = sorted(p.name for p in hosts[1].replica("n1").iterdir())
    assert names == ["rank00000.a", "rank00000.b"]
    steps = sorted(h.step for p in slot_paths(hosts[1].replica("n1"), 0)
                   if (h := read_header(p)) is not None)
    assert steps == [4, 5]


def test_bytes_in_flight_are_capped(hosts: tuple[HostDirs, HostDirs]) -> None:
    srv = ReplicaServer(hosts[1], SECRET, attempt=2,
                        config=ReplicaConfig(max_inflight_bytes=1000)).start()
    try:
        src = _own(hosts[0], 0, 1, b"z" * 2000)
        with pytest.raises(ReplicaRefused, match="busy"):
            push_slot(("127.0.0.1", srv.port), SECRET, "n1", 2, src)
        small = _own(hosts[0], 1, 1, b"z" * 500)
        push_slot(("127.0.0.1", srv.port), SECRET, "n1", 2, small)
    finally:
        srv.close()


def test_fetch_of_an_unknown_or_overwritten_slot_fails(hosts: tuple[HostDirs, HostDirs],
                                                       server: ReplicaServer) -> None:
    _own(hosts[1], 3, 8, b"state")
    with pytest.raises(ReplicaRefused, match="no committed slot"):
        fetch_slot(("127.0.0.1", server.port), SECRET, "n1", 2, Wanted(3, 7, 2, "00000000"),
                   fetched_path(hosts[0], 3))
    assert read_header(fetched_path(hosts[0], 3)) is None


def test_unsafe_source_name_is_refused(hosts: tuple[HostDirs, HostDirs],
                                       server: ReplicaServer) -> None:
    src = _own(hosts[0], 0, 3, b"state")
    with pytest.raises(ReplicaRefused, match="cannot name"):
        push_slot(("127.0.0.1", server.port), SECRET, "../evil", 2, src)
