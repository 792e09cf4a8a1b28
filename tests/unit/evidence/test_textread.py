"""What the text model may change (textread.py): the policy as a pure function, then through
``correlate`` and ``logs classify``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.context import as_checkpoint
from trainguard.evidence.cuda_errors import RULE_ID as CUDA_RULE_ID
from trainguard.evidence.events import EvidenceLine, FailureEvent
from trainguard.evidence.signals import SIGNAL_FIELD
from trainguard.evidence.textmodel import Prediction
from trainguard.evidence.textread import (
    FIRM,
    beyond_evidence,
    contested,
    decide,
    read_by_number,
)
from trainguard.taxonomy import DEFAULT_ACTION, Action, Category, Severity

TH = {"answer": 0.3, "category": 0.7, "action": 0.6}
CORPUS = Path(__file__).resolve().parents[2] / "data" / "realworld"


def pred(label: str, p: float) -> Prediction:
    return Prediction(((label, p), ("other", 1 - p)))


def test_an_unknown_standing_on_failure_words_takes_the_models_category_and_action() -> None:
    d = decide(Category.UNKNOWN, Action.NONE, pred("oom_host", 0.4), pred("fix_config", 0.3),
               TH, may_answer=True, read_by_number=False, rule_confidence=0.2)
    assert (d.category, d.action) == (Category.OOM_HOST, Action.FIX_CONFIG)
    assert d.category_changed and d.action_changed


def test_an_unknown_below_the_answer_threshold_or_read_by_a_rule_stays_unknown() -> None:
    low = decide(Category.UNKNOWN, Action.NONE, pred("oom_host", 0.29), pred("fix_config", 0.9),
                 TH, may_answer=True, read_by_number=False, rule_confidence=0.2)
    benign = decide(Category.UNKNOWN, Action.NONE, pred("oom_host", 0.99),
                    pred("fix_config", 0.9), TH, may_answer=False, read_by_number=False,
                    rule_confidence=0.2)
    for d in (low, benign):
        assert (d.category, d.action) == (Category.UNKNOWN, Action.NONE)
        assert not d.category_changed and not d.action_changed


def test_an_unsure_rule_gives_way_to_a_sure_model() -> None:
    d = decide(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, pred("oom_gpu", 0.8),
               pred("fix_config", 0.5), TH, may_answer=False, read_by_number=False,
               rule_confidence=0.5)
    # Where the category changed, the action is the model's even under the action threshold.
    assert (d.category, d.action) == (Category.OOM_GPU, Action.FIX_CONFIG)


def test_only_the_action_changes_when_the_model_agrees_on_the_category() -> None:
    d = decide(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, pred("cuda_software_bug", 0.9),
               pred("fix_config", 0.65), TH, may_answer=False, read_by_number=False,
               rule_confidence=0.5)
    assert (d.category, d.action) == (Category.CUDA_SOFTWARE_BUG, Action.FIX_CONFIG)
    assert not d.category_changed and d.action_changed
    below = decide(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, pred("oom_gpu", 0.69),
                   pred("fix_config", 0.59), TH, may_answer=False, read_by_number=False,
                   rule_confidence=0.5)
    assert (below.category, below.action) == (Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE)


def test_a_sure_rule_a_read_by_number_or_evidence_alone_is_never_second_guessed() -> None:
    for kwargs in ({"rule_confidence": FIRM, "read_by_number": False},
                   {"rule_confidence": 0.3, "read_by_number": True},
                   {"rule_confidence": 0.3, "read_by_number": False, "beyond_evidence": False}):
        d = decide(Category.GPU_HARDWARE, Action.EXCLUDE_NODE, pred("oom_gpu", 0.99),
                   pred("fix_config", 0.99), TH, may_answer=False, **kwargs)  # type: ignore[arg-type]
        assert (d.category, d.action) == (Category.GPU_HARDWARE, Action.EXCLUDE_NODE), kwargs


def test_a_guess_never_takes_a_node_out_of_service() -> None:
    answered = decide(Category.UNKNOWN, Action.NONE, pred("gpu_hardware", 0.9),
                      pred("exclude_node", 0.9), TH, may_answer=True, read_by_number=False,
                      rule_confidence=0.2)
    assert (answered.category, answered.action) == (Category.GPU_HARDWARE, Action.RESTART_JOB)
    doubted = decide(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, pred("cuda_software_bug", 0.9),
                     pred("reboot_node", 0.9), TH, may_answer=False, read_by_number=False,
                     rule_confidence=0.5)
    assert doubted.action is Action.RESTART_JOB
    # Away from a node action is the safe direction: a rule's reboot may become a restart.
    kept = decide(Category.GPU_HARDWARE, Action.REBOOT_NODE, pred("gpu_hardware", 0.9),
                  pred("restart_job", 0.9), TH, may_answer=False, read_by_number=False,
                  rule_confidence=0.5)
    assert kept.action is Action.RESTART_JOB and kept.action_changed


def test_a_sure_rules_action_between_a_persons_fixes_may_give_way() -> None:
    soft = {**TH, "soft_action": 0.8}
    args = {"may_answer": False, "read_by_number": False, "rule_confidence": FIRM}
    d = decide(Category.NCCL_TIMEOUT_HANG, Action.RESTART_JOB, pred("nccl_timeout_hang", 0.9),
               pred("fix_config", 0.8), soft, **args)  # type: ignore[arg-type]
    assert (d.category, d.action) == (Category.NCCL_TIMEOUT_HANG, Action.FIX_CONFIG)
    assert d.action_changed and not d.category_changed
    # not below the threshold, not without one (never), and never to or from a node action
    for th, rule_action, proposed, p in ((soft, Action.RESTART_JOB, "fix_config", 0.79),
                                         (TH, Action.RESTART_JOB, "fix_config", 0.99),
                                         (soft, Action.EXCLUDE_NODE, "fix_config", 0.99),
                                         (soft, Action.FIX_CODE, "reset_gpu", 0.99)):
        kept = decide(Category.GPU_HARDWARE, rule_action, pred("gpu_hardware", 0.9),
                      pred(proposed, p), th, **args)  # type: ignore[arg-type]
        assert kept.action is rule_action and not kept.action_changed, (th, rule_action, proposed)
    # nor where the words cannot judge: a reading by number, a contested root, a bare line
    for limit in ({"read_by_number": True}, {"contested": True}, {"beyond_evidence": False}):
        kept = decide(Category.NCCL_TIMEOUT_HANG, Action.RESTART_JOB,
                      pred("nccl_timeout_hang", 0.9), pred("fix_config", 0.99), soft,
                      **{**args, **limit})  # type: ignore[arg-type]
        assert kept.action is Action.RESTART_JOB, limit


# --- through correlate and the CLI ----------------------------------------------------------------

PREEMPTED = CORPUS / "cases" / "080-kubeflow-tfjob-failed-node-preempted.log"
"""A case the rules abstain on (failure words only) and the text model answers."""


def test_the_text_models_answer_is_marked_with_the_rules_own() -> None:
    rules = load_rules()
    events, _ = scan_paths([str(PREEMPTED)], rules, ScanOptions(suspicious_lines=True))
    plain = correlate(events, rules, learned=False)[0]
    read = correlate(events, rules)[0]
    assert plain.category is Category.UNKNOWN
    guess = read.inference.category
    assert guess is not None and guess.model == "text"
    assert guess.rule_category is Category.UNKNOWN and read.category is guess.category
    assert guess.confidence >= guess.threshold and guess.lines
    assert all(line in read.text_lines for line in guess.lines)
    assert read.inference.action is not None and read.action is read.inference.action.action


def test_logs_classify_shows_which_model_answered(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["logs", "classify", "--json", str(PREEMPTED)])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout.splitlines()[0])
    assert row["inferred"] is True
    assert row["inferred_category"]["model"] == "text"
    assert row["inferred_category"]["rule_category"] == "unknown"
    assert row["inferred_action"]["cues"] == ["text model"]
    text = CliRunner().invoke(app, ["logs", "classify", str(PREEMPTED)], env={"COLUMNS": "220"})
    assert "inferred (text)" in text.output and "(rules: unknown)" in text.output


def _event(category: Category, **kw: object) -> FailureEvent:
    return FailureEvent(category, DEFAULT_ACTION[category], Severity.FATAL, "some_rule", "x",
                        **kw)  # type: ignore[arg-type]


def test_an_incident_the_rules_read_as_two_causes_is_contested() -> None:
    user, hang = _event(Category.USER_CODE_ERROR), _event(Category.NCCL_TIMEOUT_HANG)
    assert contested(user, [hang])
    assert not contested(user, [_event(Category.USER_CODE_ERROR), _event(Category.UNKNOWN)])
    info = FailureEvent(Category.NCCL_TIMEOUT_HANG, Action.NONE, Severity.INFO, "r", "x")
    assert not contested(user, [info])
    d = decide(Category.USER_CODE_ERROR, Action.FIX_CODE, pred("nccl_timeout_hang", 0.99),
               pred("restart_job", 0.99), TH, may_answer=False, read_by_number=False,
               rule_confidence=0.3, contested=True)
    assert (d.category, d.action) == (Category.USER_CODE_ERROR, Action.FIX_CODE)


def test_readings_that_rest_on_a_number_are_read_by_number() -> None:
    assert read_by_number(_event(Category.GPU_HARDWARE, xid=79))
    assert read_by_number(_event(Category.OOM_HOST, fields=((SIGNAL_FIELD, "9"),)))
    cuda = FailureEvent(Category.CUDA_SOFTWARE_BUG, Action.FIX_CODE, Severity.FATAL,
                        CUDA_RULE_ID, "x")
    assert read_by_number(cuda)
    # a reading by where the exception was raised (a checkpoint library's frames)
    assert read_by_number(as_checkpoint(_event(Category.USER_CODE_ERROR), "raised inside x"))
    assert not read_by_number(_event(Category.USER_CODE_ERROR))


def test_text_beyond_the_evidence_is_told_by_where_a_line_is_not_by_its_text() -> None:
    evidence = [EvidenceLine("job.log", 7, "RuntimeError: NCCL error: unhandled system error")]
    # a neighbour's copy of an evidence line may be cut: it is still that line
    cut = [EvidenceLine("job.log", 7, "RuntimeError: NCCL error")]
    assert not beyond_evidence(evidence, cut)
    assert beyond_evidence(evidence, [*cut, EvidenceLine("job.log", 8, "ib0: link down")])
    assert beyond_evidence(evidence, [EvidenceLine("other.log", 7, evidence[0].text)])
