"""A real agent whose controller stops reading (SIGSTOPped): the agent's memory stays bounded
(rank output waits in the ranks' files, not in the agent), and once the controller continues
every byte and both exits arrive. Before the backpressure, 2 ranks writing 4 MB/s grew an agent
by ~8 MB per second of stall (its socket's write buffer)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SECRET = "stall-secret"
STALL_S = 10.0
RANK_S = 16.0

RANK = f"""
import sys, time
line = b"x" * 1023 + b"\\n"
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < {RANK_S}:
    sys.stdout.buffer.write(line * 400)  # 400 KiB every 0.1 s: about 4 MB/s
    sys.stdout.buffer.flush()
    n += 400
    time.sleep(0.1)
sys.stdout.buffer.write(b"done %d\\n" % n)
"""

CONTROLLER = """
import json, sys, time
from trainguard.agent.hub import AgentHub
secret, rank_code, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
hub = AgentHub(secret, "stall", heartbeat_s=0.5)
hub.start()
hub.expect(0, ["n1"])
print(hub.address[1], flush=True)
launched = False
got = {0: bytearray(), 1: bytearray()}
sizes = {0: 0, 1: 0}
exits = {}
markers = 0
deadline = time.monotonic() + 180
while len(exits) < 2 and time.monotonic() < deadline:
    view = hub.peers().get("n1")
    if view is not None and view.connected and not launched:
        launched = hub.send("n1", {
            "t": "launch", "attempt": 0, "command": [sys.executable, "-c", rank_code],
            "workdir": workdir, "orphan_timeout_s": 120,
            "ranks": [{"rank": r, "local_rank": r, "node_rank": 0, "env": {}}
                      for r in (0, 1)]})
    for inbound in hub.take():
        msg = inbound.msg
        if msg.get("t") == "out":
            data = msg["data"]
            sizes[msg["rank"]] += len(data)
            markers += data.count(b"[trainguard:")
            got[msg["rank"]] = (got[msg["rank"]] + data)[-200:]
        elif msg.get("t") == "exit":
            exits[msg["rank"]] = msg["code"]
        elif msg.get("t") == "started":
            print("started", flush=True)
    time.sleep(0.05)
hub.send("n1", {"t": "bye"})
time.sleep(0.5)
print(json.dumps({"sizes": sizes, "exits": exits, "markers": markers,
                  "tails": {r: bytes(v).decode()[-40:] for r, v in got.items()}}), flush=True)
hub.close()
"""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_stalled_controller_costs_the_agent_no_memory_and_loses_nothing(
        tmp_path: Path) -> None:
    env = {**os.environ, "TRAINGUARD_AGENT_SECRET": SECRET, "TMPDIR": str(tmp_path)}
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, SECRET, RANK, str(tmp_path)],
                           stdout=subprocess.PIPE, text=True, env=env)
    agent = None
    try:
        assert ctl.stdout is not None
        port = int(ctl.stdout.readline())
        agent = subprocess.Popen(
            [sys.executable, "-m", "trainguard.agent", "--controller-addr", f"127.0.0.1:{port}",
             "--session", "stall", "--attempt", "0", "--node", "n1"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert ctl.stdout.readline().strip() == "started"
        time.sleep(2.0)  # the ranks write, the controller keeps up
        before = _rss_mb(agent.pid)
        ctl.send_signal(signal.SIGSTOP)
        peak = before
        try:
            end = time.monotonic() + STALL_S
            while time.monotonic() < end:
                peak = max(peak, _rss_mb(agent.pid))
                time.sleep(0.2)
        finally:
            ctl.send_signal(signal.SIGCONT)
        result = json.loads(ctl.stdout.readline())
        assert ctl.wait(timeout=30) == 0
    finally:
        for proc in (ctl, agent):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    growth = peak - before
    assert growth < 40, f"agent grew from {before:.0f} to {peak:.0f} MB during the stall"
    assert result["exits"] == {"0": 0, "1": 0}
    assert result["markers"] == 0  # nothing shed: the output waited in the files
    for rank in ("0", "1"):
        tail = result["tails"][rank]
        lines = int(tail.rsplit("done ", 1)[1])
        assert result["sizes"][rank] == lines * 1024 + len(f"done {lines}\n")
