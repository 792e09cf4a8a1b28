"""Per-connection memory of the wire's readers (issue 26, section 5: 1,024 agents)."""

from __future__ import annotations

import tracemalloc

import msgpack
import pytest

from trainguard.agent import wire
from trainguard.agent.wire import MAX_FRAME, Channel, FrameReader, WireError, pack


def test_a_reader_does_not_allocate_a_megabyte_up_front() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        readers = [FrameReader(MAX_FRAME) for _ in range(64)]
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(readers) == 64
    assert used < 64 * (128 << 10)  # msgpack's default: 1 MiB each, 64 MiB


def test_a_small_reader_still_takes_a_frame_up_to_its_limit_and_refuses_more() -> None:
    reader = FrameReader(MAX_FRAME)
    big = pack({"t": "out", "data": b"x" * (MAX_FRAME - 1024)}, MAX_FRAME)
    assert reader.feed(big)[0]["data"] == b"x" * (MAX_FRAME - 1024)
    with pytest.raises(WireError, match="larger than"):
        FrameReader(4096).feed(b"\xc6" + (8192).to_bytes(4, "big") + b"y" * 5000)


def test_a_channel_opens_frames_with_one_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = Channel(b"k1" * 16, b"k2" * 16), Channel(b"k2" * 16, b"k1" * 16)
    made = []
    real = msgpack.Unpacker

    def counting(*args: object, **kwargs: object) -> msgpack.Unpacker:
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(wire.msgpack, "Unpacker", counting)
    frames = FrameReader(MAX_FRAME)
    got = []
    for i in range(50):
        data = a.seal([pack({"t": "x", "i": i}), pack({"t": "y", "i": i})])
        for frame in frames.feed(data):
            got += b.open(frame)
    assert [(m["t"], m["i"]) for m in got] == [(t, i) for i in range(50) for t in "xy"]
    assert len(made) <= 1  # the test's own reader; the channel's was made before patching


def test_a_body_ending_inside_a_message_is_refused_by_a_reused_reader() -> None:
    a, b = Channel(b"k1" * 16, b"k2" * 16), Channel(b"k2" * 16, b"k1" * 16)
    assert b.open(FrameReader().feed(a.seal([pack({"t": "ok"})]))[0])[0]["t"] == "ok"
    cut = pack({"t": "x", "data": b"z" * 100})[:-10]
    with pytest.raises(WireError, match="ends inside"):
        b.open(FrameReader().feed(a.seal([cut]))[0])
