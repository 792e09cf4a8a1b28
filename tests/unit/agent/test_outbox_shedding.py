"""The agent's outbox under a controller that does not acknowledge: rank output is shed (oldest
first, a marker in its place), exits and kernel-log evidence never are, memory stays bounded."""

from __future__ import annotations

from typing import Any

import msgpack

from trainguard.agent.client import Outbox, drop_marker


def _msgs(box: Outbox) -> list[dict[str, Any]]:
    out = []
    for data in box.pending():
        msg = msgpack.unpackb(data, raw=False)
        assert isinstance(msg, dict)
        out.append(msg)
    return out


def _flood(box: Outbox, n: int, size: int = 1000) -> None:
    for i in range(n):
        box.add({"t": "out", "rank": i % 2, "data": b"x" * (size - 1) + b"\n"})


def test_exits_and_kernel_log_events_survive_an_overflow() -> None:
    box = Outbox(limit_bytes=20_000)
    box.add({"t": "exit", "rank": 1, "code": 3})
    box.add({"t": "klog", "event": {"signature": "xid_79"}})
    _flood(box, 500)
    box.add({"t": "exit", "rank": 0, "code": 0})
    kinds = [m["t"] for m in _msgs(box)]
    assert kinds.count("exit") == 2 and kinds.count("klog") == 1
    assert box.dropped > 400


def test_memory_is_bounded_by_the_limit() -> None:
    box = Outbox(limit_bytes=50_000)
    _flood(box, 5_000)
    assert box.nbytes <= 50_000
    assert sum(len(d) for d in box.pending()) == box.nbytes
    assert box.room == 0  # rank output is not read while the outbox is this full


def test_a_marker_says_how_many_bytes_of_each_rank_were_dropped_where() -> None:
    box = Outbox(limit_bytes=20_000)
    _flood(box, 200)
    msgs = _msgs(box)
    total = 0
    for rank in (0, 1):
        stream = [m for m in msgs if m["t"] == "out" and m["rank"] == rank]
        first = stream[0]["data"]
        assert first.startswith(b"[trainguard: ") and first.endswith(b" bytes of rank output "
                                                                     b"dropped]\n")
        assert all(not m["data"].startswith(b"[trainguard") for m in stream[1:])
        dropped = int(first.split()[1])
        assert dropped == (100 - (len(stream) - 1)) * 1000  # exactly what is missing
        total += dropped
    assert total == box.dropped_bytes
    seqs = [m["seq"] for m in msgs]
    assert seqs == sorted(seqs)  # resent in order after a reconnect


def test_sdk_events_get_a_json_marker_and_an_ack_frees_the_room() -> None:
    box = Outbox(limit_bytes=10_000)
    for _ in range(50):
        box.add({"t": "sdk", "rank": 0, "data": b'{"kind": "step"}\n' * 30})
    assert any(m["data"] == drop_marker("sdk", int(m["data"].split(b'"bytes": ')[1][:-2]))
               for m in _msgs(box))
    box.ack(box.last_seq)
    assert len(box) == 0 and box.nbytes == 0 and box.room == 5_000
