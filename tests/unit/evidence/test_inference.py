"""The learned decisions: ``fix_config`` where the lines read like a setting (actions.py), a
category answered for an ``unknown`` incident (inference.py), thresholds chosen by
cross-validation (actfit.py), and how ``logs classify`` marks them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load_script
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.actfit import Case, choose, score
from trainguard.evidence.actions import (
    NEVER,
    ActionSample,
    builtin_model,
    config_probability,
    count,
    cues_in,
    from_json,
    infer_action,
    to_json,
)
from trainguard.evidence.alternatives import Alternative, builtin_calibration
from trainguard.evidence.events import EvidenceLine
from trainguard.evidence.inference import NODE_ACTIONS, answer, answered_action, infer
from trainguard.taxonomy import DEFAULT_ACTION, Action, Category

DATA = Path(__file__).resolve().parents[3] / "src" / "trainguard" / "evidence" / "data"

HOST_OOM_WORDS = ["2025-03-04 08:00:00 step 10 loss 2.1",
                  "2025-03-04 08:00:05 worker 2: fatal: process killed, host memory exhausted "
                  "(rss 250 GB)"]
EARLY_HANG = ["[rank1]:[E ProcessGroupNCCL.cpp:612] [Rank 1] Watchdog caught collective operation "
              "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
              "Timeout(ms)=600000) ran for 600090 milliseconds before timing out."]
"""A hang in the first collective: the evidence names fix_config (remedies.py)."""


def _samples() -> list[ActionSample]:
    """Import errors labelled fix_config, other Python errors fix_code; one rule already says
    fix_config (not a candidate)."""
    imp = frozenset({"import_env", "python_error"})
    plain = frozenset({"python_error", "traceback"})
    return ([ActionSample(imp, "user_code_error", "fix_code", "fix_config")] * 4
            + [ActionSample(plain, "user_code_error", "fix_code", "fix_code")] * 6
            + [ActionSample(plain, "oom_gpu", "fix_config", "fix_code")] * 5)


def test_action_cues_are_generic_words() -> None:
    assert "env_var" in cues_in("NCCL_SOCKET_IFNAME set by environment to eth2")
    assert "import_env" in cues_in("ImportError: libcudnn.so.8: cannot open shared object file")
    assert "version" in cues_in("Failed to initialize NVML: Driver/library version mismatch")
    assert cues_in("") == frozenset()


def test_the_model_counts_only_cases_whose_rule_says_something_else() -> None:
    model = count(_samples())
    assert model.totals == (4, 6)
    assert set(model.cases) == {"user_code_error"}


def test_config_probability_follows_the_cues() -> None:
    model = count(_samples())
    with_import = config_probability(model, frozenset({"import_env", "python_error"}),
                                     "user_code_error")
    without = config_probability(model, frozenset({"python_error", "traceback"}),
                                 "user_code_error")
    assert with_import > 0.9 > 0.1 > without


def test_a_cue_no_candidate_had_is_no_evidence() -> None:
    model = count(_samples())
    base = frozenset({"python_error"})
    assert config_probability(model, base | {"shm"}, "user_code_error") == pytest.approx(
        config_probability(model, base, "user_code_error"))


def test_infer_action_overrides_only_at_or_above_the_threshold() -> None:
    lines = ["ImportError: libfoo.so.1: cannot open shared object file"]
    p = config_probability(count(_samples()), frozenset(cues_in(lines[0])), "user_code_error")
    at = count(_samples(), threshold=p)
    got = infer_action(at, "user_code_error", Action.FIX_CODE, lines)
    assert got is not None and got.action is Action.FIX_CONFIG
    assert got.rule_action is Action.FIX_CODE and got.confidence == pytest.approx(p)
    assert got.cues[0] == "import_env"
    above = count(_samples(), threshold=p + 1e-6)
    assert infer_action(above, "user_code_error", Action.FIX_CODE, lines) is None


def test_infer_action_leaves_fix_config_and_none_alone() -> None:
    model = count(_samples(), threshold=0.0)
    lines = ["ImportError: cannot open shared object file"]
    assert infer_action(model, "user_code_error", Action.FIX_CONFIG, lines) is None
    assert infer_action(model, "unknown", Action.NONE, lines) is None
    assert infer_action(model, "user_code_error", Action.FIX_CODE, []) is None


def test_model_json_round_trips() -> None:
    model = count(_samples(), threshold=0.85)
    back, answer_threshold = from_json(to_json(model, "test", 0.6))
    assert back == model and answer_threshold == 0.6


def _alt(category: Category, confidence: float) -> Alternative:
    return Alternative(category, confidence, (EvidenceLine("a.log", 2, "fatal: lost"),))


def test_answer_takes_the_top_alternative_at_or_above_the_threshold() -> None:
    alts = (_alt(Category.OOM_HOST, 0.7), _alt(Category.OOM_GPU, 0.2))
    got = answer(alts, 0.7)
    assert got is not None and got.category is Category.OOM_HOST and got.confidence == 0.7
    assert answer(alts, 0.71) is None
    assert answer((), 0.0) is None


def test_infer_answers_an_unknown_with_the_category_default_action() -> None:
    models = (count(_samples(), threshold=NEVER), 0.5)
    alts = (_alt(Category.STORAGE_IO, 0.8), _alt(Category.CHECKPOINT, 0.1))
    inf = infer(Category.UNKNOWN, Action.NONE, ["fatal: lost"], alts, models)
    assert inf.category is not None and inf.action is None
    assert inf.applied(Category.UNKNOWN, Action.NONE) == (
        Category.STORAGE_IO, DEFAULT_ACTION[Category.STORAGE_IO])
    # Below the threshold, or for a category a rule gave, the rules' answer stands.
    low = infer(Category.UNKNOWN, Action.NONE, ["x"], (_alt(Category.STORAGE_IO, 0.4),), models)
    assert low.applied(Category.UNKNOWN, Action.NONE) == (Category.UNKNOWN, Action.NONE)
    known = infer(Category.OOM_GPU, Action.FIX_CONFIG, ["x"], alts, models)
    assert known.category is None


def test_choose_takes_the_best_threshold_that_loses_in_no_fold() -> None:
    grid = (0.5, 0.6, 0.7, 0.8)
    folds = [[(0.55, False), (0.75, True), (0.85, True)], [(0.65, True), (0.65, False)]]
    # 0.5 loses in fold 1 (0.55 wrong); 0.6 and 0.7 net 2 + 0; 0.8 nets 1: the higher of 0.6/0.7.
    assert choose(grid, folds, sum) == 0.7
    assert choose(grid, [[(0.9, False)]], sum) == NEVER


def test_score_counts_answers_and_wrong_answers() -> None:
    line = EvidenceLine("a.log", 1, HOST_OOM_WORDS[1])
    case = Case("oom_host", "fix_config", Category.UNKNOWN, Action.NONE, (line.text,), (line,),
                suspicious=True)
    wrong = Case("storage_io", "check_storage", Category.UNKNOWN, Action.NONE, (line.text,),
                 (line,), suspicious=True)
    model = count(_samples())
    on = score([case, wrong], builtin_calibration(), model, 0.5)
    off = score([case, wrong], builtin_calibration(), model, NEVER)
    assert (off.category, off.unknown, off.answered_wrong) == (0, 2, 0)
    assert (on.category, on.action, on.unknown, on.answered_wrong) == (1, 1, 0, 1)


def _incident(tmp_path: Path, lines: list[str]) -> dict[str, object]:
    path = tmp_path / "job.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    result = CliRunner().invoke(app, ["logs", "classify", "--json", str(path)])
    assert result.exit_code == 0, result.output
    row: dict[str, object] = json.loads(result.stdout.splitlines()[0])
    return row


def test_an_inferred_category_is_marked_in_json_and_text(tmp_path: Path) -> None:
    row = _incident(tmp_path, HOST_OOM_WORDS)
    alts = row["alternatives"]
    assert isinstance(alts, list) and len(alts) == 2  # both alternatives stay listed
    assert row["inferred"] is True
    assert row["category"] == alts[0]["category"] == "oom_host"
    assert row["action"] == DEFAULT_ACTION[Category.OOM_HOST].value
    guess = row["inferred_category"]
    assert isinstance(guess, dict)
    assert guess["rule_category"] == "unknown" and guess["lines"]
    assert guess["confidence"] >= builtin_model()[1]
    assert row["root_cause"]["category"] == "unknown"  # type: ignore[index]
    text = CliRunner().invoke(app, ["logs", "classify", str(tmp_path / "job.log")],
                              env={"COLUMNS": "220"})
    assert "oom_host" in text.output and "inferred" in text.output
    assert "(rules: unknown)" in text.output


def test_an_inferred_action_is_marked_in_json_and_text(tmp_path: Path) -> None:
    row = _incident(tmp_path, EARLY_HANG)
    assert row["category"] == "nccl_timeout_hang" and row["inferred"] is False
    assert row["action"] == "fix_config"
    how = row["inferred_action"]
    assert isinstance(how, dict)
    assert how["rule_action"] == "restart_job" and how["cues"] == ["early_collective_timeout"]
    text = CliRunner().invoke(app, ["logs", "classify", str(tmp_path / "job.log")],
                              env={"COLUMNS": "220"})
    assert "fix_config" in text.output and "(rules: restart_job;" in text.output


def test_without_learned_models_the_rules_answer_stands(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text("".join(f"{line}\n" for line in HOST_OOM_WORDS), encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=True))
    (plain,) = correlate(events, rules, learned=False)
    assert plain.category is Category.UNKNOWN and not plain.inferred
    assert plain.to_dict()["inferred_category"] is None


def test_the_stored_model_is_what_the_corpora_give() -> None:
    """Regenerate with scripts/calibrate_actions.py when rules or cues change."""
    script = load_script("scripts/calibrate_actions.py", "calibrate_actions")
    text, _ = script.build()
    assert (DATA / "actions.json").read_text(encoding="utf-8") == text


@pytest.mark.parametrize("category", [Category.SCHEDULER_NODE_FAILURE, Category.GPU_HARDWARE,
                                      Category.GPU_MEMORY_ECC, Category.NVLINK_INTERCONNECT])
def test_an_answered_category_takes_no_node_or_gpu_out_of_service(category: Category) -> None:
    # A guess from a line's words names no faulty node or GPU: rerun rather than exclude,
    # reboot or reset hardware nothing has blamed.
    assert DEFAULT_ACTION[category] in NODE_ACTIONS
    models = (count(_samples(), threshold=NEVER), 0.5)
    inf = infer(Category.UNKNOWN, Action.NONE, ["fatal: lost"], (_alt(category, 0.9),), models)
    assert inf.applied(Category.UNKNOWN, Action.NONE) == (category, Action.RESTART_JOB)
    assert answered_action(category) is Action.RESTART_JOB


def test_an_answered_category_keeps_a_default_that_removes_nothing() -> None:
    for category in (Category.OOM_HOST, Category.STORAGE_IO, Category.USER_CODE_ERROR):
        assert answered_action(category) is DEFAULT_ACTION[category]


def test_a_bare_slurm_cancellation_is_a_rerun_not_a_node_to_exclude(tmp_path: Path) -> None:
    log = tmp_path / "slurm-5521.out"
    log.write_text("epoch 3 step 900 loss 2.11\n"
                   "slurmstepd: error: *** STEP 5521.0 ON cn-112 CANCELLED AT "
                   "2025-02-11T03:14:15 ***\n", encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(log)], rules, ScanOptions(suspicious_lines=True))
    incidents = correlate(events, rules)
    assert incidents and incidents[0].inferred
    assert incidents[0].category is Category.SCHEDULER_NODE_FAILURE
    assert incidents[0].action is Action.RESTART_JOB
