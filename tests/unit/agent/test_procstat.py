"""Each agent reads its own ranks' state and CPU time in ``/proc`` and sends them (``procstat``);
the controller keeps the newest per rank, checked, for the hang rule."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from test_lying_agent import NoProcs, two_rank_plan

from trainguard.agent.host import HostWork
from trainguard.agent.hub import Inbound, PeerView
from trainguard.agent.remote import RemoteAttempt
from trainguard.evidence.rules import load_rules
from trainguard.recover.backend import ReportsRankProcs
from trainguard.trace.collect import group_usage


class FakeHub:
    def __init__(self, nodes: Iterable[str]) -> None:
        self.nodes = tuple(nodes)
        self.queue: list[Inbound] = []

    def peers(self) -> dict[str, PeerView]:
        return {n: PeerView(True, 0.0, True, None, 1) for n in self.nodes}

    def take(self) -> list[Inbound]:
        out, self.queue = self.queue, []
        return out

    def send(self, node: str, msg: Mapping[str, Any]) -> bool:
        return True


def remote(tmp_path: Path) -> tuple[RemoteAttempt, FakeHub]:
    plan = two_rank_plan(tmp_path)
    hub = FakeHub(("a", "b"))
    return RemoteAttempt(plan, hub, NoProcs(), clock=lambda: 0.0,  # type: ignore[arg-type]
                         sleep=lambda s: None), hub


def test_the_controller_keeps_the_newest_sample_per_rank(tmp_path: Path) -> None:
    att, hub = remote(tmp_path)
    assert isinstance(att, ReportsRankProcs)
    hub.queue += [Inbound("a", 0, {"t": "procstat", "ranks": [[0, "running", 1.5]]}, 0.0),
                  Inbound("a", 0, {"t": "procstat", "ranks": [[0, "stopped", 2.0]]}, 0.0),
                  Inbound("b", 0, {"t": "procstat", "ranks": [[1, "running", 3]]}, 0.0)]
    att.poll()
    got = {s.rank: (s.state, s.cpu_s) for s in att.proc_samples()}
    assert got == {0: ("stopped", 2.0), 1: ("running", 3.0)}
    assert att.proc_samples() == []  # taken once


@pytest.mark.parametrize("ranks", [
    "0", [[0, "running"]], [[1, "running", 1.0]],  # rank 1 runs on b, not a
    [["0", "running", 1.0]], [[True, "running", 1.0]], [[0, "dancing", 1.0]],
    [[0, "running", float("nan")]], [[0, "running", -1.0]], [[0, "running", "1"]],
    [[0, "running", 1.0]] * 3,
])
def test_a_bad_procstat_is_dropped_with_one_line(tmp_path: Path, ranks: object,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    att, hub = remote(tmp_path)
    hub.queue.append(Inbound("a", 0, {"t": "procstat", "ranks": ranks}, 0.0))
    with caplog.at_level(logging.WARNING):
        att.poll()
    assert att.proc_samples() == []
    assert len([r for r in caplog.records if "procstat" in r.getMessage()]) == 1


def test_group_usage_sums_the_group_and_sees_a_stop() -> None:
    code = "import subprocess, sys\n" \
           "child = subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n" \
           "child.wait()\n"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        usage = group_usage({0: proc.pid})
        while usage.get(0, ("", 0.0))[1] < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)  # the busy child's CPU counts for the rank
            usage = group_usage({0: proc.pid})
        assert usage[0][0] == "running" and usage[0][1] >= 0.3
        os.killpg(proc.pid, signal.SIGSTOP)
        while group_usage({0: proc.pid})[0][0] != "stopped" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert group_usage({0: proc.pid})[0][0] == "stopped"
        assert group_usage({5: 2 ** 22 + 17}) == {}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_an_agent_sends_its_ranks_procstat(tmp_path: Path) -> None:
    host = HostWork("a", tmp_path / "work", load_rules, base_env=dict(os.environ))
    try:
        host.launch({"t": "launch", "attempt": 0, "command": [sys.executable, "-c",
                                                               "import time; time.sleep(30)"],
                     "workdir": str(tmp_path),
                     "ranks": [{"rank": 3, "local_rank": 0, "node_rank": 0, "env": {}}]})
        stats = [m for m in host.poll(time.time()) if m["t"] == "procstat"]
        assert len(stats) == 1
        ((rank, state, cpu),) = stats[0]["ranks"]
        assert rank == 3 and state == "running" and 0 <= cpu < 30
        # not again before PROCSTAT_EVERY_S
        assert not [m for m in host.poll(time.time()) if m["t"] == "procstat"]
    finally:
        host.stop(0.5)
        host.close()
