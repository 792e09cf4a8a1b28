"""Failure analysis: which rank and node is the culprit, and what category."""

from __future__ import annotations

import signal

import pytest

from trainguard.evidence.events import FailureEvent
from trainguard.recover.failure import (
    STORAGE_EXHAUSTED_SIGNATURES,
    AttemptFacts,
    FailureKind,
    Implication,
    RankOutcome,
    Trigger,
    analyze,
    may_be_teardown,
    teardown_crash,
    teardown_note,
)
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


def test_hang_names_the_stopped_rank_without_blaming_its_node() -> None:
    outs = (RankOutcome(0, "n1", None, last_step=40), RankOutcome(1, "n1", None, last_step=40),
            RankOutcome(2, "n2", None, stopped=True, last_step=40))
    f = analyze(AttemptFacts(Trigger.HANG, outs, hang_for_s=31.0))
    assert f is not None
    assert (f.kind, f.category, f.culprit_rank, f.culprit_nodes) == (
        FailureKind.HANG, Category.COLLECTIVE_HANG, 2, ("n2",))
    # something outside the job stopped it: named, but its node is not to blame
    assert "SIGSTOP" in f.summary and "likely culprit" not in f.summary
    assert f.implication is Implication.NONE and f.implicated_nodes == ()


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


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL])
def test_a_crash_signal_without_evidence_is_a_crash_of_unknown_cause(sig: int) -> None:
    # rank 1 was still running (stopped by the supervisor): the work was not done
    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(-sig, -signal.SIGTERM,
                                                    exited=(1.0, None))))
    assert f is not None and f.category is Category.UNKNOWN  # not "cuda_software_bug"
    assert (f.culprit_rank, f.node_fault) == (0, False)
    assert signal.Signals(sig).name in f.summary and "no evidence" in f.summary


@pytest.mark.parametrize("line", [
    "Error: worker subprocess exited with code 139",
    "task 0 (pid 4242) exited with exit code 134",
])
def test_a_printed_exit_status_is_no_more_evidence_than_the_ranks_own_signal(line: str) -> None:
    # The evidence rules read the signal behind a printed status as a hint (signals.py); like
    # the rank's own signal, it says nothing about the host.
    from trainguard.evidence import load_rules
    from trainguard.evidence.classify import LineContext, classify_line
    from trainguard.evidence.lineparse import parse_prefix

    hint = classify_line(load_rules(), line, LineContext("rank0.log", 1, parse_prefix(line, 2026)))
    assert hint is not None and hint.category is Category.CUDA_SOFTWARE_BUG

    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(-signal.SIGSEGV, -signal.SIGTERM,
                                                    exited=(1.0, None)),
                             rank_events={0: (hint,)}))
    assert f is not None and f.category is Category.UNKNOWN
    assert f.implication is Implication.NONE


def test_an_abort_after_every_peer_exited_0_is_a_teardown_crash() -> None:
    facts = AttemptFacts(Trigger.EXIT, outcomes(0, -signal.SIGABRT, 0, 0,
                                                exited=(2.0, 1.0, 2.1, 2.2)))
    assert analyze(facts) is None
    (crash,) = teardown_crash(facts)
    assert (crash.rank, crash.node, crash.why_done) == (1, "n1", "every other rank exited 0")
    assert teardown_note((crash,)) == "completed; teardown crash of rank 1 on n1 (SIGABRT)"


@pytest.mark.parametrize(("codes", "exited"), [
    ((0, -signal.SIGABRT, -signal.SIGTERM), (2.0, 1.0, None)),  # a peer had to be stopped
    ((0, -signal.SIGABRT, 1), (2.0, 1.0, 1.5)),                 # a peer failed too
    ((0, -signal.SIGKILL, 0), (2.0, 1.0, 2.0)),                 # killed from outside
    ((0, 1, 0), (2.0, 1.0, 2.0)),                               # an error exit, no SDK
    ((0, -signal.SIGABRT), (2.0, 1.0)),                         # ... but see below: done
])
def test_not_a_teardown_crash_unless_the_work_is_shown_done(
        codes: tuple[int, ...], exited: tuple[float | None, ...]) -> None:
    facts = AttemptFacts(Trigger.EXIT, outcomes(*codes, exited=exited))
    done = codes == (0, -signal.SIGABRT)
    assert bool(teardown_crash(facts)) is done
    f = analyze(facts)
    assert (f is None) is done
    if f is not None:
        assert f.kind is FailureKind.CRASH and f.culprit_rank == 1


@pytest.mark.parametrize(("code", "finished", "maybe"), [
    (-signal.SIGABRT, False, True), (-signal.SIGSEGV, False, True),
    (-signal.SIGKILL, False, False), (-signal.SIGTERM, False, False), (1, False, False),
    (-signal.SIGKILL, True, True), (1, True, True),
    (128 + signal.SIGABRT, False, True), (128 + signal.SIGSEGV, False, True),  # via bash -c
    (128 + signal.SIGKILL, False, False), (128 + signal.SIGTERM, False, False), (2, False, False)])
def test_which_exits_may_be_a_teardown_crash(code: int, finished: bool, maybe: bool) -> None:
    assert may_be_teardown(code, finished) is maybe


def test_a_crash_of_every_rank_is_not_a_teardown_crash() -> None:
    facts = AttemptFacts(Trigger.EXIT, outcomes(-signal.SIGABRT, -signal.SIGABRT))
    assert teardown_crash(facts) == () and analyze(facts) is not None


def test_a_rank_that_reported_finish_crashes_in_teardown() -> None:
    # SDK: rank 0 reported finish() then died by its own exit code; rank 1 finished too and
    # was still in teardown when stopped: the work was done.
    outs = (RankOutcome(0, "n1", 1, 1.0, finished=True),
            RankOutcome(1, "n1", -signal.SIGTERM, None, finished=True))
    facts = AttemptFacts(Trigger.EXIT, outs)
    assert analyze(facts) is None
    (crash,) = teardown_crash(facts)
    assert crash.why_done == "it reported finish() before crashing"
    # ... but not when a peer had not finished
    outs = (outs[0], RankOutcome(1, "n1", -signal.SIGTERM, None, finished=False))
    assert analyze(AttemptFacts(Trigger.EXIT, outs)) is not None


def test_node_evidence_beats_a_teardown_reading() -> None:
    xid = ev(Category.GPU_HARDWARE, Action.REBOOT_NODE)
    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(0, -signal.SIGABRT),
                             node_events={"n1": (xid,)}))
    assert f is not None and f.kind is FailureKind.NODE


@pytest.mark.parametrize(("signature", "exhausted"), [
    ("no_space_left", True), ("read_only_filesystem", True), ("io_error", False),
    ("checkpoint_write_failed", False)])
def test_a_full_filesystem_is_marked_storage_exhausted(signature: str, exhausted: bool) -> None:
    full = FailureEvent(category=Category.STORAGE_IO, action=Action.CHECK_STORAGE,
                        severity=Severity.FATAL, signature=signature, summary="disk")
    f = analyze(AttemptFacts(Trigger.EXIT, outcomes(1, -signal.SIGTERM, exited=(1.0, None)),
                             rank_events={0: (full,)}))
    assert f is not None and f.category is Category.STORAGE_IO
    assert f.storage_exhausted is exhausted and f.to_dict()["storage_exhausted"] is exhausted


def test_the_storage_exhausted_signatures_are_in_the_catalogue() -> None:
    from trainguard.evidence.rules import load_rules

    ids = set(load_rules().by_id)
    assert "no_space_left" in ids
    # read_only_filesystem is asked of the catalogue (EROFS split from io_error); until it is
    # there EROFS is a generic storage error: confirmed once, then the chain stops.
    assert STORAGE_EXHAUSTED_SIGNATURES - ids <= {"read_only_filesystem"}
