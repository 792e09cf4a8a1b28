"""The controller's hub on a real loopback socket: authenticated agents get through, everything
else is dropped with the hub still serving; sequence numbers survive a reconnect."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from trainguard.agent.client import Identity, Outbox, dial
from trainguard.agent.hub import AgentHub
from trainguard.agent.wire import HANDSHAKE_FRAME, FrameReader, WireError, pack

SECRET = "s3cret"
SESSION = "sess1"


@pytest.fixture()
def hub() -> Iterator[AgentHub]:
    h = AgentHub(SECRET, SESSION, heartbeat_s=0.1)
    h.start()
    h.expect(0, ["n1", "n2"])
    yield h
    h.close()


def me(node: str = "n1", secret: str = SECRET, attempt: int = 0) -> Identity:
    return Identity("agent", node, SESSION, attempt, secret.encode())


def wait_for(cond: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


async def send_and_ack(hub: AgentHub, ident: Identity, msgs: list[dict[str, object]],
                       outbox: Outbox) -> int:
    conn = await dial(*hub.address, ident)
    outbox.ack(conn.acked)
    conn.send(outbox.pending())
    conn.send([outbox.add(msg) for msg in msgs])
    await conn.writer.drain()
    acked = conn.acked
    want = outbox.last_seq
    deadline = asyncio.get_running_loop().time() + 5
    while acked < want and asyncio.get_running_loop().time() < deadline:
        data = await asyncio.wait_for(conn.reader.read(65536), 5)
        if not data:
            raise ConnectionError("closed by the hub")
        for m in conn.feed(data):
            if m["t"] == "ack":
                acked = int(m["seq"])
    conn.writer.close()
    return acked


def test_an_authenticated_agent_is_heard_and_acknowledged(hub: AgentHub) -> None:
    acked = asyncio.run(send_and_ack(hub, me(), [{"t": "exit", "rank": 0, "code": 0}],
                                     Outbox()))
    assert acked == 1
    got = hub.take()
    assert [(m.node, m.msg["t"], m.msg["code"]) for m in got] == [("n1", "exit", 0)]


def test_wrong_secret_garbage_and_oversized_frames_are_dropped(hub: AgentHub) -> None:
    with pytest.raises((WireError, ConnectionError)):
        asyncio.run(dial(*hub.address, me(secret="wrong")))
    host, port = hub.address
    for payload in (b"GET / HTTP/1.0\r\n\r\n", b"\x00" * 100_000,
                    pack({"t": "hello", "pad": b"x" * 10_000}, limit=1 << 20)):
        with socket.create_connection((host, port), timeout=5) as s:
            s.recv(HANDSHAKE_FRAME)  # the challenge
            try:
                s.sendall(payload)
                s.settimeout(5)
                assert s.recv(4096) == b""  # closed by the hub, nothing answered
            except ConnectionResetError:
                pass
    wait_for(lambda: hub.rejected >= 4)
    # ... and the hub still serves a real agent.
    assert asyncio.run(send_and_ack(hub, me("n2"), [{"t": "hb2"}], Outbox())) == 1


def test_an_oversized_frame_after_the_handshake_drops_only_that_agent(hub: AgentHub) -> None:
    async def flood() -> None:
        conn = await dial(*hub.address, me())
        conn.writer.write(pack({"t": "out", "data": b"x" * (3 << 20)}, limit=8 << 20))  # raw
        try:
            await conn.writer.drain()
            while await asyncio.wait_for(conn.reader.read(65536), 5):
                pass  # heartbeats until the hub closes the connection
        except ConnectionError:
            pass
        conn.writer.close()

    asyncio.run(flood())
    wait_for(lambda: hub.rejected >= 1)
    assert hub.take() == []
    assert asyncio.run(send_and_ack(hub, me("n2"), [{"t": "x"}], Outbox())) == 1


def test_unexpected_nodes_and_old_attempts_are_refused(hub: AgentHub) -> None:
    with pytest.raises((WireError, ConnectionError, asyncio.IncompleteReadError)):
        asyncio.run(send_and_ack(hub, me("n9"), [{"t": "x"}], Outbox()))
    hub.expect(1, ["n1"])
    with pytest.raises((WireError, ConnectionError, asyncio.IncompleteReadError)):
        asyncio.run(send_and_ack(hub, me("n1", attempt=0), [{"t": "x"}], Outbox()))
    wait_for(lambda: hub.rejected >= 2)


def test_a_reconnect_resends_only_what_was_not_acknowledged(hub: AgentHub) -> None:
    outbox = Outbox()
    agent = me()  # one agent process: its reconnect presents the same instance
    asyncio.run(send_and_ack(hub, agent, [{"t": "a"}, {"t": "b"}], outbox))
    # Two more were queued while "disconnected"; one old one is still unacknowledged locally.
    outbox.add({"t": "c"})
    outbox.add({"t": "d"})
    acked = asyncio.run(send_and_ack(hub, agent, [], outbox))
    assert acked == 4
    wait_for(lambda: len(hub.peers()) == 2)
    assert [m.msg["t"] for m in hub.take()] == ["a", "b", "c", "d"]  # no duplicates


def test_outbox_is_bounded_and_counts_what_it_dropped() -> None:
    box = Outbox(limit_bytes=2000)
    for i in range(100):
        box.add({"t": "out", "data": b"x" * 100, "i": i})
    assert len(box) < 20 and box.dropped > 80
    box.ack(99)
    assert len(box) == 1


def test_a_silent_agent_shows_in_last_seen(hub: AgentHub) -> None:
    asyncio.run(send_and_ack(hub, me(), [{"t": "a"}], Outbox()))
    view = hub.peers()["n1"]
    assert view.ever_connected
    wait_for(lambda: not hub.peers()["n1"].connected)
    assert hub.peers()["n1"].closed_reason == "connection closed"
    assert not hub.peers()["n2"].ever_connected


def test_frames_from_the_agent_side_are_bounded_too() -> None:
    with pytest.raises(WireError):
        FrameReader(100).feed(pack({"t": "x", "d": b"y" * 200}, limit=1000))


def test_a_command_sent_right_after_the_welcome_is_not_lost() -> None:
    """The controller may send its first command in the same TCP segment as the welcome (it
    does under load): the agent's dial keeps it instead of failing the handshake."""
    from trainguard.agent.wire import PROTOCOL, Channel, mac, nonce, read_one, session_keys

    async def scenario() -> list[dict[str, object]]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            ours = nonce()
            writer.write(pack({"t": "challenge", "proto": PROTOCOL, "nonce": ours}))
            hello = await read_one(reader, FrameReader(HANDSHAKE_FRAME), 5)
            theirs, instance = hello["nonce"], hello["instance"]
            assert isinstance(theirs, bytes) and isinstance(instance, bytes)
            c2s, s2c = session_keys(SECRET.encode(), ours, theirs, "agent", "n1", SESSION, "0",
                                    instance)
            writer.write(pack({"t": "welcome", "acked": 0,
                               "mac": mac(SECRET.encode(), b"welcome", theirs, ours, "0")})
                         + Channel(s2c, c2s).seal([pack({"t": "launch", "attempt": 0})]))
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = await dial("127.0.0.1", port, me())
        conn.writer.close()
        server.close()
        return conn.early

    early = asyncio.run(scenario())
    assert [m["t"] for m in early] == ["launch"]
