"""The supervisor's loop driven by an injected clock: timeouts without sleeping on wall time.

The backend here is a scripted stand-in (the real launcher is exercised by the integration
tests); it lets the test say exactly when each rank exits or goes silent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from trainguard.recover.backend import LaunchPlan, RankExit
from trainguard.recover.spec import JobSpec, RetryPolicy
from trainguard.recover.supervisor import Supervisor


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class ScriptedAttempt:
    """Ranks that print once at launch, then exit per ``exits`` (rank -> (time, code))."""

    def __init__(self, plan: LaunchPlan, clock: Clock,
                 exits: Mapping[int, tuple[float, int]], finished: frozenset[int]) -> None:
        self.clock, self.t0 = clock, clock.now
        self.exits = dict(exits)
        self.reported: set[int] = set()
        self.ranks = [rl.rank for rl in plan.ranks]
        for rl in plan.ranks:
            rl.output.parent.mkdir(parents=True, exist_ok=True)
            rl.output.write_text("starting\n")
            if rl.rank in finished:  # what the SDK's finish() writes
                record = {"t": 0, "rank": rl.rank, "kind": "finish"}
                Path(rl.env["TRAINGUARD_EVENTS"]).write_text(json.dumps(record) + "\n")
        self.stopped_at: float | None = None

    def poll(self) -> list[RankExit]:
        out = []
        for rank, (t, code) in self.exits.items():
            if rank not in self.reported and self.clock.now - self.t0 >= t:
                self.reported.add(rank)
                out.append(RankExit(rank, code))
        return out

    def running(self) -> frozenset[int]:
        return frozenset(r for r in self.ranks if r not in self.reported)

    def pids(self) -> Mapping[int, int]:
        return {}

    def is_stopped(self, rank: int) -> bool:
        return False

    def signal_rank(self, rank: int, signum: int) -> None:
        raise AssertionError("no faults in these tests")

    def stop(self, grace_s: float) -> list[RankExit]:
        self.stopped_at = self.clock.now
        gone = [RankExit(r, -15) for r in self.running()]
        self.reported.update(r for r in self.ranks)
        return gone


class ScriptedBackend:
    name = "scripted"
    persistent_nodes = True

    def __init__(self, clock: Clock, script: list[Mapping[int, tuple[float, int]]],
                 finished: frozenset[int] = frozenset()) -> None:
        self.clock, self.script, self.finished = clock, list(script), finished
        self.drained: list[tuple[str, str]] = []
        self.attempts: list[ScriptedAttempt] = []

    def check(self, command: tuple[str, ...], nodes: tuple[str, ...]) -> None:
        pass

    def capacity(self) -> int | None:
        return None

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        return "127.0.0.1"

    def free_port(self, nodes: tuple[str, ...]) -> int:
        return 29500

    def exclude(self, node: str, reason: str) -> None:
        self.drained.append((node, reason))

    def unavailable(self, nodes: tuple[str, ...]) -> Mapping[str, str]:
        return {}

    def launch(self, plan: LaunchPlan) -> ScriptedAttempt:
        attempt = ScriptedAttempt(plan, self.clock, self.script.pop(0), self.finished)
        self.attempts.append(attempt)
        return attempt


def make(tmp_path: Path, script: list[Mapping[int, tuple[float, int]]],
         finished: frozenset[int] = frozenset(), **kw: object
         ) -> tuple[Supervisor, ScriptedBackend, Clock]:
    clock = Clock()
    backend = ScriptedBackend(clock, script, finished)
    spec = JobSpec(command=("train",), nodes=("n1", "n2"), nproc_per_node=1,
                   run_dir=tmp_path / "run", **kw)  # type: ignore[arg-type]
    return Supervisor(spec, backend, clock=clock, sleep=clock.sleep), backend, clock


def test_a_silent_rank_is_a_hang_after_exactly_the_timeout(tmp_path: Path) -> None:
    sup, backend, _ = make(
        tmp_path, [{0: (1e9, 0)}, {0: (1.0, 0), 1: (1.0, 0)}], hang_timeout_s=30.0,
        startup_timeout_s=30.0, policy=RetryPolicy(backoff_s=5.0))
    result = sup.run()
    assert result.status == "succeeded"
    first, second = result.attempts
    assert first.failure is not None and first.failure.category.value == "nccl_timeout_hang"
    # Output at launch is progress; 30 s of silence after it, declared on the next poll.
    assert 30.0 < backend.attempts[0].stopped_at - first.started <= 30.0 + 0.2  # type: ignore[operator]
    assert second.started == first.ended  # the first relaunch is immediate
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [a["decision"] for a in doc["attempts"]] == ["retry", None]


def test_the_first_rank_to_exit_is_the_culprit(tmp_path: Path) -> None:
    sup, _, _ = make(tmp_path, [{1: (2.0, 3), 0: (2.5, 1)}, {0: (1.0, 0), 1: (1.0, 0)}])
    first = sup.run().attempts[0]
    assert first.failure is not None and first.failure.culprit_rank == 1
    assert first.exit_codes == {0: -15, 1: 3}  # rank 0 was stopped by the supervisor


def test_the_retry_budget_ends_the_chain(tmp_path: Path) -> None:
    on_n1, on_n2 = {0: (1.0, 1), 1: (1.0, 0)}, {0: (1.0, 0), 1: (1.0, 1)}
    sup, _, _ = make(tmp_path, [on_n1, on_n2, on_n1],
                     policy=RetryPolicy(max_retries=2, backoff_s=0.0))
    result = sup.run()
    assert result.status == "failed" and result.exit_code == 1
    assert len(result.attempts) == 3 and "budget" in result.message


def test_a_node_culprit_twice_is_excluded_and_without_spares_the_chain_stops(
        tmp_path: Path) -> None:
    crash = {0: (1.0, 1), 1: (1.0, 0)}
    sup, backend, _ = make(tmp_path, [crash] * 2, policy=RetryPolicy(backoff_s=0.0))
    result = sup.run()
    assert result.status == "failed" and len(result.attempts) == 2
    assert "n1 excluded (implicated in 2 failures) and no spare left" in result.message
    assert [e.node for e in result.exclusions] == ["n1"]
    assert [node for node, _ in backend.drained] == ["n1"]  # the scheduler is told too


def test_a_rank_stuck_after_finish_counts_as_done_after_the_exit_grace(tmp_path: Path) -> None:
    sup, backend, _ = make(tmp_path, [{0: (1.0, 0)}], frozenset({1}), exit_grace_s=30.0,
                           hang_timeout_s=10.0)
    result = sup.run()
    assert result.status == "succeeded" and len(result.attempts) == 1
    assert result.attempts[0].exit_codes == {0: 0, 1: -15}
    # not declared a hang at 10 s: finished ranks are on their exit grace
    assert 30.0 < backend.attempts[0].stopped_at - result.attempts[0].started <= 30.2  # type: ignore[operator]


def test_tail_evidence_keeps_line_numbers_past_a_large_output(tmp_path: Path) -> None:
    from trainguard.recover.watch import RankWatch

    sup, _, _ = make(tmp_path, [])
    out = tmp_path / "rank0.log"
    filler = b"step output line\n" * 40_000  # ~680 KB: more than the tail that is scanned
    out.write_bytes(filler + b"Traceback (most recent call last):\n  File \"t.py\", line 3, "
                    b"in <module>\nValueError: bad lr\n")
    (ev,) = sup._tail_events(RankWatch(0, "n1", out, tmp_path / "e.jsonl", 0.0))
    assert ev.summary.startswith("ValueError: bad lr")
    assert [e.line_no for e in ev.evidence] == [40_001, 40_003]
