"""The hub's inbox is bounded: with the supervisor's poll behind, readers stop (backpressure),
the agent keeps the rest, and everything arrives in order once the poll resumes."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator

import pytest

from trainguard.agent.client import Identity, Outbox, dial
from trainguard.agent.hub import AgentHub
from trainguard.agent.wire import MAX_FRAME

SECRET = "s3cret"
SESSION = "sess1"
HIGH = 64 << 10


@pytest.fixture()
def hub() -> Iterator[AgentHub]:
    h = AgentHub(SECRET, SESSION, heartbeat_s=0.1, inbox_high_bytes=HIGH)
    h.start()
    h.expect(0, ["n1", "n2"])
    yield h
    h.close()


def _agent(hub: AgentHub, node: str, count: int, done: threading.Event,
           stop: threading.Event) -> None:
    """An agent that sends ``count`` messages as the hub acknowledges them, as the real one
    does: its outbox holds what is unacknowledged, bounded."""

    async def run() -> None:
        ident = Identity("agent", node, SESSION, 0, SECRET.encode())
        conn = await dial(*hub.address, ident)
        outbox = Outbox(limit_bytes=16 << 20)
        sent = 0
        acked = conn.acked
        while not stop.is_set():
            if sent < count and sent - acked < 64:  # at most 64 unacknowledged in flight
                batch = [outbox.add({"t": "out", "rank": 0, "i": i, "data": b"x" * 1000})
                         for i in range(sent, min(count, sent + 16))]
                conn.send(batch)
                sent += len(batch)
                await conn.writer.drain()
            try:
                data = await asyncio.wait_for(conn.reader.read(65536), 0.05)
            except TimeoutError:
                continue
            if not data:
                return
            for m in conn.feed(data):
                if m["t"] == "ack":
                    acked = int(m["seq"])
                    outbox.ack(acked)
            if acked >= count:
                done.set()
        conn.writer.close()

    asyncio.run(run())


def test_a_poll_that_falls_behind_holds_the_readers_and_loses_nothing(hub: AgentHub) -> None:
    count = 2000  # about 2 MB, 30 times the high-water mark
    done, stop = threading.Event(), threading.Event()
    agent = threading.Thread(target=_agent, args=(hub, "n1", count, done, stop), daemon=True)
    agent.start()
    try:
        peak = 0
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # nobody takes: the inbox stops growing
            peak = max(peak, hub.queued()[0])
            time.sleep(0.01)
        assert HIGH <= peak <= HIGH + MAX_FRAME
        assert not done.is_set()
        # a held reader does not make its host look silent
        assert time.time() - hub.peers()["n1"].last_seen < 1.0
        got = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            got += hub.take()
            time.sleep(0.01)
        assert [m.msg["i"] for m in got] == list(range(count))
        assert done.wait(5)
    finally:
        stop.set()
        agent.join(5)


def test_other_agents_are_still_admitted_while_readers_are_held(hub: AgentHub) -> None:
    done, stop = threading.Event(), threading.Event()
    agent = threading.Thread(target=_agent, args=(hub, "n1", 500, done, stop), daemon=True)
    agent.start()
    try:
        deadline = time.monotonic() + 5
        while hub.queued()[0] < HIGH and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hub.queued()[0] >= HIGH

        async def connect() -> int:
            conn = await dial(*hub.address, Identity("agent", "n2", SESSION, 0,
                                                     SECRET.encode()))
            conn.writer.close()
            return conn.acked

        assert asyncio.run(connect()) == 0  # the handshake is served
        deadline = time.monotonic() + 5  # the hub registers it right after the welcome
        while not hub.peers()["n2"].ever_connected and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hub.peers()["n2"].ever_connected
        assert hub.queued()[0] >= HIGH  # n1 was held all along
    finally:
        stop.set()
        agent.join(5)
        hub.take()


def test_watermarks_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="inbox_high_bytes"):
        AgentHub(SECRET, SESSION, inbox_high_bytes=0)


def test_closing_the_hub_with_held_readers_ends_them_cleanly(
        caplog: pytest.LogCaptureFixture) -> None:
    h = AgentHub(SECRET, SESSION, heartbeat_s=0.1, inbox_high_bytes=HIGH)
    h.start()
    h.expect(0, ["n1"])
    errors: list[str] = []
    loop_ready = threading.Event()

    loop = h._loop
    assert loop is not None

    def watch() -> None:
        loop.set_exception_handler(lambda _l, ctx: errors.append(str(ctx.get("message"))))
        loop_ready.set()

    h._call(watch)
    assert loop_ready.wait(5)
    done, stop = threading.Event(), threading.Event()
    agent = threading.Thread(target=_agent, args=(h, "n1", 500, done, stop), daemon=True)
    agent.start()
    deadline = time.monotonic() + 5
    while h.queued()[0] < HIGH and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    h.close()
    stop.set()
    agent.join(5)
    assert h._thread is not None and not h._thread.is_alive()
    del h
    gc.collect()  # a reader task left pending at the loop's close is reported when collected
    assert errors == []
