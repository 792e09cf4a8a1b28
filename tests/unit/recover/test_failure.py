"""Failure analysis: which rank and node is the culprit, and what category."""

from __future__ import annotations

import signal

from trainguard.evidence.events import FailureEvent
from trainguard.recover.failure import AttemptFacts, FailureKind, RankOutcome, Trigger, analyze
from trainguard.taxonomy import Action, Category, Severity


def ev(category: Category, action: Action = Action.NONE, severity: Severity = Severity.FATAL,
       summary: str = "x", host: str | None = None) -> FailureEvent:
    return FailureEvent(category=category, action=action, severity=severity, signature="t",
                        summary=summary, host=host)


def outcomes(*codes: int | None, exited: tuple[float | None, ...] | None = None
             ) -> tuple[RankOutcome, ...]:
    exited = exited or tuple(None if c is None else 1.0 for c in codes)
    return tuple(RankOutcome(r, f"n{r // 2 + 1}", c, exited[r]) for r, c in enumerate(codes))


def test_success_is_no_failure() -> None:
    assert analyze(AttemptFacts(Trigger.SUCCESS, outcomes(0, 0))) is None


def test_first_rank_to_die_is_the_culprit_and_others_are_consequences() -> None:
    outs = outcomes(1, -signal.SIGKILL, 1, 1, exited=(5.0, 2.0, 5.0, 5.0))
    net = ev(Category.NETWORK_IB, summary="Connection closed by peer")
    f = analyze(AttemptFacts(Trigger.EXIT, outs, rank_events={0: (net,), 2: (net,)}))
    assert f is not None
    assert (f.kind, f.culprit_rank, f.culprit_nodes) == (FailureKind.CRASH, 1, ("n1",))
    assert f.category is Category.UNKNOWN  # killed without evidence, not "network"
    assert "SIGKILL" in f.summary
    assert net in f.events


def test_the_culprits_own_evidence_names_the_exception() -> None:
    exc = FailureEvent(category=Category.USER_CODE_ERROR, action=Action.FIX_CODE,
                       severity=Severity.FATAL, signature="python_exception",
                       summary="ValueError: bad lr", fields=(("last_frame", "train.py:3 in f"),))
    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(1, 1), rank_events={0: (exc,), 1: (exc,)}))
    assert f is not None and f.category is Category.USER_CODE_ERROR
    assert "ValueError: bad lr" in f.summary and "train.py:3" in f.summary


def test_kernel_oom_kill_explains_a_sigkill() -> None:
    oom = ev(Category.OOM_HOST, Action.FIX_CONFIG, summary="Out of memory: Killed process")
    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(0, -9), node_events={"n1": (oom,)}))
    assert f is not None and f.category is Category.OOM_HOST and not f.node_fault


def test_node_evidence_wins_over_running_ranks() -> None:
    xid = ev(Category.GPU_HARDWARE, Action.REBOOT_NODE, summary="XID 79", host="n2")
    f = analyze(AttemptFacts(Trigger.NODE_EVIDENCE, outcomes(None, None, None, None),
                             node_events={"n2": (xid,)}))
    assert f is not None
    assert (f.kind, f.category, f.culprit_nodes, f.node_fault) == (
        FailureKind.NODE, Category.GPU_HARDWARE, ("n2",), True)


def test_non_fatal_node_evidence_does_not_take_the_node_out() -> None:
    soft = ev(Category.GPU_MEMORY_ECC, Action.RESTART_JOB, Severity.NON_FATAL, host="n2")
    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(0, 0, 1, 0), node_events={"n2": (soft,)}))
    assert f is not None and not f.node_fault and f.culprit_nodes == ("n2",)


def test_evidence_on_a_node_outside_the_attempt_is_ignored() -> None:
    xid = ev(Category.GPU_HARDWARE, Action.REBOOT_NODE)
    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(1, 0), node_events={"n9": (xid,)}))
    assert f is not None and f.kind is FailureKind.CRASH


def test_hang_names_the_stopped_rank() -> None:
    outs = (RankOutcome(0, "n1", None, last_step=40), RankOutcome(1, "n1", None, last_step=40),
            RankOutcome(2, "n2", None, stopped=True, last_step=40))
    f = analyze(AttemptFacts(Trigger.HANG, outs, hang_for_s=31.0))
    assert f is not None
    assert (f.kind, f.category, f.culprit_rank, f.culprit_nodes) == (
        FailureKind.HANG, Category.NCCL_TIMEOUT_HANG, 2, ("n2",))


def test_hang_names_the_rank_behind() -> None:
    outs = (RankOutcome(0, "n1", None, last_step=41), RankOutcome(1, "n2", None, last_step=39))
    f = analyze(AttemptFacts(Trigger.HANG, outs))
    assert f is not None and f.culprit_rank == 1


def test_hang_without_steps_names_the_oldest_progress() -> None:
    outs = (RankOutcome(0, "n1", None, last_progress=10.0),
            RankOutcome(1, "n2", None, last_progress=4.0))
    f = analyze(AttemptFacts(Trigger.HANG, outs))
    assert f is not None and f.culprit_rank == 1


def test_nonfinite_loss_is_numerical() -> None:
    f = analyze(AttemptFacts(Trigger.NONFINITE, outcomes(1, 0), nonfinite=(0, 31, "nan")))
    assert f is not None
    assert (f.category, f.step, f.node_fault) == (Category.NUMERICAL_NAN, 31, False)


def test_cancel_wins() -> None:
    xid = ev(Category.GPU_HARDWARE, Action.REBOOT_NODE)
    f = analyze(AttemptFacts(Trigger.CANCEL, outcomes(None), node_events={"n1": (xid,)}))
    assert f is not None and f.kind is FailureKind.CANCELLED


def test_segfault_without_evidence_is_a_software_crash() -> None:
    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(-signal.SIGSEGV, 0)))
    assert f is not None and f.category is Category.CUDA_SOFTWARE_BUG
