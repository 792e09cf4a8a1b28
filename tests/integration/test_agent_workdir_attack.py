"""A real agent (as root) on a host where another user planted the agent's old, predictable work
tree (``$TMPDIR/trainguard-agent/SESSION/ATTEMPT/NODE``) with a symlink where rank 0's log
goes, pointing at a root-only file: the file is not written, the controller gets the rank's
output, and the agent's own (private) work directory is gone once it exits."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="the attack needs a root agent")]

SECRET = "attack-secret"

CONTROLLER = """
import json, sys, time
from trainguard.agent.hub import AgentHub
secret, workdir = sys.argv[1], sys.argv[2]
hub = AgentHub(secret, "sess", heartbeat_s=0.5)
hub.start()
hub.expect(0, ["n1"])
print(hub.address[1], flush=True)
launched = False
out, exits, errors = b"", {}, []
deadline = time.monotonic() + 60
while not exits and time.monotonic() < deadline:
    view = hub.peers().get("n1")
    if view is not None and view.connected and not launched:
        launched = hub.send("n1", {
            "t": "launch", "attempt": 0,
            "command": [sys.executable, "-c", "print('rank output', flush=True)"],
            "workdir": workdir, "orphan_timeout_s": 60,
            "ranks": [{"rank": 0, "local_rank": 0, "node_rank": 0, "env": {}}]})
    for inbound in hub.take():
        msg = inbound.msg
        if msg.get("t") == "out":
            out += msg["data"]
        elif msg.get("t") == "exit":
            exits[msg["rank"]] = msg["code"]
        elif msg.get("t") == "error":
            errors.append(msg.get("text"))
    time.sleep(0.05)
hub.send("n1", {"t": "bye"})
print(json.dumps({"out": out.decode(), "exits": exits, "errors": errors}), flush=True)
time.sleep(1.0)
hub.close()
"""


def test_a_planted_work_tree_is_not_written_and_the_work_dir_is_removed(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    base = tmp_path / "tmp"
    base.mkdir(mode=0o1777)
    os.chmod(base, 0o1777)  # a shared /tmp
    victim = tmp_path / "shadow"
    victim.write_bytes(b"root only\n")
    os.chmod(victim, 0o600)
    planted = base / "trainguard-agent" / "sess" / "0" / "n1"
    planted.mkdir(parents=True)
    os.symlink(victim, planted / "rank0.log")
    for path in (planted / "rank0.log", planted, *list(planted.parents)[:3]):
        os.lchown(path, nobody, nobody)
    env = {**os.environ, "TRAINGUARD_AGENT_SECRET": SECRET, "TMPDIR": str(base)}
    ctl = subprocess.Popen([sys.executable, "-c", CONTROLLER, SECRET, str(tmp_path)],
                           stdout=subprocess.PIPE, text=True, env=env)
    agent = None
    try:
        assert ctl.stdout is not None
        port = int(ctl.stdout.readline())
        agent = subprocess.Popen(
            [sys.executable, "-m", "trainguard.agent", "--controller-addr", f"127.0.0.1:{port}",
             "--session", "sess", "--attempt", "0", "--node", "n1"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        result = json.loads(ctl.stdout.readline())
        assert agent.wait(timeout=30) == 0
        ctl.wait(timeout=10)
    finally:
        for proc in (ctl, agent):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert victim.read_bytes() == b"root only\n"
    assert result["exits"] == {"0": 0} and result["out"] == "rank output\n", result
    assert sorted(p.name for p in base.iterdir()) == ["trainguard-agent"]  # nothing left
