"""The chain driven by the lifecycle table, and agent features found through declared
capabilities and typed handle protocols (no duck typing on names or attributes).

The backend is scripted and the clock injected: nothing here sleeps on wall time or starts a
process.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping
from pathlib import Path

import pytest

from trainguard.errors import LaunchError
from trainguard.evidence.events import FailureEvent
from trainguard.faultspec import parse_faults
from trainguard.recover.backend import Capabilities, LaunchPlan, RankExit
from trainguard.recover.failure import FailureKind
from trainguard.recover.lifecycle import FINAL, TRANSITIONS, State
from trainguard.recover.narrate import final_line
from trainguard.recover.records import RunResult
from trainguard.recover.spec import JobSpec, RetryPolicy
from trainguard.recover.supervisor import Supervisor
from trainguard.taxonomy import Action, Category, Severity


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Ranks:
    """Ranks that exit with ``code`` ``after`` seconds after launch (never, with None)."""

    def __init__(self, plan: LaunchPlan, clock: Clock, after: float | None, code: int) -> None:
        self.clock, self.t0, self.after, self.code = clock, clock.now, after, code
        self.ranks = [rl.rank for rl in plan.ranks]
        self.reported: set[int] = set()
        self.signals: list[tuple[int, int]] = []
        self.closed = False
        for rl in plan.ranks:
            rl.output.parent.mkdir(parents=True, exist_ok=True)
            rl.output.write_text("starting\n")

    def poll(self) -> list[RankExit]:
        if self.after is None or self.clock.now - self.t0 < self.after:
            return []
        out = [RankExit(r, self.code) for r in self.ranks if r not in self.reported]
        self.reported.update(self.ranks)
        return out

    def running(self) -> frozenset[int]:
        return frozenset(r for r in self.ranks if r not in self.reported)

    def pids(self) -> Mapping[int, int]:
        return {}

    def is_stopped(self, rank: int) -> bool:
        return False

    def signal_rank(self, rank: int, signum: int) -> None:
        self.signals.append((rank, signum))

    def stop(self, grace_s: float) -> list[RankExit]:
        gone = [RankExit(r, -15) for r in self.running()]
        self.reported.update(self.ranks)
        return gone

    def close(self) -> None:
        self.closed = True


class AgentRanks(Ranks):
    """A handle with the optional features of an agent-run attempt."""

    def __init__(self, *args: object, events: list[FailureEvent] | None = None,
                 fail_poll: str | None = None) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.events = list(events or [])
        self.kernel_lines: list[tuple[str, str]] = []
        self.fail_poll = fail_poll

    def poll(self) -> list[RankExit]:
        if self.fail_poll is not None:
            raise LaunchError(self.fail_poll)
        return super().poll()

    def stop(self, grace_s: float) -> list[RankExit]:
        if self.fail_poll is not None:  # as an agent-run attempt does: it polls while stopping
            self.reported.update(self.ranks)
            raise LaunchError(self.fail_poll)
        return super().stop(grace_s)

    def node_events(self) -> list[FailureEvent]:
        out, self.events = self.events, []
        return out

    def settling(self) -> bool:
        return False

    def append_kernel_line(self, node: str, line: str) -> None:
        self.kernel_lines.append((node, line))


class Backend:
    name = "scripted"
    persistent_nodes = False

    def __init__(self, clock: Clock, make: list[object]) -> None:
        self.clock, self.make = clock, list(make)
        self.handles: list[Ranks] = []

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

    def launch(self, plan: LaunchPlan) -> Ranks:
        factory = self.make.pop(0)
        handle: Ranks = factory(plan, self.clock)  # type: ignore[operator]
        self.handles.append(handle)
        return handle


class AgentLike(Backend):
    capabilities = Capabilities(can_signal_rank=True, has_local_pids=False,
                                reads_kernel_logs=True)


def _spec(tmp_path: Path, **kw: object) -> JobSpec:
    return JobSpec(command=("train",), nodes=("n1", "n2"), spares=("n3",), nproc_per_node=1,
                   run_dir=tmp_path / "run", policy=RetryPolicy(backoff_s=0.0),
                   **kw)  # type: ignore[arg-type]


def _ranks(after: float | None, code: int) -> object:
    return lambda plan, clock: Ranks(plan, clock, after, code)


def test_every_state_that_is_not_final_has_a_handler(tmp_path: Path) -> None:
    sup = Supervisor(_spec(tmp_path), Backend(Clock(), []))
    assert set(sup.handlers) == set(TRANSITIONS) - FINAL


def test_a_retry_walks_the_table_state_by_state(tmp_path: Path) -> None:
    clock = Clock()
    backend = Backend(clock, [_ranks(1.0, 1), _ranks(1.0, 0)])
    sup = Supervisor(_spec(tmp_path), backend, clock=clock, sleep=clock.sleep)
    result = sup.run()
    assert result.status == "succeeded" and len(result.attempts) == 2
    once = [State.LAUNCHING, State.RUNNING, State.STOPPING, State.DECIDING]
    assert sup.lifecycle.history == [State.PREPARING, *once, State.BACKOFF, *once,
                                     State.SUCCEEDED]
    assert all(h.closed for h in backend.handles)


def test_cancel_before_the_first_launch_launches_nothing(tmp_path: Path) -> None:
    clock = Clock()
    backend = Backend(clock, [_ranks(1.0, 0)])
    sup = Supervisor(_spec(tmp_path), backend, clock=clock, sleep=clock.sleep)
    sup.cancel()
    result = sup.run()
    assert (result.status, result.message) == ("cancelled", "cancelled before launch")
    assert backend.handles == [] and sup.lifecycle.history[-1] is State.CANCELLED


def test_a_launch_that_breaks_while_running_ends_failed_without_blaming_a_node(
        tmp_path: Path) -> None:
    """No agent ever connected (an error seen only by polling): one clear failure, the ranks
    stopped, nobody excluded; not a crash on an illegal state change."""
    clock = Clock()
    backend = AgentLike(clock, [lambda plan, clock: AgentRanks(
        plan, clock, None, 0, fail_poll="no agent connected to the controller")])
    sup = Supervisor(_spec(tmp_path), backend, clock=clock, sleep=clock.sleep)
    result = sup.run()
    assert result.status == "failed"
    assert result.message == "launch failed: no agent connected to the controller"
    assert result.exclusions == () and backend.handles[0].running() == frozenset()
    assert backend.handles[0].closed and sup.lifecycle.history[-1] is State.FAILED
    _counted_once(result, tmp_path)


def _counted_once(result: RunResult, tmp_path: Path) -> None:
    """The attempt announced as launching counts as one failed attempt, in the result and in
    summary.json alike (issue 28: not 'after 0 attempts' next to 'attempt 0: launching')."""
    (attempt,) = result.attempts
    assert attempt.index == 0 and attempt.status == "failed" and attempt.failure is not None
    assert attempt.failure.kind is FailureKind.LAUNCH
    assert attempt.failure.summary == result.message and attempt.decision is None
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [(a["index"], a["failure"]["kind"]) for a in summary["attempts"]] == [(0, "launch")]
    assert final_line(result, tmp_path / "s.json").startswith(
        f"job failed after 1 attempt: {result.message}; ")


def test_a_launcher_that_cannot_start_is_one_failed_attempt(tmp_path: Path) -> None:
    def cannot(plan: LaunchPlan, clock: Clock) -> Ranks:
        raise LaunchError("cannot start an agent (nosuch): No such file or directory")

    clock = Clock()
    lines: list[str] = []
    sup = Supervisor(_spec(tmp_path), AgentLike(clock, [cannot]), clock=clock,
                     sleep=clock.sleep, on_status=lines.append)
    result = sup.run()
    assert result.message == ("launch failed: cannot start an agent (nosuch): No such file "
                              "or directory")
    assert lines == ["attempt 0: launching 2 rank(s) on n1, n2"]  # the error: in the final line
    _counted_once(result, tmp_path)


def _xid_event(node: str) -> FailureEvent:
    return FailureEvent(category=Category.GPU_HARDWARE, action=Action.EXCLUDE_NODE,
                        severity=Severity.FATAL, signature="xid_79", summary="XID 79",
                        host=node)


def test_node_evidence_a_handle_reports_stops_the_attempt(tmp_path: Path) -> None:
    clock = Clock()
    backend = AgentLike(clock, [
        lambda plan, clock: AgentRanks(plan, clock, None, 0, events=[_xid_event("n2")]),
        _ranks(1.0, 0)])
    lines: list[str] = []
    sup = Supervisor(_spec(tmp_path), backend, clock=clock, sleep=clock.sleep,
                     on_status=lines.append)
    result = sup.run()
    first = result.attempts[0]
    assert first.failure is not None and first.failure.node_fault
    assert first.failure.culprit_nodes == ("n2",)
    assert "n2: stopping the attempt: XID 79" in lines
    assert result.attempts[1].nodes == ("n1", "n3")  # n2 excluded, the spare took its place


@pytest.mark.parametrize("agents", [True, False])
def test_an_xid_drill_goes_where_the_backend_reads_kernel_logs(tmp_path: Path,
                                                               agents: bool) -> None:
    clock = Clock()

    def make(plan: LaunchPlan, clock: Clock) -> AgentRanks:
        return AgentRanks(plan, clock, 1.0, 0)

    backend = (AgentLike if agents else Backend)(clock, [make, make])
    spec = _spec(tmp_path, faults=parse_faults(["xid:node=n2,xid=79,after=0"]))
    Supervisor(spec, backend, clock=clock, sleep=clock.sleep).run()
    handle = backend.handles[0]
    assert isinstance(handle, AgentRanks)
    klog = spec.kernel_log_path("n2")
    if agents:  # the node's agent writes its own log; nothing is read or written here
        ((node, line),) = handle.kernel_lines
        assert node == "n2" and "n2 kernel: NVRM: Xid (PCI:" in line and "): 79," in line
        assert not klog.exists()
    else:
        assert handle.kernel_lines == [] and "Xid" in klog.read_text()


@pytest.mark.parametrize("ranks_end_at", [0.5, 1.0])
def test_a_drill_due_once_every_rank_has_exited_is_not_fired_and_said(
        tmp_path: Path, ranks_end_at: float) -> None:
    """A timed drill never lands after its attempt: not after the ranks ended (0.5 s), nor in
    the poll that finds them ended (1.0 s, a controller that looked late), where the XID line
    used to be written after the exits were read. It is said instead."""
    clock = Clock()
    backend = Backend(clock, [_ranks(ranks_end_at, 0)])
    lines: list[str] = []
    spec = _spec(tmp_path, faults=parse_faults(["xid:node=n2,xid=79,after=1"]))
    result = Supervisor(spec, backend, clock=clock, sleep=clock.sleep,
                        on_status=lines.append).run()
    assert result.status == "succeeded" and len(result.attempts) == 1
    assert "Xid" not in spec.kernel_log_path("n2").read_text()
    assert "attempt 0: --inject xid:node=n2,after=1 did not fire: the attempt ended " \
        "first" in lines


@pytest.mark.parametrize(("can_signal", "expected"),
                         [(True, [(1, signal.SIGKILL)]), (False, [])])
def test_a_kill_drill_needs_a_backend_that_can_signal_a_rank(
        tmp_path: Path, can_signal: bool, expected: list[tuple[int, int]]) -> None:
    class Declared(Backend):
        capabilities = Capabilities(can_signal_rank=can_signal)

    clock = Clock()
    backend = Declared(clock, [_ranks(1.0, 0)])
    lines: list[str] = []
    spec = _spec(tmp_path, faults=parse_faults(["kill:rank=1,after=0"]))
    Supervisor(spec, backend, clock=clock, sleep=clock.sleep, on_status=lines.append).run()
    assert backend.handles[0].signals == expected
    assert any("cannot signal a rank" in line for line in lines) is not can_signal


def test_a_kill_drill_waits_until_the_rank_can_be_reached(tmp_path: Path) -> None:
    """An agent that has not connected yet cannot deliver the signal: the drill fires at a
    later poll, once, instead of ending the chain."""

    class Unreachable(Ranks):
        refusals = 3

        def signal_rank(self, rank: int, signum: int) -> None:
            if self.refusals:
                self.refusals -= 1
                raise LaunchError("n2's agent is not connected")
            super().signal_rank(rank, signum)

    clock = Clock()
    backend = AgentLike(clock, [lambda plan, clock: Unreachable(plan, clock, 5.0, 0)])
    lines: list[str] = []
    spec = _spec(tmp_path, faults=parse_faults(["kill:rank=1,after=0"]))
    result = Supervisor(spec, backend, clock=clock, sleep=clock.sleep,
                        on_status=lines.append).run()
    assert backend.handles[0].signals == [(1, signal.SIGKILL)]
    assert result.attempts[0].faults == ("kill:rank=1,after=0",)
    assert [line for line in lines if "waits" in line] \
        == ["inject: kill:rank=1,after=0 waits: n2's agent is not connected"]
