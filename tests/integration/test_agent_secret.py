"""The run's secret is not readable by the ranks (issue 26): an agent started as the backends
start it holds the secret, but neither its ``/proc/<pid>/environ`` nor its ranks' environment
shows it, and no descriptor of it reaches the ranks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from trainguard.agent.backend import AgentBackend
from trainguard.agent.launch_local import LocalLauncher
from trainguard.recover.launchplan import LaunchPlan, RankLaunch
from trainguard.recover.local import LocalBackend

pytestmark = pytest.mark.integration

RANK = r"""
import os, sys, time
found = []
pid = os.getppid()
for _ in range(4):  # the agent and whatever started it
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if b"TRAINGUARD_AGENT_SECRET=" in f.read():
                found.append(f"environ of {pid}")
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        break
if any("TRAINGUARD_AGENT_SECRET" in k for k in os.environ):
    found.append("own environment")
for fd in os.listdir("/proc/self/fd"):
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        continue
    if target.startswith("pipe:") and int(fd) > 2:
        found.append(f"inherited pipe fd {fd}")
print("FOUND:" + ";".join(found), flush=True)
time.sleep(float(sys.argv[1]))
"""


def _agent_pids(session: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"trainguard.agent" in cmd and session.encode() in cmd:
            pids.append(int(entry.name))
    return pids


def test_neither_the_agents_environ_nor_its_ranks_show_the_secret(tmp_path: Path) -> None:
    backend = AgentBackend(LocalBackend(), LocalLauncher())
    out = tmp_path / "n1" / "rank0.log"
    env = {"TRAINGUARD_EVENTS": str(tmp_path / "n1" / "rank0.events.jsonl"),
           "PYTHONUNBUFFERED": "1"}
    plan = LaunchPlan(0, (sys.executable, "-c", RANK, "3"), ("n1",),
                      (RankLaunch(0, 0, "n1", 0, env, out),), tmp_path)
    try:
        handle = backend.launch(plan)
        deadline = time.monotonic() + 60
        while b"FOUND:" not in (out.read_bytes() if out.exists() else b""):
            assert time.monotonic() < deadline, "the rank did not report"
            handle.poll()
            time.sleep(0.05)
        agents = _agent_pids(backend.session)
        assert agents, "no agent process found"
        for pid in agents:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert backend.secret.encode() not in environ
            assert b"TRAINGUARD_AGENT_SECRET=" not in environ
        report = out.read_text().split("FOUND:", 1)[1].splitlines()[0]
        assert report == "", report
        while handle.running() and time.monotonic() < deadline:
            handle.poll()
            time.sleep(0.05)
        handle.close()
    finally:
        backend.close()
