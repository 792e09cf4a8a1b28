"""The wire's framing and MACs: bounded, typed, and never a crash on garbage."""

from __future__ import annotations

import msgpack
import pytest

from trainguard.agent.wire import FrameReader, WireError, mac, pack, same_mac


def test_messages_split_across_and_within_reads() -> None:
    data = pack({"t": "out", "rank": 1, "data": b"x" * 1000}) + pack({"t": "hb"})
    frames = FrameReader(4096)
    got = []
    for i in range(0, len(data), 7):  # a byte stream cut anywhere
        got += frames.feed(data[i:i + 7])
    assert [m["t"] for m in got] == ["out", "hb"]
    assert got[0]["data"] == b"x" * 1000


@pytest.mark.parametrize("raw", [
    msgpack.packb([1, 2, 3]),                      # not a map
    msgpack.packb({"x": 1}),                       # no type
    msgpack.packb({"t": 5}),                       # type not a string
    msgpack.packb({1: "a", "t": "x"}),             # non-string key
    msgpack.packb(msgpack.ExtType(5, b"evil")),    # extension types are not ours
    b"\xc1" * 10,                                  # never-used byte
])
def test_malformed_frames_are_wire_errors(raw: bytes) -> None:
    with pytest.raises(WireError):
        FrameReader(4096).feed(raw)


def test_an_oversized_frame_is_refused_before_it_is_buffered() -> None:
    frames = FrameReader(1024)
    big = pack({"t": "out", "data": b"y" * 5000}, limit=1 << 20)
    with pytest.raises(WireError, match="larger than 1024"):
        frames.feed(big)


def test_a_huge_declared_length_is_refused() -> None:
    # A str header that claims 4 GiB: refused on its length, without waiting for the bytes.
    with pytest.raises(WireError):
        FrameReader(1024).feed(b"\x81\xa1t\xdb\xff\xff\xff\xff" + b"z" * 2000)


def test_pack_refuses_what_the_peer_would_refuse() -> None:
    with pytest.raises(WireError, match="limit"):
        pack({"t": "out", "data": b"z" * 2000}, limit=1024)


def test_macs_bind_every_part() -> None:
    a = mac(b"secret", b"hello", b"n1", "node1")
    assert same_mac(a, mac(b"secret", b"hello", b"n1", "node1"))
    assert not same_mac(a, mac(b"other", b"hello", b"n1", "node1"))
    assert not same_mac(a, mac(b"secret", b"hello", b"n1node1", ""))  # no splicing
    assert not same_mac(a, "not bytes")
