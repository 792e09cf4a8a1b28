"""A lying (or broken) agent never crashes the controller (issue 26): every field that comes
from an agent is checked, and a bad message is dropped with one log line."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent.hub import Inbound, PeerView
from trainguard.agent.remote import RemoteAttempt
from trainguard.recover.launchplan import LaunchPlan, RankLaunch


class FakeHub:
    """What :class:`RemoteAttempt` needs of the hub; replies to ``collect`` come from
    ``replies``."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.nodes = tuple(nodes)
        self.queue: list[Inbound] = []
        self.replies: dict[str, dict[str, Any]] = {}

    def peers(self) -> dict[str, PeerView]:
        return {n: PeerView(True, 0.0, True, None, 1) for n in self.nodes}

    def take(self) -> list[Inbound]:
        out, self.queue = self.queue, []
        return out

    def send(self, node: str, msg: Mapping[str, Any]) -> bool:
        if msg.get("t") == "collect" and node in self.replies:
            self.queue.append(Inbound(node, 0, {"t": "reply", "req": msg["req"],
                                                **self.replies[node]}, 0.0))
        return True


class NoProcs:
    def exited(self) -> Mapping[str, int]:
        return {}

    def close(self, wait_s: float) -> None:
        pass


def two_rank_plan(tmp_path: Path) -> LaunchPlan:
    """Attempt 0: rank 0 on host a, rank 1 on host b, their files in `tmp_path`."""
    ranks = tuple(
        RankLaunch(r, 0, node, i, {"TRAINGUARD_EVENTS": str(tmp_path / f"r{r}.events")},
                   tmp_path / f"r{r}.log")
        for i, (r, node) in enumerate([(0, "a"), (1, "b")]))
    return LaunchPlan(attempt=0, command=("true",), nodes=("a", "b"), ranks=ranks,
                      workdir=tmp_path)


def attempt(tmp_path: Path) -> tuple[RemoteAttempt, FakeHub]:
    plan = two_rank_plan(tmp_path)
    hub = FakeHub(("a", "b"))
    now = [0.0]

    def sleep(s: float) -> None:  # time passes only when the attempt waits
        now[0] += s

    return RemoteAttempt(plan, hub, NoProcs(), clock=lambda: now[0],  # type: ignore[arg-type]
                         sleep=sleep, node_timeout_s=1e9, connect_timeout_s=1e9), hub


BAD: list[dict[str, Any]] = [
    {"t": "out", "rank": "0", "data": b"x"},
    {"t": "out", "rank": 0, "data": "not bytes"},
    {"t": "out", "rank": 2 ** 70, "data": b"x"},
    {"t": "sdk", "rank": None, "data": b"x"},
    {"t": "exit", "rank": 0, "code": "0"},
    {"t": "exit", "rank": 0, "code": 2 ** 64},
    {"t": "exit", "rank": True, "code": 0},
    {"t": "exit", "rank": 1, "code": 0},  # rank 1 runs on b, not a
    {"t": "procs", "stopped": "0"},
    {"t": "procs", "stopped": [0, "x"]},
    {"t": "klog", "event": "xid 79"},
    {"t": "klog", "event": {"category": 5, "evidence": "nope"}},
    {"t": "klog", "event": {"severity": [], "summary": {}}},
    {"t": "started", "pids": {"zero": 1}},
    {"t": "started", "pids": {"0": "1"}},
    {"t": "started", "pids": [1, 2]},
    {"t": "reply", "req": "1"},
    {"t": "reply", "req": 1, "ranks": {"x": {}}},
    {"t": "reply", "req": 1, "ranks": {"0": "state"}},
    {"t": "error", "what": ["launch"], "text": {"x": 1}},
    {"t": "procstat", "ranks": {"0": "R"}},
    {"t": "procstat", "ranks": [[0, "R", "fast"]]},
]


@pytest.mark.parametrize("msg", BAD, ids=lambda m: f"{m['t']}")
def test_a_malformed_message_is_dropped_with_one_line(
        tmp_path: Path, msg: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    handle, hub = attempt(tmp_path)
    hub.queue.append(Inbound("a", 0, msg, 0.0))
    hub.queue.append(Inbound("a", 0, {"t": "exit", "rank": 0, "code": 3}, 0.0))
    with caplog.at_level(logging.WARNING):
        exits = handle.poll()
    assert [(e.rank, e.returncode) for e in exits] == [(0, 3)]  # the run goes on
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 1
    assert all(r.exc_info is None for r in caplog.records)
    assert handle.pids() == {}


def test_a_hang_reply_with_a_non_numeric_rank_key_does_not_crash_the_controller(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The attack: ``{"ranks": {"zero": ...}}`` raised ValueError out of ``collect`` (via the
    hang diagnosis) and the run's records were lost."""
    handle, hub = attempt(tmp_path)
    hub.replies = {"a": {"ranks": {"zero": {"proc": "running"}}},
                   "b": {"ranks": {"1": {"proc": "stopped", "pid": 42}}}}
    with caplog.at_level(logging.WARNING):
        got = handle.collect(0.0)
    assert got == {1: {"proc": "stopped", "pid": 42}}  # the honest host still counts
    assert len([r for r in caplog.records if "ignored" in r.getMessage()]) == 1


@pytest.mark.parametrize("ranks", [
    {"0": {"pid": "12"}}, {"0": {"proc": ["running"]}}, {"0": {"stack": b"\x00"}},
    {"0": {"trace": "text"}}, {"0": {"pid": True}}, {"1": {"proc": "running"}},
    ["0"], "ranks", None,
])
def test_a_hang_reply_with_wrong_types_gives_no_ranks_for_that_host(
        tmp_path: Path, ranks: object) -> None:
    handle, hub = attempt(tmp_path)
    hub.replies = {"a": {"ranks": ranks}}
    assert handle.collect(0.0) == {}
