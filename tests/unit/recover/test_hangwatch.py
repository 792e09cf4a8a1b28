"""The supervisor's hang decision with process evidence, driven by an injected clock: a rank
quiet after its start-up line is not hung while rank 0 logs; a stopped rank is, after exactly
the timeout, and is the culprit; a rank stopped before its first output is not given the
start-up allowance."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trainguard.recover.backend import LaunchPlan, RankExit
from trainguard.recover.liveness import ProcSample
from trainguard.recover.spec import JobSpec, RetryPolicy
from trainguard.recover.supervisor import Supervisor


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class AgentLikeAttempt:
    """Ranks whose hosts send ``procstat`` (rank -> state over time); rank 0 prints a line per
    second until ``end_s``, rank 1 one line at launch (unless stopped from the start); both
    exit 0 at ``end_s``."""

    def __init__(self, plan: LaunchPlan, clock: Clock, end_s: float,
                 stop_at: float | None) -> None:
        self.clock, self.t0, self.end_s, self.stop_at = clock, clock.now, end_s, stop_at
        self.out = {rl.rank: rl.output for rl in plan.ranks}
        self.ranks = sorted(self.out)
        self.reported: set[int] = set()
        self.printed = 0
        for rank, path in self.out.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            quiet = rank == 1 and stop_at is not None and stop_at <= 0
            path.write_text("" if quiet else f"rank {rank}: UserWarning: start-up\n")

    def _t(self) -> float:
        return self.clock.now - self.t0

    def poll(self) -> list[RankExit]:
        t = self._t()
        while self.printed < int(min(t, self.end_s)):
            self.printed += 1
            with open(self.out[0], "a") as f:
                f.write(f"step {self.printed}\n")
        if t >= self.end_s and not self.reported:
            self.reported.update(self.ranks)
            return [RankExit(r, 0) for r in self.ranks]
        return []

    def proc_samples(self) -> list[ProcSample]:
        t = self._t()
        stopped = self.stop_at is not None and t >= self.stop_at
        return [ProcSample(0, 0.0, "running", t),
                ProcSample(1, 0.0, "stopped" if stopped else "running", 0.5)]

    def running(self) -> frozenset[int]:
        return frozenset(r for r in self.ranks if r not in self.reported)

    def pids(self) -> Mapping[int, int]:
        return {}

    def is_stopped(self, rank: int) -> bool:
        return False

    def signal_rank(self, rank: int, signum: int) -> None:
        pass

    def stop(self, grace_s: float) -> list[RankExit]:
        self.stopped_at = self.clock.now
        gone = [RankExit(r, -15) for r in self.running()]
        self.reported.update(self.ranks)
        return gone

    def close(self) -> None:
        pass


class Backend:
    name = "agentlike"
    persistent_nodes = False

    def __init__(self, clock: Clock, end_s: float, stop_at: float | None) -> None:
        self.clock, self.end_s, self.stop_at = clock, end_s, stop_at
        self.attempts: list[AgentLikeAttempt] = []

    def check(self, command: tuple[str, ...], nodes: tuple[str, ...]) -> None:
        pass

    def capacity(self) -> int | None:
        return None

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        return "127.0.0.1"

    def free_port(self, nodes: tuple[str, ...]) -> int:
        return 29500

    def exclude(self, node: str, reason: str) -> None:
        pass

    def unavailable(self, nodes: tuple[str, ...]) -> Mapping[str, str]:
        return {}

    def launch(self, plan: LaunchPlan) -> AgentLikeAttempt:
        # a fault in the first attempt only
        attempt = AgentLikeAttempt(plan, self.clock, self.end_s,
                                   self.stop_at if not self.attempts else None)
        self.attempts.append(attempt)
        return attempt


def supervise(tmp_path: Path, end_s: float, stop_at: float | None) -> tuple[object, Backend]:
    clock = Clock()
    backend = Backend(clock, end_s, stop_at)
    spec = JobSpec(command=("train",), nodes=("a", "b"), nproc_per_node=1,
                   run_dir=tmp_path / "run", hang_timeout_s=10.0, startup_timeout_s=900.0,
                   policy=RetryPolicy(backoff_s=0.0, max_retries=1))
    return Supervisor(spec, backend, clock=clock, sleep=clock.sleep).run(), backend


def test_a_rank_quiet_after_start_up_is_not_hung_while_rank_0_logs(tmp_path: Path) -> None:
    result, backend = supervise(tmp_path, end_s=60.0, stop_at=None)
    assert result.status == "succeeded"  # type: ignore[attr-defined]
    assert len(backend.attempts) == 1


def test_a_stopped_rank_is_a_hang_after_the_timeout_and_the_culprit(tmp_path: Path) -> None:
    result, backend = supervise(tmp_path, end_s=60.0, stop_at=20.0)
    first = result.attempts[0]  # type: ignore[attr-defined]
    assert first.failure is not None and first.failure.culprit_rank == 1
    assert "SIGSTOP" in first.failure.summary
    declared = backend.attempts[0].stopped_at - backend.attempts[0].t0
    assert 30.0 < declared <= 30.0 + 0.2  # rank 0 kept logging all along
    assert result.status == "succeeded" and len(backend.attempts) == 2  # type: ignore[attr-defined]


def test_a_rank_stopped_before_its_first_output_is_caught_after_the_hang_timeout(
        tmp_path: Path) -> None:
    result, backend = supervise(tmp_path, end_s=60.0, stop_at=0.0)
    first = result.attempts[0]  # type: ignore[attr-defined]
    assert first.failure is not None and first.failure.culprit_rank == 1
    declared = backend.attempts[0].stopped_at - backend.attempts[0].t0
    assert 10.0 < declared <= 10.0 + 0.2  # not the 900-s start-up timeout
