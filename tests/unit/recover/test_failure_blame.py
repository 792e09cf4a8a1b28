"""Whom a failure blames (its implication), what a hang is called, and injected faults named as
such: the analysis side of issue #28."""

from __future__ import annotations

import signal

import pytest

from trainguard.evidence.events import FailureEvent
from trainguard.recover.failure import (
    AttemptFacts,
    Failure,
    FailureKind,
    Implication,
    RankOutcome,
    Trigger,
    analyze,
    record_implication,
)
from trainguard.recover.injected import Injection
from trainguard.taxonomy import Action, Category, Severity
from trainguard.trace.hang import RankPlace, localize_hang
from trainguard.trace.model import GroupState, RankState

KILL_1 = Injection("kill", 1, "n1", "trainguard inject")
STOP_1 = Injection("hang", 1, "n1", "--inject hang:rank=1,after=1")


def hang_facts(**kw: object) -> AttemptFacts:
    outs = (RankOutcome(0, "n1", None, last_progress=10.0),
            RankOutcome(1, "n2", None, last_progress=4.0))
    return AttemptFacts(Trigger.HANG, outs, hang_for_s=30.0, **kw)  # type: ignore[arg-type]


def test_a_likely_culprit_from_weak_evidence_is_a_suspect_not_a_fault() -> None:
    f = analyze(hang_facts())
    assert f is not None and f.culprit_rank == 1 and "likely culprit" in f.summary
    assert (f.implication, f.implicated_nodes, f.node_fault) == (
        Implication.SUSPECT, ("n2",), False)
    assert f.to_dict()["implication"] == "suspect"
    assert f.to_dict()["implicated_nodes"] == ["n2"]


def test_a_job_level_hang_names_and_blames_no_node() -> None:
    outs = (RankOutcome(0, "n1", None), RankOutcome(1, "n2", None))
    f = analyze(AttemptFacts(Trigger.HANG, outs))
    assert f is not None and f.culprit_nodes == () and f.implication is Implication.NONE


@pytest.mark.parametrize(("reported", "label"), [
    ("gloo", "collective hang (gloo)"), ("nccl", "collective hang (nccl)"),
    (None, "collective hang (backend unknown)")])
def test_a_hang_is_a_collective_hang_of_its_own_backend(reported: str | None,
                                                        label: str) -> None:
    f = analyze(hang_facts(backend=reported))
    assert f is not None and f.category is Category.COLLECTIVE_HANG
    assert f.summary.startswith(label)
    assert f.backend == (reported or "unknown") and f.to_dict()["backend"] == f.backend
    if reported != "nccl":
        assert "nccl" not in f.summary.lower() and "nccl" not in f.category.value


def test_a_localized_hang_says_its_backend_and_suspects_the_missing_ranks_node() -> None:
    states = {0: RankState(0, {"world": GroupState("world", 5, 4)}, step=9),
              1: RankState(1, {"world": GroupState("world", 4, 4)}, step=9)}
    places = {0: RankPlace(0, "n1"), 1: RankPlace(1, "n2")}
    f = analyze(hang_facts(hang=localize_hang(states, places), backend="gloo"))
    assert f is not None and f.category is Category.COLLECTIVE_HANG and f.backend == "gloo"
    assert f.summary.startswith("collective hang (gloo)") and "never entered" in f.summary
    assert f.implicated_nodes == ("n2",) and f.implication is Implication.SUSPECT


def test_a_hang_in_the_jobs_own_code_is_a_user_code_error_blaming_no_node() -> None:
    states = {0: RankState(0, {"world": GroupState("world", 5, 4)}, step=9),
              1: RankState(1, {"world": GroupState("world", 4, 4)}, step=9)}
    places = {0: RankPlace(0, "n1"), 1: RankPlace(1, "n2")}
    f = analyze(hang_facts(hang=localize_hang(states, places),
                           own_code={1: "train.py:12 in load_batch"}))
    assert f is not None and f.kind is FailureKind.HANG
    assert f.category is Category.USER_CODE_ERROR and f.culprit_rank == 1
    assert "train.py:12 in load_batch" in f.summary
    assert f.implication is Implication.NONE


def test_an_injected_kill_is_named_as_injected_not_unknown() -> None:
    outs = (RankOutcome(0, "n1", -signal.SIGTERM, None),
            RankOutcome(1, "n1", -signal.SIGKILL, 1.0))
    f = analyze(AttemptFacts(Trigger.EXIT, outs, injections=(KILL_1,)))
    assert f is not None and f.category is Category.INJECTED_FAULT
    assert f.cause == f.injected == "injected kill of rank 1 (trainguard inject)"
    assert "unknown" not in f.summary and f.implication is Implication.NONE
    # the same death without the injection stays a crash of unknown cause
    plain = analyze(AttemptFacts(Trigger.EXIT, outs))
    assert plain is not None and plain.category is Category.UNKNOWN and not plain.injected


def test_a_kill_injected_into_another_rank_explains_nothing() -> None:
    outs = (RankOutcome(0, "n1", -signal.SIGKILL, 1.0), RankOutcome(1, "n1", 0, 2.0))
    f = analyze(AttemptFacts(Trigger.EXIT, outs, injections=(KILL_1,)))
    assert f is not None and f.category is Category.UNKNOWN and not f.injected


def test_an_injected_stop_is_the_cause_of_the_hang() -> None:
    outs = (RankOutcome(0, "n1", None, last_progress=10.0),
            RankOutcome(1, "n1", None, stopped=True, last_progress=4.0))
    f = analyze(AttemptFacts(Trigger.HANG, outs, hang_for_s=3.0, injections=(STOP_1,)))
    assert f is not None and (f.kind, f.category) == (FailureKind.HANG, Category.INJECTED_FAULT)
    assert "injected hang of rank 1 (--inject hang:rank=1,after=1)" in f.summary
    assert "SIGSTOP" in f.summary and f.implication is Implication.NONE


def test_an_injected_exception_keeps_its_category_and_says_it_was_injected() -> None:
    exc = FailureEvent(category=Category.USER_CODE_ERROR, action=Action.FIX_CODE,
                       severity=Severity.FATAL, signature="python_exception",
                       summary="RuntimeError: trainguard injected exception at step 5")
    outs = (RankOutcome(0, "n1", 1, 1.0), RankOutcome(1, "n1", -signal.SIGTERM, None))
    inj = Injection("exception", 0, "n1", "--inject exception:step=5")
    f = analyze(AttemptFacts(Trigger.EXIT, outs, rank_events={0: (exc,)}, injections=(inj,)))
    assert f is not None and f.category is Category.USER_CODE_ERROR
    assert f.injected == "injected exception of rank 0 (--inject exception:step=5)"


def test_an_injected_xid_still_takes_the_node_out_and_says_it_was_injected() -> None:
    xid = FailureEvent(category=Category.GPU_HARDWARE, action=Action.REBOOT_NODE,
                       severity=Severity.FATAL, signature="xid", summary="XID 79", host="n2")
    outs = (RankOutcome(0, "n1", None), RankOutcome(1, "n2", None))
    inj = Injection("xid", None, "n2", "trainguard inject")
    f = analyze(AttemptFacts(Trigger.NODE_EVIDENCE, outs, node_events={"n2": (xid,)},
                             injections=(inj,)))
    assert f is not None and f.node_fault and f.implication is Implication.FAULT
    assert f.category is Category.GPU_HARDWARE and f.injected == "injected xid on n2 " \
        "(trainguard inject)"


@pytest.mark.parametrize(("record", "expected"), [
    # records of this version say it
    ({"implication": "suspect", "culprit_nodes": ["n2"], "implicated_nodes": ["n2"]},
     (Implication.SUSPECT, ("n2",))),
    ({"implication": "none", "culprit_nodes": ["n2"], "implicated_nodes": []},
     (Implication.NONE, ())),
    # older records: by category; a hang's culprit is never more than a suspect
    ({"category": "nccl_timeout_hang", "culprit_nodes": ["n2"]}, (Implication.SUSPECT, ("n2",))),
    ({"category": "gpu_hardware", "culprit_nodes": ["n2"], "node_fault": True},
     (Implication.FAULT, ("n2",))),
    ({"category": "unknown", "culprit_nodes": ["n2"]}, (Implication.NONE, ())),
    ({"category": "collective_hang", "culprit_nodes": []}, (Implication.NONE, ())),
])
def test_record_implication(record: dict[str, object],
                            expected: tuple[Implication, tuple[str, ...]]) -> None:
    assert record_implication(record) == expected


def test_a_recorded_failure_reads_back_as_it_was_decided() -> None:
    f = Failure(FailureKind.HANG, Category.COLLECTIVE_HANG, "s", culprit_nodes=("n2",),
                blame=Implication.NONE)
    assert record_implication(f.to_dict()) == (Implication.NONE, ())


def test_a_hang_behind_an_injected_slowdown_is_injected() -> None:
    slow = Injection("slow", 1, "n2", "--inject slow:rank=1,step=10,delay=60")
    f = analyze(hang_facts(injections=(slow,), backend="gloo"))
    assert f is not None and f.category is Category.INJECTED_FAULT and f.culprit_rank == 1
    assert f.injected == "injected slow of rank 1 (--inject slow:rank=1,step=10,delay=60)"
    assert f.injected in f.summary and f.implication is Implication.NONE
    # a slowdown of another rank explains nothing
    other = analyze(hang_facts(injections=(Injection("slow", 0, "n1"),)))
    assert other is not None and other.category is Category.COLLECTIVE_HANG


def test_no_log_signature_claims_a_supervisor_diagnosis() -> None:
    from trainguard.evidence.rules import load_rules
    from trainguard.taxonomy import SUPERVISOR_CATEGORIES

    rules = load_rules().by_id.values()
    assert rules and not [r for r in rules if r.category in SUPERVISOR_CATEGORIES]
