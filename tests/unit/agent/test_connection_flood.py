"""A connection flood against the controller (issue 26): with 256 descriptors and 300 idle
connections, a connected agent's output still all arrives, the run's records are still written,
and the flood is a few log lines, not a traceback per accept.

The scenario runs in a subprocess whose ``RLIMIT_NOFILE`` is lowered (soft and hard) to 256."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from trainguard.agent.client import Connection, Identity, Outbox, dial

CONTROLLER = textwrap.dedent("""
    import json, logging, resource, sys, time
    from pathlib import Path

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    logging.getLogger().addHandler(Keep())
    logging.getLogger().setLevel(logging.INFO)

    from trainguard.agent.hub import AgentHub
    from trainguard.recover.records import Recorder

    out_dir = Path(sys.argv[1])
    hub = AgentHub("secret", "sess", heartbeat_s=0.2)
    hub.start()
    hub.expect(0, ["n1"])
    recorder = Recorder(out_dir, {"name": "flood"}, None)
    recorder.start("flood", "local", time.time(), {})
    print(json.dumps(list(hub.address)), flush=True)
    written = failed = 0
    while sys.stdin.readline().strip() != "done":  # the controller's poll loop
        for inbound in hub.take():  # each message to its rank file, as RemoteAttempt does
            try:
                with open(out_dir / "rank0.log", "ab") as f:
                    f.write(inbound.msg["data"] + b"\\n")
                written += 1
            except OSError:
                failed += 1
    try:
        recorder.write("succeeded", "", (), ())
        summary = json.loads((out_dir / "summary.json").read_text())["status"]
    except Exception as exc:
        summary = f"error: {exc}"
    hub_lines = [r for r in records if r.name.startswith("trainguard.agent")
                 or r.name == "asyncio"]
    print(json.dumps({"written": written, "failed": failed, "summary": summary,
                      "log_lines": len(hub_lines),
                      "tracebacks": sum(1 for r in hub_lines if r.exc_info),
                      "refused": getattr(hub, "refused", None)}), flush=True)
    hub.close()
""")


def send(conn: Connection, bodies: list[bytes]) -> None:
    if hasattr(conn, "send"):
        conn.send(bodies)
    else:  # the wire before sealed frames
        conn.writer.write(b"".join(bodies))


def feed(conn: Connection, data: bytes) -> list[dict[str, Any]]:
    return conn.feed(data) if hasattr(conn, "feed") else conn.frames.feed(data)


def test_a_flood_of_idle_connections_loses_nothing_of_the_run(tmp_path: Path) -> None:
    script = tmp_path / "controller.py"
    script.write_text(CONTROLLER)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    flood: list[socket.socket] = []
    try:
        host, port = json.loads(proc.stdout.readline())

        async def agent() -> int:
            conn = await dial(host, port, Identity("agent", "n1", "sess", 0, b"secret"))
            for _ in range(300):  # idle strangers, from another loopback address
                s = socket.socket()
                s.bind(("127.0.0.2", 0))
                s.setblocking(False)
                s.connect_ex((host, port))
                flood.append(s)
            await asyncio.sleep(1.0)
            box = Outbox()
            for i in range(200):
                send(conn, [box.add({"t": "out", "rank": 0, "data": b"line %d" % i})])
                proc.stdin.write("poll\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            acked, deadline = conn.acked, time.monotonic() + 15
            while acked < 200 and time.monotonic() < deadline:
                proc.stdin.write("poll\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
                try:
                    data = await asyncio.wait_for(conn.reader.read(1 << 20), 0.5)
                except TimeoutError:
                    continue
                if not data:
                    break
                for m in feed(conn, data):
                    if m["t"] == "ack":
                        acked = int(m["seq"])
            conn.writer.close()
            return acked

        acked = asyncio.run(agent())
        time.sleep(0.3)
        out, err = proc.communicate("poll\ndone\n", timeout=60)
    finally:
        for s in flood:
            s.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert acked == 200, result
    assert result["written"] == 200 and result["failed"] == 0, result
    assert result["summary"] == "succeeded", result
    assert result["tracebacks"] == 0, result
    assert result["log_lines"] <= 5, result
    assert result["refused"] > 0, result


def test_the_gate_caps_in_all_and_per_address() -> None:
    from trainguard.agent.admission import PreAuthGate

    gate = PreAuthGate(total=3, per_address=2)
    assert [gate.admit("a") for _ in range(3)] == [True, True, False]
    assert gate.admit("b") and not gate.admit("c")  # the total is reached
    gate.release("a")
    assert gate.admit("c") and gate.waiting == 3
    gate.release("zz")  # never admitted: nothing changes
    assert gate.waiting == 3


def test_a_flood_is_one_line_per_interval() -> None:
    import logging

    from trainguard.agent.admission import RateLog

    now = [0.0]
    logger = logging.getLogger("test.flood")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger.addHandler(Keep())
    rate = RateLog(logger, interval_s=10.0, clock=lambda: now[0])
    for i in range(1000):
        now[0] = i * 0.015  # 1000 events in 15 s
        rate.warning("flood", "refused %d", i)
    assert len(lines) == 2
    assert "more like it" in lines[1]


def test_the_hub_raises_the_soft_descriptor_limit_to_the_hard_one() -> None:
    code = ("import resource\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1024))\n"
            "from trainguard.agent.hub import AgentHub\n"
            "hub = AgentHub('s', 'sess')\n"
            "hub.start()\n"
            "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
            "hub.close()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.split() == ["1024"]
