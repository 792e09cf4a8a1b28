"""The supervisor's status lines: each fact once, no enum values, no doubled punctuation."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from trainguard.recover.failure import (
    AttemptFacts,
    Failure,
    FailureKind,
    RankOutcome,
    Trigger,
    analyze,
)
from trainguard.recover.injected import Injection
from trainguard.recover.narrate import decision_line, failed_line, final_line, stop_message
from trainguard.recover.policy import ChainState, Decision, Verdict, decide
from trainguard.recover.records import RunResult
from trainguard.recover.spec import RetryPolicy, job_name
from trainguard.taxonomy import Category


def test_a_crash_without_evidence_says_so_without_repeating_the_exit() -> None:
    f = Failure(FailureKind.CRASH, Category.UNKNOWN,
                "rank 1 on node1: killed by SIGKILL (no evidence of the cause)", ("node1",), 1)
    line = failed_line(0, f)
    assert line.startswith("attempt 0 failed: rank 1 on node1, cause unknown")
    assert "SIGKILL" not in line  # the exit was said when it happened


def test_a_crash_with_evidence_names_the_cause() -> None:
    f = Failure(FailureKind.CRASH, Category.USER_CODE_ERROR, "summary", ("n2",), 3,
                cause="ValueError: bad shape")
    assert failed_line(2, f) == "attempt 2 failed: rank 3 on n2: ValueError: bad shape"


def test_decisions_have_no_enum_prefix() -> None:
    line = decision_line(Decision(Verdict.RETRY, "relaunch on the same nodes (x)"))
    assert line == "decision: relaunch on the same nodes (x)"


def _result(status: str, message: str, attempts: int = 3) -> RunResult:
    return RunResult(status, message, tuple([object()] * attempts),  # type: ignore[arg-type]
                     (), Path("/r"))


def test_final_line_says_the_attempt_count_once() -> None:
    line = final_line(_result("succeeded", "job succeeded after 3 attempts"), Path("/r/s.json"))
    assert line == "job succeeded after 3 attempts; excluded: none; summary: /r/s.json"
    assert line.count("attempt") == 1


def test_final_line_keeps_a_teardown_note_and_a_failure_reason() -> None:
    note = final_line(_result("succeeded", "rank 1 crashed in teardown; job succeeded after 1 "
                              "attempt", 1), Path("s"))
    assert note.startswith("job succeeded after 1 attempt: rank 1 crashed in teardown;")
    failed = final_line(_result("failed", "the retry budget is spent; last failure: x", 2),
                        Path("s"))
    assert failed.startswith("job failed after 2 attempts: the retry budget is spent; last")


def test_a_stop_keeps_the_last_failure_in_the_final_message_only() -> None:
    f = Failure(FailureKind.CRASH, Category.UNKNOWN, "rank 1 on n1: exit code 1")
    d = Decision(Verdict.STOP, "stop: the retry budget (2 relaunches) is spent")
    assert stop_message(d, f) == ("the retry budget (2 relaunches) is spent; last failure: "
                                  "rank 1 on n1: exit code 1")
    assert "last failure" not in decision_line(d)


@pytest.mark.parametrize(("command", "name"), [
    (["python", "examples/train_gpt.py", "--loss-log", "demo/loss.txt"], "train_gpt"),
    (["/venv/bin/python3.11", "-u", "train.py", "--out", "x.json"], "train"),
    (["torchrun", "--nproc-per-node", "2", "pretrain.py"], "pretrain"),
    (["python", "-m", "megatron.training.pretrain_gpt", "--data", "d.bin"], "pretrain_gpt"),
    (["env", "OMP_NUM_THREADS=1", "python", "fit.py"], "fit"),
    (["bash", "launch.sh", "cfg.yaml"], "launch"),
    (["./my_trainer", "--config", "c.yaml"], "my_trainer"),
    ([], "job"),
])
def test_a_run_is_named_after_its_script(command: list[str], name: str) -> None:
    assert job_name(command) == name


def _story(facts: AttemptFacts) -> tuple[str, str]:
    failure = analyze(facts)
    assert failure is not None
    decision = decide(failure, ChainState(("n1", "n2"), (), 2), RetryPolicy())
    return failed_line(0, failure), decision_line(decision)


def test_a_hangs_likely_culprit_and_the_decision_tell_one_story() -> None:
    outs = (RankOutcome(0, "n1", None, last_progress=10.0),
            RankOutcome(1, "n2", None, last_progress=4.0))
    failed, decided = _story(AttemptFacts(Trigger.HANG, outs, hang_for_s=30.0))
    assert "rank 1 on n2 is the likely culprit" in failed
    assert "no node is implicated" not in decided and "n2 suspected" in decided


def test_a_hang_that_blames_no_node_names_no_culprit() -> None:
    outs = (RankOutcome(0, "n1", None), RankOutcome(1, "n2", None, stopped=True))
    failed, decided = _story(AttemptFacts(Trigger.HANG, outs, hang_for_s=30.0))
    assert "culprit" not in failed and "no node is implicated" in decided


def test_an_injected_kill_is_not_a_cause_unknown() -> None:
    outs = (RankOutcome(0, "n1", -signal.SIGTERM), RankOutcome(1, "n2", -signal.SIGKILL, 1.0))
    failed, decided = _story(AttemptFacts(Trigger.EXIT, outs, injections=(
        Injection("kill", 1, "n2", "trainguard inject"),)))
    assert failed == ("attempt 0 failed: rank 1 on n2: injected kill of rank 1 "
                      "(trainguard inject)")
    assert "cause unknown" not in failed + decided
    assert "injected kill of rank 1 (trainguard inject); no node is implicated" in decided
