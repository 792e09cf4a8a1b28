"""The ring split run through (fake) agents: one attempt per round, each subset a ring of its
own, hanging subsets stopped at the round's limit, and the findings that replace "cluster"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainguard.agent.backend import AgentBackend
from trainguard.agent.launch_local import LocalLauncher
from trainguard.check.allreduce import MARKER
from trainguard.check.checker import CheckReport
from trainguard.check.model import Finding, Level
from trainguard.check.ringrun import (
    RING_TIMEOUT_S,
    SUBSET_TIMEOUT_S,
    distinct_masters,
    round_plan,
    split_ring,
    with_ring,
    with_split,
)
from trainguard.recover.backend import RankExit
from trainguard.recover.launchplan import LaunchPlan
from trainguard.recover.local import LocalBackend


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class FakeAttempt:
    """Ranks of subsets without ``bad`` exit 0 at once (rank 0 prints the result); the others
    hang until stopped."""

    def __init__(self, plan: LaunchPlan, bad: set[str]) -> None:
        self.plan = plan
        groups: dict[tuple[str, str], list[Any]] = {}
        for r in plan.ranks:
            groups.setdefault((r.env["MASTER_ADDR"], r.env["MASTER_PORT"]), []).append(r)
        self.exits: list[RankExit] = []
        self.hanging: set[int] = set()
        for members in groups.values():
            nodes = {r.node for r in members}
            for r in members:
                assert r.env["WORLD_SIZE"] == str(len(members))
                if nodes & bad:
                    self.hanging.add(r.rank)
                    continue
                if r.env["RANK"] == "0":
                    r.output.parent.mkdir(parents=True, exist_ok=True)
                    r.output.write_text(MARKER + json.dumps({"latency_ms": 1.0}) + "\n")
                self.exits.append(RankExit(r.rank, 0))
        self.stopped = False

    def poll(self) -> list[RankExit]:
        out, self.exits = self.exits, []
        return out

    def running(self) -> frozenset[int]:
        return frozenset(self.hanging)

    def stop(self, grace_s: float) -> list[RankExit]:
        self.stopped = True
        out = [RankExit(r, -15) for r in sorted(self.hanging)]
        self.hanging = set()
        return out

    def close(self) -> None:
        pass


class FakeBackend:
    def __init__(self, bad: set[str]) -> None:
        self.bad = bad
        self.plans: list[LaunchPlan] = []
        self.attempts: list[FakeAttempt] = []

    def launch(self, plan: LaunchPlan) -> Any:
        self.plans.append(plan)
        self.attempts.append(FakeAttempt(plan, self.bad))
        return self.attempts[-1]


def _masters() -> Any:
    ports = iter([5000, 5000, 5001, 5002, 5003, 5004, 5005, 5006, 5007, 5008, 5009, 5010])
    return distinct_masters(lambda s: "127.0.0.1", lambda s: next(ports))


def test_a_round_is_one_attempt_of_disjoint_rings(tmp_path: Path) -> None:
    plan, members = round_plan([("a", "b"), ("c", "d", "e")], tmp_path, _masters(), "py")
    assert plan.nodes == ("a", "b", "c", "d", "e") and len(plan.ranks) == 5
    assert members == {("a", "b"): (0, 1), ("c", "d", "e"): (2, 3, 4)}
    env = [dict(r.env) for r in plan.ranks]
    assert [e["RANK"] for e in env] == ["0", "1", "0", "1", "2"]
    assert [e["WORLD_SIZE"] for e in env] == ["2", "2", "3", "3", "3"]
    # one loopback: two rings never share a rendezvous port
    assert env[0]["MASTER_PORT"] != env[2]["MASTER_PORT"]
    assert len({r.output for r in plan.ranks}) == 5


def test_the_host_that_breaks_the_ring_is_named(tmp_path: Path) -> None:
    clock = FakeClock()
    backend = FakeBackend({"h5"})
    found = split_ring(backend, [f"h{i}" for i in range(8)], tmp_path, _masters(), "py",
                       timeout_s=30.0, clock=clock, sleep=clock.sleep)
    assert [(f.subject, f.kind, f.level) for f in found] == [("h5", "host", Level.FAIL)]
    assert len(backend.plans) == 2  # two rounds, each one attempt
    assert [a.stopped for a in backend.attempts] == [True, True]  # the hanging pairs
    assert clock.now < 2 * 30.0 + 1


def test_a_whole_broken_ring_is_the_cluster(tmp_path: Path) -> None:
    clock = FakeClock()
    hosts = [f"h{i}" for i in range(4)]
    found = split_ring(FakeBackend(set(hosts)), hosts, tmp_path, _masters(), "py",
                       timeout_s=5.0, clock=clock, sleep=clock.sleep)
    assert [(f.subject, f.level) for f in found] == [("cluster", Level.FAIL)]


def _report(hosts: tuple[str, ...]) -> CheckReport:
    return CheckReport(hosts, (), (), {h: Level.PASS for h in hosts}, 0, 0.0, 1.0)


def test_the_named_host_replaces_cluster_in_the_report() -> None:
    failed = Finding("cluster", "cluster", Level.FAIL, "allreduce",
                     "ring-wide all-reduce over a, b, c did not complete: not done in 60 s")
    split = [Finding("c", "host", Level.FAIL, "allreduce", "fails with c")]
    report = with_ring(_report(("a", "b", "c")), with_split(failed, split), 5.0)
    assert report.flagged() == ("c",) and report.duration_s == 6.0
    [f] = report.problems()
    assert f.subject == "c" and "not done in 60 s" in f.reason and "fails with c" in f.reason
    unresolved = [Finding("cluster", "cluster", Level.FAIL, "allreduce", "no subset")]
    [g] = with_split(failed, unresolved)
    assert g.subject == "cluster" and g.reason.endswith("no subset")
    assert with_split(failed, []) == [failed]


@pytest.mark.parametrize(("given", "ring", "rounds"), [
    (None, RING_TIMEOUT_S, SUBSET_TIMEOUT_S),  # the defaults
    (20.0, 20.0, 20.0),  # check --ring-timeout 20: the ring and each round
])
def test_the_ring_timeout_limits_the_ring_and_each_subset_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: float | None, ring: float,
        rounds: float) -> None:
    import trainguard.check.agents as check_agents
    import trainguard.check.ringrun as ringrun

    limits: dict[str, float] = {}

    def run_ring(backend: Any, plan: LaunchPlan, timeout_s: float, *_: Any) -> tuple[str, str]:
        limits["ring"] = timeout_s
        return "", f"not done in {timeout_s:g} s"

    def split(*_: Any, timeout_s: float, **__: Any) -> list[Finding]:
        limits["rounds"] = timeout_s
        return [Finding("b", "host", Level.FAIL, "allreduce", "completes without it")]

    monkeypatch.setattr(check_agents, "run_ring", run_ring)
    monkeypatch.setattr(ringrun, "split_ring", split)
    backend = AgentBackend(LocalBackend(), LocalLauncher())
    report = backend._ring(_report(("a", "b", "c")), ("a", "b", "c"), tmp_path,
                           lambda _: None, given)
    assert limits == {"ring": ring, "rounds": rounds}
    assert report.flagged() == ("b",)
