"""The decision policy, as a table: failure + chain state -> verdict, nodes, exclusions."""

from __future__ import annotations

import pytest

from trainguard.recover.failure import Failure, FailureKind, Implication
from trainguard.recover.narrate import stop_message
from trainguard.recover.policy import ChainState, Verdict, decide, implicated_after
from trainguard.recover.spec import RetryPolicy
from trainguard.taxonomy import Category

POLICY = RetryPolicy(max_retries=5, backoff_s=1.0, backoff_max_s=8.0)
NODES = ("n1", "n2", "n3")


def crash(category: Category, node: str = "n2", **kw: object) -> Failure:
    return Failure(FailureKind.CRASH, category, f"{category.value} on {node}",
                   culprit_nodes=(node,), culprit_rank=2, **kw)  # type: ignore[arg-type]


def hw(node: str = "n2") -> Failure:
    return Failure(FailureKind.NODE, Category.GPU_HARDWARE, "XID 79", culprit_nodes=(node,),
                   node_fault=True)


CASES = [
    # (id, failure, state, verdict, next_nodes, excluded)
    ("hardware->spare", hw(), ChainState(NODES, ("n4",), 3), Verdict.EXCLUDE,
     ("n1", "n4", "n3"), ("n2",)),
    ("hardware, no spare, may shrink", hw(), ChainState(NODES, (), 2), Verdict.EXCLUDE,
     ("n1", "n3"), ("n2",)),
    ("hardware, no spare, cannot shrink", hw(), ChainState(NODES, (), 3), Verdict.STOP,
     (), ("n2",)),
    ("crash without evidence: same nodes", crash(Category.UNKNOWN),
     ChainState(NODES, ("n4",), 3), Verdict.RETRY, NODES, ()),
    ("crashes without evidence never exclude the node", crash(Category.UNKNOWN),
     ChainState(NODES, ("n4",), 3, retries_used=2,
                history=(crash(Category.UNKNOWN), crash(Category.UNKNOWN))),
     Verdict.RETRY, NODES, ()),
    ("network error twice on one node: exclude it", crash(Category.NETWORK_IB),
     ChainState(NODES, ("n4",), 3, retries_used=1, history=(crash(Category.NETWORK_IB),),
                implicated={"n2": 1}), Verdict.EXCLUDE, ("n1", "n4", "n3"), ("n2",)),
    ("network error on another node: not yet", crash(Category.NETWORK_IB, node="n3"),
     ChainState(NODES, ("n4",), 3, retries_used=1, history=(crash(Category.NETWORK_IB),),
                implicated={"n2": 1}), Verdict.RETRY, NODES, ()),
    ("hang twice on one node: exclude it",
     Failure(FailureKind.HANG, Category.NCCL_TIMEOUT_HANG, "hang", culprit_nodes=("n2",)),
     ChainState(NODES, ("n4",), 3, retries_used=1, implicated={"n2": 1}),
     Verdict.EXCLUDE, ("n1", "n4", "n3"), ("n2",)),
    ("full disk: stop at once, exclude nothing",
     crash(Category.STORAGE_IO, storage_exhausted=True),
     ChainState(NODES, ("n4", "n5"), 3), Verdict.STOP, (), ()),
    ("full disk on the second attempt: still no exclusion",
     crash(Category.STORAGE_IO, storage_exhausted=True),
     ChainState(NODES, ("n4", "n5"), 3, retries_used=1, implicated={"n2": 1},
                history=(crash(Category.STORAGE_IO),)), Verdict.STOP, (), ()),
    ("storage I/O error: confirm on the same nodes", crash(Category.STORAGE_IO),
     ChainState(NODES, ("n4",), 3), Verdict.RETRY, NODES, ()),
    ("storage I/O error confirmed: stop, exclude nothing", crash(Category.STORAGE_IO),
     ChainState(NODES, ("n4",), 3, retries_used=1, history=(crash(Category.STORAGE_IO),)),
     Verdict.STOP, (), ()),
    ("user error: one confirming retry", crash(Category.USER_CODE_ERROR),
     ChainState(NODES, ("n4",), 3), Verdict.RETRY, NODES, ()),
    ("user error confirmed: stop", crash(Category.USER_CODE_ERROR),
     ChainState(NODES, ("n4",), 3, retries_used=1,
                history=(crash(Category.USER_CODE_ERROR),)), Verdict.STOP, (), ()),
    ("user errors never implicate the node", crash(Category.USER_CODE_ERROR),
     ChainState(NODES, ("n4",), 3, implicated={"n2": 1}), Verdict.RETRY, NODES, ()),
    ("GPU OOM is configuration: confirm then stop", crash(Category.OOM_GPU),
     ChainState(NODES, (), 3, retries_used=1, history=(crash(Category.OOM_GPU),)),
     Verdict.STOP, (), ()),
    ("CUDA error twice on one node: exclude it", crash(Category.CUDA_SOFTWARE_BUG),
     ChainState(NODES, ("n4",), 3, retries_used=1,
                history=(crash(Category.CUDA_SOFTWARE_BUG),), implicated={"n2": 1}),
     Verdict.EXCLUDE, ("n1", "n4", "n3"), ("n2",)),
    ("CUDA error on two nodes: a bug", crash(Category.CUDA_SOFTWARE_BUG, node="n3"),
     ChainState(NODES, ("n4",), 3, retries_used=1,
                history=(crash(Category.CUDA_SOFTWARE_BUG),), implicated={"n2": 1}),
     Verdict.STOP, (), ()),
    ("hang: same nodes", Failure(FailureKind.HANG, Category.NCCL_TIMEOUT_HANG, "hang",
                                 culprit_nodes=("n3",), culprit_rank=5),
     ChainState(NODES, ("n4",), 3), Verdict.RETRY, NODES, ()),
    ("budget spent", crash(Category.UNKNOWN),
     ChainState(NODES, ("n4",), 3, retries_used=5), Verdict.STOP, (), ()),
    ("budget beats hardware", hw(), ChainState(NODES, ("n4",), 3, retries_used=5),
     Verdict.STOP, (), ()),
    ("cancel", Failure(FailureKind.CANCELLED, Category.UNKNOWN, "cancelled"),
     ChainState(NODES, ("n4",), 3), Verdict.STOP, (), ()),
    ("NaN: roll back", Failure(FailureKind.NONFINITE, Category.NUMERICAL_NAN, "nan", step=31),
     ChainState(NODES, (), 3, checkpoint_steps=(10, 20, 30)), Verdict.ROLLBACK, NODES, ()),
    ("NaN after too many rollbacks", Failure(FailureKind.NONFINITE, Category.NUMERICAL_NAN,
                                             "nan", step=31),
     ChainState(NODES, (), 3, rollbacks_used=2, checkpoint_steps=(10, 20, 30)),
     Verdict.STOP, (), ()),
]


@pytest.mark.parametrize(("failure", "state", "verdict", "nodes", "excluded"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decision_table(failure: Failure, state: ChainState, verdict: Verdict,
                        nodes: tuple[str, ...], excluded: tuple[str, ...]) -> None:
    d = decide(failure, state, POLICY)
    assert d.verdict is verdict, d.reason
    assert d.next_nodes == nodes
    assert d.excluded == excluded
    assert d.reason


@pytest.mark.parametrize(("steps", "limit", "nan_step", "target"), [
    ((10, 20, 30), None, 31, 20),     # skip the newest checkpoint before the NaN
    ((10, 20, 30), 20, 25, 10),       # a second rollback goes further back
    ((10,), None, 15, 0),             # nothing older: from the start
    ((), None, 3, 0),
    ((10, 20, 30, 40), None, 25, 10),  # checkpoints after the NaN do not count
])
def test_rollback_target(steps: tuple[int, ...], limit: int | None, nan_step: int,
                         target: int) -> None:
    f = Failure(FailureKind.NONFINITE, Category.NUMERICAL_NAN, "nan", step=nan_step)
    d = decide(f, ChainState(NODES, (), 3, checkpoint_steps=steps, resume_max_step=limit),
               POLICY)
    assert d.verdict is Verdict.ROLLBACK
    assert d.resume_max_step == target


def test_corrupt_checkpoint_rolls_back_past_the_newest() -> None:
    f = Failure(FailureKind.CRASH, Category.CHECKPOINT, "bad zip", culprit_nodes=("n1",))
    d = decide(f, ChainState(NODES, (), 3, checkpoint_steps=(10, 20)), POLICY)
    assert (d.verdict, d.resume_max_step) == (Verdict.ROLLBACK, 10)


@pytest.mark.parametrize(("history", "backoff"), [(0, 0.0), (1, 1.0), (2, 2.0), (3, 4.0),
                                                  (5, 8.0)])
def test_first_relaunch_is_immediate_then_backoff_doubles_to_its_cap(history: int,
                                                                    backoff: float) -> None:
    past = tuple(crash(Category.NETWORK_IB, node="n1") for _ in range(history))
    state = ChainState(NODES, (), 3, history=past)
    assert decide(crash(Category.NETWORK_IB, node="n3"), state, POLICY).backoff_s == backoff


def test_retry_keeps_the_rollback_limit() -> None:
    d = decide(crash(Category.NETWORK_IB), ChainState(NODES, (), 3, resume_max_step=20), POLICY)
    assert d.resume_max_step == 20


def test_implicated_counts_only_node_suspect_failures() -> None:
    state = ChainState(NODES, implicated={"n2": 1})
    assert implicated_after(crash(Category.NETWORK_IB), state) == {"n2": 2}
    assert implicated_after(crash(Category.UNKNOWN), state) == {"n2": 1}  # no evidence
    assert implicated_after(crash(Category.STORAGE_IO), state) == {"n2": 1}
    assert implicated_after(crash(Category.USER_CODE_ERROR), state) == {"n2": 1}
    assert implicated_after(hw("n1"), state) == {"n2": 1, "n1": 1}


def test_a_storage_stop_names_the_storage_problem() -> None:
    full = crash(Category.STORAGE_IO, storage_exhausted=True)
    d = decide(full, ChainState(NODES, ("n4",), 3), POLICY)
    assert "storage is full or read-only" in d.reason and "no node excluded" in d.reason
    assert full.summary in stop_message(d, full)  # the final message keeps the failure


def test_a_checkpoint_that_cannot_be_written_is_a_storage_problem_not_a_rollback() -> None:
    from trainguard.evidence.events import FailureEvent
    from trainguard.taxonomy import Action, Severity

    def failure(signature: str) -> Failure:
        ev = FailureEvent(category=Category.CHECKPOINT, action=Action.CHECK_STORAGE,
                          severity=Severity.FATAL, signature=signature, summary=signature)
        return crash(Category.CHECKPOINT, events=(ev,))

    state = ChainState(NODES, ("n4",), 3)
    write = decide(failure("checkpoint_write_failed"), state, POLICY)
    assert "storage" in write.reason and write.excluded == ()
    corrupt = decide(failure("checkpoint_corrupt_zip"), state, POLICY)
    assert corrupt.verdict is not write.verdict or "storage" not in corrupt.reason


def test_repeated_crashes_without_evidence_exclude_no_host_until_the_budget() -> None:
    """The reviewer's case: a teardown abort on every relaunch never burns a healthy host."""
    history: tuple[Failure, ...] = ()
    for used in range(POLICY.max_retries + 1):
        d = decide(crash(Category.UNKNOWN), ChainState(NODES, ("n4",), 3, retries_used=used,
                                                       history=history), POLICY)
        assert d.excluded == ()
        history += (crash(Category.UNKNOWN),)
    assert d.verdict is Verdict.STOP and "budget" in d.reason


def test_every_category_gets_a_decision() -> None:
    for category in Category:
        d = decide(crash(category), ChainState(NODES, ("n4",), 3), POLICY)
        assert d.verdict in Verdict


def _hang(node: str = "n2", **kw: object) -> Failure:
    return Failure(FailureKind.HANG, Category.COLLECTIVE_HANG,
                   f"hang; rank 2 on {node} is the likely culprit", culprit_nodes=(node,),
                   culprit_rank=2, **kw)  # type: ignore[arg-type]


def test_a_suspected_node_is_said_with_how_close_it_is_to_exclusion() -> None:
    d = decide(_hang(), ChainState(NODES, ("n4",), 3), POLICY)
    assert d.verdict is Verdict.RETRY
    assert "no node is implicated" not in d.reason
    assert f"n2 suspected (1 of {POLICY.implicated_limit} implications before exclusion)" \
        in d.reason
    # ... and the count the text gives is the one the chain keeps
    assert implicated_after(_hang(), ChainState(NODES)) == {"n2": 1}


def test_a_failure_that_blames_no_node_says_so_and_counts_nothing() -> None:
    stopped = _hang(blame=Implication.NONE)
    state = ChainState(NODES, ("n4",), 3, implicated={"n2": 1})
    d = decide(stopped, state, POLICY)
    assert d.verdict is Verdict.RETRY and d.excluded == ()
    assert "no node is implicated" in d.reason
    assert implicated_after(stopped, state) == {"n2": 1}


def test_an_injected_fault_is_named_in_the_decision() -> None:
    what = "injected kill of rank 1 (trainguard inject)"
    f = Failure(FailureKind.CRASH, Category.INJECTED_FAULT, "rank 1 on n2: " + what,
                culprit_nodes=("n2",), culprit_rank=1, injected=what, cause=what,
                blame=Implication.NONE)
    d = decide(f, ChainState(NODES, ("n4",), 3, implicated={"n2": 1}), POLICY)
    assert d.reason == f"relaunch on the same nodes ({what}; no node is implicated)"
    assert d.excluded == ()
