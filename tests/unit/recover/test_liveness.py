"""The hang rule (:mod:`trainguard.recover.liveness`), driven by explicit times: no sleeping."""

from __future__ import annotations

import pytest

from trainguard.recover.failure import AttemptFacts, RankOutcome, Trigger, analyze
from trainguard.recover.liveness import (
    LivenessLimits,
    LivenessSnapshot,
    LivenessTracker,
    ProcSample,
    RankLiveness,
    judge,
    snapshot,
)

LIMITS = LivenessLimits(hang_timeout_s=10.0, startup_timeout_s=100.0)


def feed(tracker: LivenessTracker, rank: int, times: range | list[float], cpu_per_s: float,
         state: str = "running", cpu0: float = 0.0) -> None:
    for t in times:
        tracker.observe(ProcSample(rank, float(t), state, cpu0 + cpu_per_s * float(t)))


def snap(now: float, last_output: float | None, tracker: LivenessTracker,
         ranks: tuple[int, ...] = (0, 1), sdk: frozenset[int] = frozenset(),
         last_progress: float = 0.0) -> LivenessSnapshot:
    return snapshot(now, 0.0, last_output,
                    [RankLiveness(r, "ab"[r % 2], r in sdk, last_progress, last_progress > 0)
                     for r in ranks], tracker)


def test_a_quiet_rank_while_another_logs_is_not_hung() -> None:
    # the case: rank 1 printed once at start, rank 0 logs every second; rank 1 asleep
    t = LivenessTracker(10.0)
    feed(t, 0, range(0, 31), 1.0)
    feed(t, 1, range(0, 31), 0.0)
    for now in range(1, 31):
        assert judge(snap(now, now - 0.5, t), LIMITS) is None


def test_a_silent_job_with_a_rank_off_the_cpu_is_hung_after_exactly_the_timeout() -> None:
    t = LivenessTracker(10.0)
    feed(t, 0, range(0, 41), 0.0)  # blocked in a gloo collective
    feed(t, 1, range(0, 41), 0.0)
    assert judge(snap(30.0, 20.0, t), LIMITS) is None  # exactly the timeout: not yet
    v = judge(snap(30.1, 20.0, t), LIMITS)
    assert v is not None and v.silent_s == pytest.approx(10.1)
    assert v.culprits == ()  # nothing singles a rank out
    assert "used no CPU" in v.reason and "0, 1" in v.reason


def test_a_silent_job_that_burns_cpu_gets_the_start_up_allowance() -> None:
    t = LivenessTracker(10.0)
    feed(t, 0, range(0, 201), 1.0)
    feed(t, 1, range(0, 201), 0.5)
    assert judge(snap(50.0, 5.0, t), LIMITS) is None  # loading, compiling: not hung
    assert judge(snap(105.0, 5.0, t), LIMITS) is None
    v = judge(snap(105.5, 5.0, t), LIMITS)
    assert v is not None and "kept using CPU" in v.reason


def test_without_cpu_evidence_the_silence_of_the_whole_job_decides() -> None:
    t = LivenessTracker(10.0)  # no samples at all (a backend that cannot see the ranks)
    assert judge(snap(15.0, 5.0, t), LIMITS) is None
    v = judge(snap(15.5, 5.0, t), LIMITS)
    assert v is not None and "no CPU evidence" in v.reason


def test_before_any_output_the_start_up_timeout_applies() -> None:
    t = LivenessTracker(10.0)
    feed(t, 0, range(0, 150), 0.0)
    feed(t, 1, range(0, 150), 0.0)
    assert judge(snap(99.0, None, t), LIMITS) is None
    v = judge(snap(100.5, None, t), LIMITS)
    assert v is not None and "since launch" in v.reason


def test_a_stopped_rank_is_hung_after_the_timeout_while_others_log() -> None:
    t = LivenessTracker(10.0)
    feed(t, 0, range(0, 30), 1.0)
    feed(t, 1, range(0, 12), 1.0)
    feed(t, 1, range(12, 30), 0.0, state="stopped", cpu0=12.0)
    assert judge(snap(22.0, 21.9, t), LIMITS) is None
    v = judge(snap(22.5, 22.4, t), LIMITS)
    assert v is not None and v.culprits == (1,) and "stopped" in v.reason
    assert v.silent_s == pytest.approx(10.5)


def test_a_rank_stopped_before_its_first_output_is_not_given_the_start_up_allowance() -> None:
    t = LivenessTracker(10.0)
    feed(t, 1, range(0, 20), 0.0, state="stopped")
    feed(t, 0, range(0, 20), 0.2)
    v = judge(snap(10.5, None, t), LIMITS)  # nothing heard yet: start-up is 100 s
    assert v is not None and v.culprits == (1,)


def test_a_stop_that_ends_resets_the_count() -> None:
    t = LivenessTracker(10.0)
    feed(t, 1, [0.0, 5.0], 0.0, state="stopped")
    feed(t, 1, [6.0], 0.0)  # continued
    feed(t, 1, [7.0, 16.0], 0.0, state="stopped")
    feed(t, 0, range(0, 17), 1.0)
    assert judge(snap(16.5, 16.4, t), LIMITS) is None  # stopped 9.5 s, not 16.5 s
    v = judge(snap(17.5, 17.4, t), LIMITS)
    assert v is not None and v.culprits == (1,)


def test_an_sdk_rank_keeps_its_own_heartbeat() -> None:
    t = LivenessTracker(10.0)
    feed(t, 0, range(0, 30), 1.0)
    feed(t, 1, range(0, 30), 1.0)
    # rank 1 reports through the SDK; its last event at 5 s, while rank 0 logs on
    s = snapshot(16.0, 0.0, 15.9, [RankLiveness(0, "a"), RankLiveness(1, "b", True, 5.0, True)],
                 t)
    v = judge(s, LIMITS)
    assert v is not None and "rank 1" in v.reason and v.silent_s == pytest.approx(11.0)


def test_the_cpu_rate_covers_the_window_or_half_of_it_and_ignores_decreases() -> None:
    t = LivenessTracker(10.0)
    assert t.cpu_rate(0, 0.0) is None
    feed(t, 0, [0.0, 2.0, 4.0], 0.5)
    assert t.cpu_rate(0, 4.0) is None  # 4 s of a 10-s window
    feed(t, 0, [6.0], 0.5)
    assert t.cpu_rate(0, 6.0) == pytest.approx(0.5)  # 6 s: more than half
    # a worker exits: the group's total drops; the counter does not
    t.observe(ProcSample(0, 8.0, "running", 1.0))
    t.observe(ProcSample(0, 20.0, "running", 1.0))
    assert t.cpu_rate(0, 20.0) == pytest.approx(0.0)
    assert t.cpu_rate(0, 26.0) is None  # the newest sample is stale
    t.observe(ProcSample(0, 19.0, "stopped", 9.0))  # older than the newest: ignored
    assert t.state(0) == "running"


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match=r"liveness\.hang_timeout_s"):
        LivenessLimits(hang_timeout_s=0.0, startup_timeout_s=1.0)


def test_a_hang_without_evidence_against_a_rank_blames_none() -> None:
    # no SDK: a rank has no progress of its own to compare (the attempt passes None)
    facts = AttemptFacts(Trigger.HANG, (RankOutcome(0, "a", None), RankOutcome(1, "b", None)),
                         hang_for_s=10.0)
    failure = analyze(facts)
    assert failure is not None and failure.culprit_rank is None and failure.culprit_nodes == ()
    assert "no rank is singled out" in failure.summary
    stopped = AttemptFacts(Trigger.HANG, (RankOutcome(0, "a", None),
                                          RankOutcome(1, "b", None, stopped=True)))
    failure = analyze(stopped)
    assert failure is not None and failure.culprit_rank == 1


PYSPY_DDP_WAITING = '''Process 22967: python quiet_ddp.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 22967 (idle): "MainThread"
    _engine_run_backward (torch/autograd/graph.py:979)
    backward (torch/autograd/__init__.py:395)
    Tensor.backward (torch/_tensor.py:623)
    main (quiet_ddp.py:78)
    <module> (quiet_ddp.py:90)
'''
PYSPY_SLEEPING = '''Process 22962: python quiet_ddp.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 22962 (idle): "MainThread"
    fault (quiet_ddp.py:38)
    main (quiet_ddp.py:73)
    <module> (quiet_ddp.py:90)
'''


def test_ddp_waiting_for_gradients_in_backward_is_a_collective_wait() -> None:
    from trainguard.trace.hang import RankPlace, localize_hang, stack_collective

    assert stack_collective(PYSPY_DDP_WAITING) == "all_reduce"
    busy = PYSPY_DDP_WAITING.replace("(idle)", "(active)")
    assert stack_collective(busy) is None  # computing the backward pass, not waiting
    places = {0: RankPlace(0, "a", stack=PYSPY_DDP_WAITING), 1: RankPlace(1, "b",
                                                                          stack=PYSPY_SLEEPING)}
    diag = localize_hang({0: None, 1: None}, places)
    assert [c.rank for c in diag.culprits] == [1]
