"""Kernel-log ages are judged on the host's own clock, and each host's clock offset from the
controller's is measured (smallest round trip) and recorded with the attempt."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent.client import Identity
from trainguard.agent.clock import ClockOffsets, run_start_on_host
from trainguard.agent.host import HostWork
from trainguard.agent.hub import Inbound
from trainguard.agent.remote import RemoteAttempt
from trainguard.agent.runner import Agent, AgentConfig
from trainguard.evidence.rules import load_rules
from trainguard.recover.backend import LaunchPlan
from trainguard.recover.records import AttemptResult, host_clocks

HOST_AHEAD_S = 3600.0  # the controller is an hour behind this host
# The host's clock reads about the real time: the log scanner places year-less and future
# timestamps relative to it.
CONTROLLER_NOW = float(int(time.time())) - HOST_AHEAD_S


@dataclass
class View:
    connected: bool = True
    ever_connected: bool = True
    connection: int = 1
    last_seen: float = CONTROLLER_NOW
    closed_reason: str | None = None


class FakeHub:
    """What a RemoteAttempt needs of the hub: one connected node; sends are recorded."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.inbox: list[Inbound] = []

    def peers(self) -> dict[str, View]:
        return {"n1": View()}

    def send(self, node: str, msg: Mapping[str, Any]) -> bool:
        self.sent.append((node, dict(msg)))
        return True

    def take(self) -> list[Inbound]:
        got, self.inbox = self.inbox, []
        return got


class NoProcs:
    def exited(self) -> Mapping[str, int]:
        return {}

    def close(self, wait_s: float) -> None:
        pass


def _xid_line(at: float) -> str:
    stamp = datetime.fromtimestamp(at, UTC).isoformat()
    return (f"{stamp} n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
            "GPU has fallen off the bus.\n")


def _attempt(tmp_path: Path, hub: FakeHub, klog: Path, now: list[float]) -> RemoteAttempt:
    plan = LaunchPlan(0, ("true",), ("n1",), (), tmp_path)
    return RemoteAttempt(plan, hub, NoProcs(),  # type: ignore[arg-type]
                         kernel_logs={"n1": str(klog)}, since=CONTROLLER_NOW - 10.0,
                         clock=lambda: now[0], sleep=lambda s: None)


def test_kernel_log_history_is_judged_on_the_hosts_own_clock(tmp_path: Path) -> None:
    host_now = CONTROLLER_NOW + HOST_AHEAD_S
    klog = tmp_path / "kern.log"
    klog.write_text(_xid_line(host_now - 40 * 60) + _xid_line(host_now - 5 * 60))
    hub = FakeHub()
    attempt = _attempt(tmp_path, hub, klog, [CONTROLLER_NOW])
    attempt.poll()  # the launch goes out to n1
    (launch,) = [m for _, m in hub.sent if m["t"] == "launch"]

    host = HostWork("n1", tmp_path / "work", load_rules, clock=lambda: host_now)
    agent = Agent(AgentConfig("127.0.0.1", 9, Identity("agent", "n1", "s", 0, b"k"),
                              tmp_path / "work"), host)
    try:
        asyncio.run(agent._command(launch))
        events = [m["event"] for m in host.poll(host_now) if m["t"] == "klog"]
    finally:
        host.close()
    ages = sorted(round((host_now - datetime.fromisoformat(e["evidence"][0]["text"][:25])
                         .timestamp()) / 60) for e in events)
    assert ages == [5]  # the 40-minute-old XID is older than the history window


def test_the_run_start_is_placed_on_the_host_clock() -> None:
    assert run_start_on_host({"since": CONTROLLER_NOW, "elapsed_s": 12.5},
                             CONTROLLER_NOW + HOST_AHEAD_S) == CONTROLLER_NOW + HOST_AHEAD_S - 12.5
    assert run_start_on_host({"since": 5.0, "elapsed_s": math.nan}, 100.0) == 5.0
    assert run_start_on_host({"elapsed_s": -1}, 100.0) == 100.0


def test_the_offset_is_taken_from_the_smallest_round_trip() -> None:
    clocks = ClockOffsets()
    assert clocks.due("n1", 0.0)
    for t0, rtt, skew in ((0.0, 0.8, 0.35), (1.0, 0.002, 0.0), (2.0, 0.5, -0.2)):
        clocks.sent("n1", t0)
        # the answer left the host after `skew` of the trip (an asymmetric path)
        clocks.reply("n1", t0, t0 + rtt / 2 + skew + HOST_AHEAD_S, t0 + rtt)
    best = clocks.offsets()["n1"]
    assert abs(best.offset_s - HOST_AHEAD_S) < 0.001 and abs(best.rtt_s - 0.002) < 1e-9
    assert best.samples == 3
    assert clocks.reply("n1", 99.0, 1e9, 99.1) is None  # not a time we asked
    clocks.sent("n1", 3.0)
    assert clocks.reply("n1", 3.0, math.inf, 3.1) is None
    assert clocks.reply("n1", "3.0", 1.0, 3.1) is None


def test_an_offset_is_warned_of_only_once_it_is_clear_of_its_uncertainty(
        caplog: pytest.LogCaptureFixture) -> None:
    clocks = ClockOffsets()
    caplog.set_level(logging.WARNING, logger="trainguard.agent.clock")
    # A controller stalled 8 s while the answer waited: -3.9 s, but within +- 4 s.
    clocks.sent("n1", 10.0)
    clocks.reply("n1", 10.0, 10.1, 18.0)
    assert clocks.offsets()["n1"].offset_s < -3.8 and caplog.records == []
    clocks.sent("n1", 20.0)
    clocks.reply("n1", 20.0, 20.001, 20.002)  # a quick trip: the clocks agree
    assert caplog.records == []
    # a host 5 s ahead, first measured on a slow trip (+- 2 s), then a quick one: said once
    for t0, rtt in ((0.0, 4.0), (1.0, 0.002), (2.0, 0.001)):
        clocks.sent("n2", t0)
        clocks.reply("n2", t0, t0 + rtt / 2 + 5.0, t0 + rtt)
    (said,) = caplog.records
    assert "n2's clock is +5.000 s off" in said.getMessage()


def test_each_hosts_offset_is_measured_and_recorded_with_the_attempt(tmp_path: Path) -> None:
    hub = FakeHub()
    now = [CONTROLLER_NOW]
    attempt = _attempt(tmp_path, hub, tmp_path / "kern.log", now)
    attempt.poll()
    (probe,) = [m for _, m in hub.sent if m["t"] == "clock"]
    t0 = probe["t0"]
    # the agent answers with its own time, 20 ms after it was asked; it arrives 40 ms after t0
    hub.inbox.append(Inbound("n1", 0, {"t": "clock", "t0": t0, "host": t0 + HOST_AHEAD_S
                                       + 0.020, "seq": 1}, t0 + 0.040))
    attempt.poll()
    recorded = host_clocks(attempt)
    assert recorded == {"n1": {"offset_s": HOST_AHEAD_S, "uncertainty_s": 0.02, "samples": 1}}
    result = AttemptResult(0, ("n1",), 0.0, 1.0, "succeeded", {}, host_clocks=recorded)
    assert result.to_dict()["host_clocks"]["n1"]["offset_s"] == HOST_AHEAD_S
    now[0] += 0.5
    attempt.poll()
    assert len([m for _, m in hub.sent if m["t"] == "clock"]) == 1  # not before a second
    now[0] += 1.0
    attempt.poll()
    assert len([m for _, m in hub.sent if m["t"] == "clock"]) == 2
