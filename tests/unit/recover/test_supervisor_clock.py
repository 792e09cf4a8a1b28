"""The supervisor's loop driven by an injected clock: timeouts without sleeping on wall time.

The backend here is a scripted stand-in (the real launcher is exercised by the integration
tests); it lets the test say exactly when each rank exits or goes silent.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

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
                 exits: Mapping[int, tuple[float, int]], finished: frozenset[int],
                 output: Mapping[int, str] | None = None) -> None:
        self.clock, self.t0 = clock, clock.now
        self.exits = dict(exits)
        self.reported: set[int] = set()
        self.ranks = [rl.rank for rl in plan.ranks]
        for rl in plan.ranks:
            rl.output.parent.mkdir(parents=True, exist_ok=True)
            rl.output.write_text("starting\n" + (output or {}).get(rl.rank, ""))
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

    def close(self) -> None:
        self.closed = True


class ScriptedBackend:
    name = "scripted"
    persistent_nodes = True

    def __init__(self, clock: Clock, script: list[Mapping[int, tuple[float, int]]],
                 finished: frozenset[int] = frozenset(),
                 output: Mapping[int, str] | None = None) -> None:
        self.clock, self.script, self.finished = clock, list(script), finished
        self.output = output
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
        attempt = ScriptedAttempt(plan, self.clock, self.script.pop(0), self.finished,
                                  self.output)
        self.attempts.append(attempt)
        return attempt


def make(tmp_path: Path, script: list[Mapping[int, tuple[float, int]]],
         finished: frozenset[int] = frozenset(), output: Mapping[int, str] | None = None,
         **kw: object) -> tuple[Supervisor, ScriptedBackend, Clock]:
    clock = Clock()
    backend = ScriptedBackend(clock, script, finished, output)
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
    # no rank said which backend it uses: the hang is a collective hang, not an NCCL one
    assert first.failure is not None and first.failure.category.value == "collective_hang"
    assert first.failure.backend == "unknown"
    # Output at launch is progress; 30 s of silence after it, declared on the next poll.
    assert 30.0 < backend.attempts[0].stopped_at - first.started <= 30.0 + 0.2  # type: ignore[operator]
    assert second.started == first.ended  # the first relaunch is immediate
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [a["decision"] for a in doc["attempts"]] == ["retry", None]


def test_the_first_rank_to_exit_is_the_culprit(tmp_path: Path) -> None:
    sup, _, _ = make(tmp_path, [{1: (2.0, 3), 0: (2.5, 1)}, {0: (1.0, 0), 1: (1.0, 0)}],
                     peer_exit_grace_s=0.0)
    first = sup.run().attempts[0]
    assert first.failure is not None and first.failure.culprit_rank == 1
    assert first.exit_codes == {0: -15, 1: 3}  # no grace: rank 0 was stopped at once


def test_after_an_abort_the_peers_get_a_grace_to_exit_on_their_own(tmp_path: Path) -> None:
    sup, backend, _ = make(tmp_path, [{1: (2.0, -6), 0: (4.0, 1)}, {0: (1.0, 0), 1: (1.0, 0)}],
                           peer_exit_grace_s=5.0)
    first = sup.run().attempts[0]
    assert first.failure is not None and first.failure.culprit_rank == 1
    assert first.exit_codes == {0: 1, 1: -6}  # rank 0 exited by itself within the grace
    assert backend.attempts[0].stopped_at is None  # nothing left to stop


@pytest.mark.parametrize("code", [-9, -15, 3])
def test_no_grace_when_the_exit_cannot_be_a_teardown_crash(tmp_path: Path, code: int) -> None:
    # killed from outside, or an error exit without the SDK: the peers' exits change nothing
    sup, backend, _ = make(tmp_path, [{1: (2.0, code)}, {0: (1.0, 0), 1: (1.0, 0)}],
                           peer_exit_grace_s=5.0)
    first = sup.run().attempts[0]
    assert first.exit_codes == {0: -15, 1: code}
    assert 2.0 <= backend.attempts[0].stopped_at - first.started <= 2.2  # type: ignore[operator]


def test_a_peer_still_running_after_the_grace_is_stopped(tmp_path: Path) -> None:
    sup, backend, _ = make(tmp_path, [{1: (2.0, -6)}, {0: (1.0, 0), 1: (1.0, 0)}],
                           peer_exit_grace_s=5.0)
    result = sup.run()
    first = result.attempts[0]
    assert first.exit_codes == {0: -15, 1: -6}
    assert 7.0 <= backend.attempts[0].stopped_at - first.started <= 7.2  # type: ignore[operator]
    # an abort without evidence while a peer still worked: relaunched, nothing excluded
    assert first.failure is not None and first.failure.category.value == "unknown"
    assert first.decision is not None and first.decision.verdict.value == "retry"
    assert result.status == "succeeded" and result.exclusions == ()


def test_an_abort_after_the_peers_completed_is_a_teardown_crash(tmp_path: Path) -> None:
    sup, backend, _ = make(tmp_path, [{1: (2.0, -6), 0: (2.3, 0)}], peer_exit_grace_s=5.0)
    result = sup.run()
    assert result.status == "succeeded" and len(result.attempts) == 1
    assert result.exclusions == () and backend.drained == []
    assert result.message.startswith("completed; teardown crash of rank 1 on n2 (SIGABRT)")
    (attempt,) = json.loads((tmp_path / "run" / "summary.json").read_text())["attempts"]
    assert attempt["status"] == "succeeded" and attempt["failure"] is None
    assert attempt["teardown_crashes"][0]["note"] == "teardown crash of rank 1 on n2 (SIGABRT)"


def test_an_sdk_rank_that_finished_then_crashed_is_a_teardown_crash(tmp_path: Path) -> None:
    # both ranks reported finish(); rank 1 dies by exit code 1, rank 0 hangs in teardown
    sup, _, _ = make(tmp_path, [{1: (2.0, 1)}], frozenset({0, 1}), peer_exit_grace_s=5.0)
    result = sup.run()
    assert result.status == "succeeded" and len(result.attempts) == 1
    (crash,) = result.attempts[0].teardown_crashes
    assert crash.why_done == "it reported finish() before crashing"


def test_the_same_abort_with_a_peer_mid_training_is_retried(tmp_path: Path) -> None:
    # the peer exits by itself but not 0 (a connection error): the work was not done
    sup, _, _ = make(tmp_path, [{1: (2.0, -6), 0: (2.5, 1)}, {0: (1.0, 0), 1: (1.0, 0)}])
    result = sup.run()
    assert len(result.attempts) == 2 and result.attempts[0].teardown_crashes == ()
    assert result.attempts[0].failure is not None


def test_the_retry_budget_ends_the_chain(tmp_path: Path) -> None:
    on_n1, on_n2 = {0: (1.0, 1), 1: (1.0, 0)}, {0: (1.0, 0), 1: (1.0, 1)}
    sup, _, _ = make(tmp_path, [on_n1, on_n2, on_n1],
                     policy=RetryPolicy(max_retries=2, backoff_s=0.0))
    result = sup.run()
    assert result.status == "failed" and result.exit_code == 1
    assert len(result.attempts) == 3 and "budget" in result.message


def test_a_node_culprit_twice_is_excluded_and_without_spares_the_chain_stops(
        tmp_path: Path) -> None:
    crash = {0: (1.0, 1), 1: (1.0, -15)}
    ib = "NCCL WARN NET/IB : Got completion from peer 10.0.0.2<34567> with error 12\n"
    sup, backend, _ = make(tmp_path, [crash] * 2, output={0: ib},
                           policy=RetryPolicy(backoff_s=0.0))
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


def test_a_signal_during_a_slow_classification_stops_the_run_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM while the failed rank's output is classified (adversarial lines can make that
    take minutes): the classification is abandoned and the run ends cancelled at once."""
    import trainguard.recover.supervisor as supervisor_mod

    scans: list[float] = []

    def slow_scan(*args: object, **kwargs: object) -> list[object]:
        scans.append(time.monotonic())
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:  # Python bytecode: signal handlers run in here
            pass
        return []

    monkeypatch.setattr(supervisor_mod, "scan_bytes", slow_scan)
    sup, backend, _ = make(tmp_path, [{1: (1.0, 3)}, {0: (1.0, 0), 1: (1.0, 0)}],
                           peer_exit_grace_s=0.0)
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: sup.cancel())
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    t0 = time.monotonic()
    try:
        result = sup.run()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - t0 < 5.0
    assert len(scans) == 1 and result.status == "cancelled"
    assert len(backend.attempts) == 1  # not relaunched
    assert backend.attempts[0].running() == frozenset()  # every rank stopped


def test_status_lines_quoting_rank_output_are_terminal_safe(tmp_path: Path) -> None:
    lines: list[str] = []
    clock = Clock()
    evil = "Traceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n" \
           "ValueError: bad \x1b]0;owned\x07lr \x1b[2J\n"
    backend = ScriptedBackend(clock, [{0: (1.0, 1), 1: (1.0, 1)}] * 2, output={0: evil})
    spec = JobSpec(command=("train",), nodes=("n1", "n2"), nproc_per_node=1,
                   run_dir=tmp_path / "run")
    result = Supervisor(spec, backend, clock=clock, sleep=clock.sleep,
                        on_status=lines.append).run()
    assert any("ValueError: bad lr" in line for line in lines)
    assert not any("\x1b" in line or "\x07" in line for line in lines)
    assert "\x1b" not in result.message
