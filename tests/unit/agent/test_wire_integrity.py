"""Attacks on the authenticated wire (issue 26, "The wire and the secret"): a second connection
cannot take over a host's session, sequence numbers stay in their window, and every frame after
the handshake is sealed (forged, altered or replayed frames are refused)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from trainguard.agent.client import Connection, Identity, Outbox, dial
from trainguard.agent.hub import AgentHub
from trainguard.agent.wire import WireError, pack

SECRET = "run-secret"
SESSION = "sess-int"


@pytest.fixture()
def hub() -> Iterator[AgentHub]:
    h = AgentHub(SECRET, SESSION, heartbeat_s=0.05)
    h.start()
    h.expect(0, ["n1", "n2"])
    yield h
    h.close()


def agent(node: str = "n1") -> Identity:
    return Identity("agent", node, SESSION, 0, SECRET.encode())


def send(conn: Connection, bodies: list[bytes]) -> None:
    if hasattr(conn, "send"):
        conn.send(bodies)
    else:  # the wire before sealed frames
        conn.writer.write(b"".join(bodies))


def feed(conn: Connection, data: bytes) -> list[dict[str, Any]]:
    return conn.feed(data) if hasattr(conn, "feed") else conn.frames.feed(data)


async def wait_acked(conn: Connection, want: int, timeout_s: float = 5.0) -> int:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    acked = conn.acked
    while acked < want and loop.time() < deadline:
        data = await asyncio.wait_for(conn.reader.read(1 << 20), timeout_s)
        if not data:
            raise ConnectionError("closed by the hub")
        for m in feed(conn, data):
            if m["t"] == "ack":
                acked = int(m["seq"])
    return acked


def taken(hub: AgentHub, timeout_s: float = 0.5) -> list[tuple[str, str]]:
    import time

    out: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out += [(m.node, str(m.msg["t"])) for m in hub.take()]
        time.sleep(0.02)
    return out


def test_a_second_agent_cannot_take_over_a_connected_hosts_session(hub: AgentHub) -> None:
    """The attack: an impostor that knows the secret dials as n1 while n1's agent is connected,
    and forges an XID 79. The first agent instance keeps the session; nothing forged arrives."""

    async def scenario() -> tuple[bool, int]:
        real_box = Outbox()
        real = await dial(*hub.address, agent("n1"))
        send(real, [real_box.add({"t": "note", "text": "real"})])
        await wait_acked(real, 1)
        hijacked = True
        try:
            fake = await dial(*hub.address, agent("n1"))  # another process: another instance
            send(fake, [pack({"t": "klog", "seq": 2, "event": {"xid": 79}})])
            await fake.writer.drain()
            await asyncio.sleep(0.2)
            fake.writer.close()
        except (WireError, ConnectionError):
            hijacked = False
        send(real, [real_box.add({"t": "note", "text": "still here"})])
        acked = await wait_acked(real, 2)
        real.writer.close()
        return hijacked, acked

    hijacked, acked = asyncio.run(scenario())
    got = taken(hub)
    assert ("n1", "klog") not in got
    assert not hijacked
    assert acked == 2  # the real agent's connection was never replaced
    assert [t for _, t in got] == ["note", "note"]


def test_the_same_agent_may_reconnect(hub: AgentHub) -> None:
    me = agent("n2")
    box = Outbox()

    async def once(text: str) -> int:
        conn = await dial(*hub.address, me)
        box.ack(conn.acked)
        send(conn, [*box.pending(), box.add({"t": "note", "text": text})])
        acked = await wait_acked(conn, box.last_seq)
        conn.writer.close()
        return acked

    assert asyncio.run(once("a")) == 1
    assert asyncio.run(once("b")) == 2
    assert [t for _, t in taken(hub)] == ["note", "note"]


def test_a_sequence_number_far_ahead_is_dropped_and_later_messages_still_arrive(
        hub: AgentHub, caplog: pytest.LogCaptureFixture) -> None:
    """The attack: ``seq = 2**62`` made the hub drop every real message after it."""

    async def scenario() -> int:
        conn = await dial(*hub.address, agent("n1"))
        send(conn, [pack({"t": "exit", "rank": 0, "code": 0, "seq": 2 ** 62})])
        box = Outbox()
        send(conn, [box.add({"t": "out", "rank": 0, "data": b"line %d\n" % i})
                    for i in range(5)])
        acked = await wait_acked(conn, 5)
        conn.writer.close()
        return acked

    with caplog.at_level(logging.WARNING, logger="trainguard.agent.hub"):
        acked = asyncio.run(scenario())
    got = taken(hub)
    assert acked == 5
    assert [t for _, t in got] == ["out"] * 5
    lines = [r for r in caplog.records if "sequence number" in r.getMessage()]
    assert len(lines) == 1


@pytest.mark.parametrize("seq", [0, -1, True, "7", 1.5])
def test_malformed_sequence_numbers_are_dropped(hub: AgentHub, seq: object) -> None:
    async def scenario() -> None:
        conn = await dial(*hub.address, agent("n1"))
        send(conn, [pack({"t": "note", "seq": seq})])
        send(conn, [Outbox().add({"t": "ok"})])
        await wait_acked(conn, 1)
        conn.writer.close()

    asyncio.run(scenario())
    assert [t for _, t in taken(hub)] == ["ok"]


def test_an_unsealed_message_after_the_handshake_is_refused(hub: AgentHub) -> None:
    """Whoever can inject bytes into an authenticated TCP stream (no secret) must not be able
    to add a message: after the handshake only sealed frames count."""

    async def scenario() -> None:
        conn = await dial(*hub.address, agent("n1"))
        conn.writer.write(pack({"t": "klog", "event": {"xid": 79}}))  # raw, unsealed
        await conn.writer.drain()
        await asyncio.sleep(0.3)
        conn.writer.close()

    asyncio.run(scenario())
    assert ("n1", "klog") not in taken(hub)


def test_an_altered_or_replayed_frame_is_refused(hub: AgentHub) -> None:
    me = agent("n1")

    async def scenario(mutate: str) -> None:
        conn = await dial(*hub.address, me)
        frame = conn.channel.seal([pack({"t": "note", "text": "benign"})])
        if mutate == "alter":
            conn.writer.write(frame.replace(b"benign", b"malign"))
        else:
            conn.writer.write(frame + frame)  # the same frame twice
        await conn.writer.drain()
        await asyncio.sleep(0.3)
        conn.writer.close()

    asyncio.run(scenario("alter"))
    assert taken(hub) == []
    rejected = hub.rejected
    asyncio.run(scenario("replay"))
    assert taken(hub) == [("n1", "note")]  # the first copy only
    assert hub.rejected == rejected + 1


def test_the_agent_refuses_forged_commands_too() -> None:
    """The controller's frames are sealed with its own direction's key: an agent never obeys
    a frame it did not get from the controller (here: one sealed with the agent's own key,
    as a reflection would be)."""
    from trainguard.agent.wire import Channel

    to_server, to_client = b"k" * 32, b"q" * 32
    agent_side = Channel(to_server, to_client)
    reflected = agent_side.seal([pack({"t": "stop"})])
    from trainguard.agent.wire import FrameReader

    frame = FrameReader().feed(reflected)[0]
    with pytest.raises(WireError, match="MAC"):
        Channel(to_server, to_client).open(frame)
    assert Channel(to_client, to_server).open(frame) == [{"t": "stop"}]
