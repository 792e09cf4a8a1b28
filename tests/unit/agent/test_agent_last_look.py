"""The agent's side of an attempt's end: told ``bye``, an agent takes a last look at its host
(the ranks' files and the kernel log, however recently it read them) and sends it on the
connection before hanging up."""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from trainguard.agent.client import Identity
from trainguard.agent.host import HostWork
from trainguard.agent.hub import AgentHub
from trainguard.agent.runner import Agent, AgentConfig
from trainguard.evidence.rules import load_rules

SECRET = "s" * 64


class LastLookHost:
    """A host with something new only at the last look (``hold_exits=False``)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def poll(self, now: float, budget: int | None = None, *,
             hold_exits: bool = True) -> list[dict[str, Any]]:
        self.calls.append("poll" if hold_exits else "last look")
        return [] if hold_exits else [{"t": "note", "text": "read at the last look"}]

    def stop(self, grace_s: float) -> None:
        self.calls.append("stop")

    def close(self) -> None:
        self.calls.append("close")


def test_the_last_look_goes_out_on_the_connection_before_the_agent_hangs_up(
        tmp_path: Path) -> None:
    hub = AgentHub(SECRET, "sess", host="127.0.0.1", port=0, heartbeat_s=0.2)
    hub.start()
    try:
        hub.expect(0, ["n1"])
        host = LastLookHost()
        cfg = AgentConfig(hub.address[0], hub.address[1],
                          Identity("agent", "n1", "sess", 0, SECRET.encode()), tmp_path,
                          poll_s=0.02)
        status: list[int] = []
        thread = threading.Thread(target=lambda: status.append(Agent(cfg, host).run()),
                                  daemon=True)  # type: ignore[arg-type]
        thread.start()
        deadline = time.monotonic() + 10
        while not hub.peers()["n1"].connected:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        hub.take()
        assert hub.send("n1", {"t": "bye"})
        thread.join(10)
        assert status == [0] and "last look" in host.calls
        deadline = time.monotonic() + 5
        got: list[Any] = []
        while not any(m.msg.get("t") == "note" for m in got):
            assert time.monotonic() < deadline, [m.msg for m in got]
            got += hub.take()
            time.sleep(0.02)
        (note,) = [m.msg for m in got if m.msg.get("t") == "note"]
        assert note["text"] == "read at the last look"
    finally:
        hub.close()


def test_the_last_look_reads_the_kernel_log_read_a_moment_ago(tmp_path: Path) -> None:
    klog = tmp_path / "kern.log"
    host = HostWork("n2", tmp_path / "work", load_rules, base_env=dict(os.environ))
    try:
        host.watch_kernel_log(str(klog), time.time() - 60)
        now = time.time()
        assert not [m for m in host.poll(now) if m["t"] == "klog"]
        klog.write_text(f"{datetime.now(UTC).isoformat()} n2 kernel: NVRM: Xid "
                        "(PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.\n")
        # An ordinary look this soon leaves the kernel log for later; the last look does not.
        assert not [m for m in host.poll(now + 0.01) if m["t"] == "klog"]
        (msg,) = [m for m in host.poll(now + 0.02, hold_exits=False) if m["t"] == "klog"]
        assert msg["event"]["xid"] == 79
    finally:
        host.close()
