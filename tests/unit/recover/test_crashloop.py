"""Crash loops: the rule on step sequences, its place among the policy's rules, and its knob."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.errors import ConfigError
from trainguard.recover.chain import Chain, decide_next
from trainguard.recover.crashloop import (
    CrashLoop,
    failures_in_a_row,
    find_crash_loop,
    is_crash_loop_stop,
)
from trainguard.recover.failure import Failure, FailureKind
from trainguard.recover.narrate import stop_message
from trainguard.recover.policy import RULES, ChainState, Verdict, decide
from trainguard.recover.records import AttemptResult
from trainguard.recover.spec import JobSpec, RetryPolicy
from trainguard.taxonomy import Category

NODES = ("n1", "n2")


def plain_loop(steps: tuple[int | None, ...], n: int) -> bool:
    """The rule written out a second way: every one of the last ``n`` attempts reported no
    step above the highest step of all attempts before it, and at least one of those earlier
    attempts reported a step."""
    if n <= 0 or len(steps) <= n:
        return False
    for i in range(len(steps) - n, len(steps)):
        earlier = [s for s in steps[:i] if s is not None]
        if not earlier:
            return False
        s = steps[i]
        if s is not None and s > max(earlier):
            return False
    return True


@pytest.mark.parametrize(("steps", "n", "loop"), [
    ((41, 41, 41, 41), 3, True),              # the same step four times: 3 restarts, no progress
    ((41, 41, 41), 3, False),                 # only 2 restarts so far
    ((41, 41, 42, 42), 3, False),             # attempt 2 advanced
    ((10, 41, 41, 41, 41), 3, True),          # progress first, then the loop
    ((41, 30, 35, 41), 3, True),              # rolled back and never got past 41
    ((41, None, None, None), 3, True),        # restarts that died before their first step
    ((None, None, None, None), 3, False),     # no SDK: unknown progress is not a loop
    ((None, 41, 41, 41), 3, False),           # attempt 1 is the first to report a step
    ((None, 41, 41, 41, 41), 3, True),
    ((41, 41), 1, True),
    ((41, 41, 41, 41, 41, 41), 0, False),     # 0: off
    ((41, 50, 41, 41), 3, False),             # best before attempts 2, 3 is 50, but 1 advanced
    ((41, 50, 41, 41, 41), 3, True),          # best step 50, 3 restarts below it
])
def test_rule_table(steps: tuple[int | None, ...], n: int, loop: bool) -> None:
    found = find_crash_loop(steps, n)
    assert (found is not None) == loop == plain_loop(steps, n)
    if found is not None:
        assert found.restarts == n
        assert found.attempts == tuple(range(len(steps) - n, len(steps)))
        assert found.steps == steps[-n:]
        assert found.best_step == max(s for s in steps[:-n] if s is not None)


def test_rule_agrees_with_plain_rule_on_every_short_sequence() -> None:
    values = (None, 1, 2, 3)
    seqs: list[tuple[int | None, ...]] = [()]
    for _ in range(5):
        seqs = [(*s, v) for s in seqs for v in values]
        for seq in seqs:
            for n in range(0, 5):
                assert (find_crash_loop(seq, n) is not None) == plain_loop(seq, n), (seq, n)


@pytest.mark.parametrize(("loop", "text"), [
    (CrashLoop(41, (1, 2, 3), (41, 41, 41)),
     "crash loop: 3 restarts made no progress (best step 41, reached again by attempts 1, 2 "
     "and 3)"),
    (CrashLoop(41, (4,), (41,)),
     "crash loop: 1 restart made no progress (best step 41, reached again by attempt 4)"),
    (CrashLoop(41, (1, 2, 3), (38, None, 41)),
     "crash loop: 3 restarts made no progress (best step 41; attempts 1, 2 and 3 stopped at: "
     "step 38, before its first step and step 41)"),
])
def test_verdict_names_step_and_count(loop: CrashLoop, text: str) -> None:
    assert loop.message == text


def _crash(node: str = "n2", **kw: object) -> Failure:
    return Failure(FailureKind.CRASH, Category.UNKNOWN, f"rank 2 on {node} exited",
                   culprit_nodes=(node,), culprit_rank=2, **kw)  # type: ignore[arg-type]


def _state(steps: tuple[int | None, ...], **kw: object) -> ChainState:
    return ChainState(NODES, ("n3",), 2, retries_used=len(steps) - 1,
                      attempt_steps=steps, **kw)  # type: ignore[arg-type]


def test_policy_stops_a_crash_loop_with_a_recorded_verdict() -> None:
    d = decide(_crash(), _state((41, 41, 41, 41)), RetryPolicy(max_retries=10))
    assert d.verdict is Verdict.STOP
    assert d.crash_loop == CrashLoop(41, (1, 2, 3), (41, 41, 41))
    assert d.reason == f"stop: {d.crash_loop.message}"
    assert d.to_dict()["crash_loop"] == {"best_step": 41, "attempts": [1, 2, 3],
                                         "steps": [41, 41, 41], "restarts": 3}
    assert is_crash_loop_stop(d.to_dict())
    assert stop_message(d, _crash()).startswith("crash loop: 3 restarts made no progress")


def test_policy_retries_while_restarts_progress_or_progress_is_unknown() -> None:
    policy = RetryPolicy(max_retries=10)
    for steps in ((41, 41, 42, 42), (None, None, None, None), (41, 41, 41)):
        d = decide(_crash(), _state(steps), policy)
        assert d.verdict is Verdict.RETRY and d.crash_loop is None
        assert not is_crash_loop_stop(d.to_dict())


def test_zero_turns_the_rule_off() -> None:
    d = decide(_crash(), _state((41,) * 6), RetryPolicy(max_retries=10, crash_loop_restarts=0))
    assert d.verdict is Verdict.RETRY


def test_rule_sits_after_cancel_and_budget_before_the_relaunching_rules() -> None:
    names = [r.__name__ for r in RULES]
    assert names.index("_crash_loop") == names.index("_budget") + 1
    assert names.index("_crash_loop") < min(names.index(n) for n in
                                            ("_exclude", "_storage", "_code_error",
                                             "_rollback", "_same_nodes"))
    looping = _state((41, 41, 41, 41))
    # a cancel and a spent budget keep their own verdicts
    cancel = decide(Failure(FailureKind.CANCELLED, Category.UNKNOWN, "cancelled"), looping,
                    RetryPolicy(max_retries=10))
    assert cancel.reason == "cancelled by the operator"
    spent = decide(_crash(), looping, RetryPolicy(max_retries=3))
    assert "retry budget" in spent.reason and spent.crash_loop is None
    # a NaN that would roll back stops as a loop instead
    nan = Failure(FailureKind.CRASH, Category.NUMERICAL_NAN, "nan", step=41)
    assert decide(nan, _state((41, 41, 41, 41), checkpoint_steps=(20, 40)),
                  RetryPolicy(max_retries=10, max_rollbacks=10)).crash_loop is not None


def test_a_loop_still_excludes_a_node_with_hardware_evidence() -> None:
    xid = Failure(FailureKind.NODE, Category.GPU_HARDWARE, "XID 79", culprit_nodes=("n2",),
                  node_fault=True)
    d = decide(xid, _state((41, 41, 41, 41)), RetryPolicy(max_retries=10))
    assert d.verdict is Verdict.STOP and d.crash_loop is not None
    assert d.excluded == ("n2",)
    assert decide(_crash(), _state((41, 41, 41, 41)), RetryPolicy(max_retries=10)).excluded == ()


def _attempt(index: int, last_step: int | None) -> AttemptResult:
    return AttemptResult(index, NODES, float(index), float(index) + 1.0, "failed", {0: 1},
                         failure=_crash(), last_step=last_step)


def test_decide_next_gives_the_policy_each_attempts_step(tmp_path: Path) -> None:
    spec = JobSpec(command=("python", "t.py"), nodes=NODES, nproc_per_node=1,
                   run_dir=tmp_path, policy=RetryPolicy(max_retries=10))
    chain = Chain(nodes=NODES, spares=[])
    verdicts = []
    for i, step in enumerate((41, 41, 41, 41)):
        chain.attempts.append(_attempt(i, step))
        chain.retries = i
        verdicts.append(decide_next(spec, _crash(), chain).verdict)
    assert verdicts == [Verdict.RETRY, Verdict.RETRY, Verdict.RETRY, Verdict.STOP]


@pytest.mark.parametrize("value", [-1, True, 2.5])
def test_bad_crash_loop_restarts_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError, match="crash_loop_restarts"):
        RetryPolicy(crash_loop_restarts=value)  # type: ignore[arg-type]


def test_default_is_three_restarts() -> None:
    assert RetryPolicy().crash_loop_restarts == 3


@pytest.mark.parametrize(("decision", "stop"), [
    ({"verdict": "stop", "reason": "stop: crash loop: 3 restarts made no progress"}, True),
    ({"verdict": "stop", "reason": "x", "crash_loop": {"best_step": 1}}, True),
    ({"verdict": "stop", "reason": "stop: the retry budget (5 relaunches) is spent"}, False),
    ({"verdict": "retry", "reason": "crash loop: odd"}, False),
    (None, False),
])
def test_recorded_stops(decision: dict[str, object] | None, stop: bool) -> None:
    assert is_crash_loop_stop(decision) is stop


def test_cli_rejects_a_negative_crash_loop_restarts_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", "--no-db", "--nodes", "a", "--run-dir",
                                      str(tmp_path / "run"), "--crash-loop-restarts", "-1",
                                      "--", "true"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--crash-loop-restarts" in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == []
    shown = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert "--crash-loop-restarts" in shown.output


@pytest.mark.parametrize(("steps", "failures", "run"), [
    ((150,), 1, 1),
    ((150, 300), 2, 1),            # attempt 1 trained past attempt 0: a new run of failures
    ((41, 41, 41), 3, 3),          # no progress since attempt 0
    ((41, 60, 60), 3, 2),
    ((150, None), 2, 2),           # attempt 1 failed before its first step
    ((None, None, None), 3, 3),    # no SDK: every failure counts
    ((10, 20), 3, 3),              # steps that do not match the failures: every failure
])
def test_a_run_of_failures_starts_at_the_last_attempt_that_got_further(
        steps: tuple[int | None, ...], failures: int, run: int) -> None:
    assert failures_in_a_row(steps, failures) == run


def test_the_backoff_grows_with_failures_in_a_row_not_with_the_chain() -> None:
    policy = RetryPolicy(max_retries=10, backoff_s=1.0, backoff_max_s=8.0)

    def backoff(steps: tuple[int | None, ...]) -> float:
        state = _state(steps, history=(_crash(),) * (len(steps) - 1))
        return decide(_crash(), state, policy).backoff_s

    assert backoff((150, 300)) == 0.0
    assert backoff((150, 150)) == 1.0
    assert backoff((150, 300, 300, 300)) == 2.0   # 3 in a row since attempt 1 (not 4)
    assert backoff((None, None, None)) == 2.0   # no SDK steps: as before, every failure
