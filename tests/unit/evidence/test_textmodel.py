"""The text model (textmodel.py): its words, its scoring against scikit-learn's, the stored
model against what scripts/fit_text_model.py fits, and the lines the scanner keeps for it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from script_module import load_script

from trainguard.evidence import correlate, load_rules, scan_bytes
from trainguard.evidence.scanner import CONTEXT_CHARS, CONTEXT_LINES
from trainguard.evidence.textmodel import (
    TextModel,
    builtin_text_model,
    features,
    from_json,
    head_of,
    parts,
    text_features,
    tokens,
    without_shared_prefix,
)
from trainguard.taxonomy import Action, Category

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"


def test_words_are_lower_case_without_hex_numbers_or_ids() -> None:
    assert tokens("CUDA error at 0x7f3a: Device-Side assert; id deadbeef01 rank 3") == [
        "cuda", "error", "at", "device", "side", "assert", "id", "rank"]
    assert tokens("") == [] and tokens("1 2 3 ::") == []


def test_features_are_words_and_adjacent_pairs_across_lines() -> None:
    assert features(["a1", "b2"]) == ["a1", "b2", "a1 b2"]
    assert text_features(["Killed process", "out of memory"]) == [
        "killed", "process", "out", "of", "memory", "killed process", "process out", "out of",
        "of memory"]


def test_a_compound_identifiers_parts_are_words_too() -> None:
    assert parts("CUDAMismatchException: No module named 'fused_layer_norm_cuda'") == [
        "cuda", "mismatch", "exception", "fused", "layer", "norm", "cuda"]
    assert parts("ProcessGroupNCCL.cpp sm_80 XlaRuntimeError") == [
        "process", "group", "nccl", "xla", "runtime", "error"]
    # A plain word, a number, a hex address or a hex-like id gives no part.
    assert parts("Killed process 1234 at 0x7F3A id_deadbeef01 v2") == []
    assert text_features(["raise CudaError"]) == ["raise", "cudaerror", "raise cudaerror",
                                                  "cuda", "error"]


def test_an_identifier_nobody_labelled_leans_like_its_parts() -> None:
    script = _fit_script()
    model = script.fit(_toy_cases(script), {}, "toy")
    assert model.predict("category", text_features(["NoSpaceLeftOnDevice"])).label == "storage_io"
    assert model.predict("category", text_features(["cuda_out_of_memory"])).label == "oom_gpu"


def _fit_script():  # type: ignore[no-untyped-def]
    return load_script("scripts/fit_text_model.py", "fit_text_model")


def _toy_cases(script):  # type: ignore[no-untyped-def]
    docs = [("nccl watchdog timed out collective", "nccl_timeout_hang", "restart_job"),
            ("watchdog caught collective timeout nccl", "nccl_timeout_hang", "restart_job"),
            ("cuda out of memory tried to allocate", "oom_gpu", "fix_config"),
            ("tried to allocate cuda out of memory again", "oom_gpu", "fix_config"),
            ("no space left on device checkpoint", "storage_io", "check_storage"),
            ("checkpoint write failed no space left", "storage_io", "check_storage")]
    return [script.Case("toy", f"{i}.log", cat, act, tuple(text_features([d])), True, False,
                        True, False) for i, (d, cat, act) in enumerate(docs)]


def test_scoring_with_numpy_is_scikit_learns() -> None:
    sklearn_text = pytest.importorskip("sklearn.feature_extraction.text")
    sklearn_linear = pytest.importorskip("sklearn.linear_model")
    script = _fit_script()
    cases = _toy_cases(script)
    model = script.fit(cases, {"answer": 0.5, "category": 0.7, "action": 0.7}, "toy")
    vec = sklearn_text.TfidfVectorizer(analyzer=lambda f: f, min_df=script.MIN_DF,
                                       sublinear_tf=True)
    x = vec.fit_transform([list(c.features) for c in cases])
    lr = sklearn_linear.LogisticRegression(C=script.C, max_iter=5000).fit(
        x, [c.category for c in cases])
    for text in ("the nccl watchdog timed out", "out of memory out of memory", "nothing known"):
        feats = text_features([text])
        want = dict(zip(lr.classes_, lr.predict_proba(vec.transform([feats]))[0], strict=True))
        got = dict(model.predict("category", feats).ranked)
        assert got.keys() == want.keys()
        assert all(abs(got[k] - want[k]) < 1e-9 for k in want), (text, got, want)


def test_the_stored_form_scores_as_the_fitted_model() -> None:
    script = _fit_script()
    model = script.fit(_toy_cases(script), {"answer": 0.5, "category": 0.7, "action": 0.7},
                       "toy")
    again = from_json(model.to_json())
    assert again.thresholds == model.thresholds and again.source == "toy"
    feats = text_features(["cuda out of memory while the nccl watchdog timed out"])
    for head in ("category", "action"):
        a, b = model.predict(head, feats), again.predict(head, feats)
        assert [k for k, _ in a.ranked] == [k for k, _ in b.ranked]
        assert np.allclose([p for _, p in a.ranked], [p for _, p in b.ranked], atol=1e-3)


def test_text_with_no_known_word_gives_the_prior() -> None:
    model = TextModel({"x": 0}, (1.0,), {"category": head_of(
        ("a", "b"), [[1.0], [-1.0]], [0.0, float(np.log(3.0))])}, {})
    pred = model.predict("category", ["unseen"])
    assert pred.label == "b" and abs(pred.probability - 0.75) < 1e-9


def test_the_lines_leaning_towards_a_label_are_those_with_its_words() -> None:
    script = _fit_script()
    model = script.fit(_toy_cases(script), {}, "toy")
    lines = ["step 10 loss 2.0", "no space left on device", "checkpoint write failed"]
    assert set(model.leaning("category", "storage_io", lines)) <= {1, 2}
    assert model.leaning("category", "storage_io", ["step 10 loss 2.0"]) == ()


def test_the_builtin_model_has_both_heads_and_its_thresholds() -> None:
    model = builtin_text_model()
    assert set(model.heads) == {"category", "action"}
    assert set(model.heads["category"].classes) <= {c.value for c in Category}
    assert set(model.heads["action"].classes) <= {a.value for a in Action}
    assert set(model.thresholds) == {"answer", "category", "action", "soft_action"}
    assert all(0 <= v <= 1.01 for v in model.thresholds.values())
    assert len(model.vocabulary) == len(model.idf) == len(model.heads["category"].weights)
    assert all(len(w) == len(model.heads["action"].classes) for w in model.heads["action"].weights)


def test_the_stored_model_is_what_the_corpora_give() -> None:
    """Regenerate with scripts/fit_text_model.py when rules, corpora or the scan change."""
    pytest.importorskip("sklearn")
    assert _fit_script().main(["--check"]) == 0


def test_every_held_out_case_has_its_fresh_answer() -> None:
    """scripts/fresh_rule_answers.py records what the rules said before each held-out corpus
    existed; the threshold replay needs one answer per case (rerun it for a new corpus)."""
    rows = [json.loads(line) for line in
            (DATA / "fresh_rule_answers.jsonl").read_text().splitlines() if line.strip()]
    have = {(r["corpus"], r["file"]) for r in rows}
    want = {(d.name, json.loads(line)["file"])
            for d in DATA.glob("realworld_heldout*") if (d / "labels.jsonl").is_file()
            for line in (d / "labels.jsonl").read_text().splitlines() if line.strip()}
    assert have == want
    assert len(rows) == len(have)
    assert all(Category(r["category"]) and Action(r["action"]) for r in rows)


# --- the lines the scanner keeps around a match -------------------------------------------------

def _events(lines: list[str]):  # type: ignore[no-untyped-def]
    data = "".join(f"{line}\n" for line in lines).encode()
    return scan_bytes(data, load_rules(), path="job.log")


def test_each_event_keeps_five_lines_either_side() -> None:
    lines = [f"step {i} loss 1.0" for i in range(1, 21)]
    lines[11] = "RuntimeError: CUDA error: an illegal memory access was encountered"
    (ev,) = _events(lines)
    assert ev.evidence[0].line_no == 12
    assert [c.line_no for c in ev.context] == [*range(12 - CONTEXT_LINES, 12),
                                               *range(13, 13 + CONTEXT_LINES)]
    assert [c.text for c in ev.context][:2] == ["step 7 loss 1.0", "step 8 loss 1.0"]
    assert all(c.path == "job.log" for c in ev.context)


def test_context_stops_at_the_file_edges_and_cuts_long_lines() -> None:
    lines = ["x" * (CONTEXT_CHARS + 100),
             "RuntimeError: CUDA error: an illegal memory access was encountered", "tail"]
    (ev,) = _events(lines)
    assert [c.line_no for c in ev.context] == [1, 3]
    assert len(ev.context[0].text) == CONTEXT_CHARS


def test_context_is_neither_compared_nor_stored() -> None:
    (ev,) = _events(["before", "RuntimeError: CUDA error: an illegal memory access was "
                     "encountered"])
    assert ev.context
    bare = type(ev)(**{f: getattr(ev, f) for f in ev.__slots__ if f != "context"})  # type: ignore[attr-defined]
    assert bare == ev and "context" not in ev.to_dict()


def test_a_line_that_is_one_events_evidence_and_anothers_neighbour_is_read_whole() -> None:
    long_tail = " ".join(["detail"] * (CONTEXT_CHARS // 6 + 20))
    lines = ["RuntimeError: CUDA error: an illegal memory access was encountered",
             f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB {long_tail}"]
    events = _events(lines)
    assert len(events) == 2
    # the second line is the first event's (cut) neighbour and the second event's evidence
    assert any(c.line_no == 2 and len(c.text) == CONTEXT_CHARS for c in events[0].context)
    inc = correlate(events, load_rules(), learned=False)[0]
    (second,) = [t for t in inc.text_lines if t.line_no == 2]
    assert second.text == lines[1]
    assert {(e.path, e.line_no) for e in inc.evidence_lines} == {("job.log", 1), ("job.log", 2)}


def test_a_prefix_every_line_shares_is_not_read() -> None:
    bare = ["INFO step 10 loss 2.1", "RuntimeError: NCCL error: unhandled system error",
            "ncclSystemError: System call (e.g. socket, malloc) failed"]
    for wrap in (lambda i, s: f"trainer-1  | {s}",
                 lambda i, s: f"2026-03-03T04:12:{i:02d}.{i:06d}Z {s}",
                 lambda i, s: f"(RayTrainWorker pid=4123{i}, ip=10.1.2.3) {s}"):
        wrapped = [wrap(i, s) for i, s in enumerate(bare)]
        assert without_shared_prefix(wrapped) == bare
        assert text_features(wrapped) == text_features(bare)
    # words the lines share are the program's when nothing else is shared
    assert without_shared_prefix(["oom-kill event", "Killed process 7"]) == \
        ["oom-kill event", "Killed process 7"]
    assert without_shared_prefix(["only one line"]) == ["only one line"]


def test_a_neighbour_is_unwrapped_before_it_is_cut() -> None:
    bar = "\u2588" * 120  # six characters each in a Docker record: the record passes 400 bytes
    lines = [json.dumps({"log": f" 35%|{bar}| 738/2081\n", "stream": "stderr",
                         "time": "2026-03-03T04:12:00Z"}, separators=(",", ":")),
             json.dumps({"log": "RuntimeError: CUDA error: an illegal memory access was "
                                "encountered\n", "stream": "stderr",
                         "time": "2026-03-03T04:12:01Z"}, separators=(",", ":"))]
    assert len(lines[0].encode()) > CONTEXT_CHARS
    (ev,) = _events(lines)
    (before,) = ev.context
    assert before.text == f"2026-03-03T04:12:00Z  35%|{bar}| 738/2081"


def test_the_message_catalog_is_well_formed() -> None:
    """Each catalog line is one upstream message with its source and a label of the corpora's
    categories and actions (never ``unknown`` or ``none``), and no message appears twice."""
    categories = {c.value for c in Category} - {Category.UNKNOWN.value}
    actions = {a.value for a in Action} - {Action.NONE.value}
    seen: set[str] = set()
    files = sorted((DATA / "message_catalog").glob("*.jsonl"))
    assert files
    for path in files:
        for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            row = json.loads(raw)
            where = f"{path.name}:{n}"
            assert set(row) == {"message", "category", "action", "source", "condition"}, where
            assert row["category"] in categories and row["action"] in actions, where
            assert row["message"].strip() and len(row["message"].splitlines()) <= 3, where
            assert ":" in row["source"] and row["source"].count("/") >= 2, where
            assert row["message"] not in seen, where
            seen.add(row["message"])


def test_catalog_messages_are_read_without_their_placeholders(tmp_path: Path) -> None:
    (tmp_path / "area.jsonl").write_text(json.dumps({
        "message": "NET/IB : %s:%d async fatal event: %s\n[Rank {}] {op} took %lukB %\"PRIu64\"",
        "category": "network_ib", "action": "check_network", "source": "o/r:f.c",
        "condition": "c"}) + "\n")
    script = _fit_script()
    (case,) = script.catalog_cases(tmp_path)
    assert (case.corpus, case.category, case.action) == ("catalog/area", "network_ib",
                                                        "check_network")
    assert case.weight == script.CATALOG_WEIGHT
    assert {"async", "fatal event", "rank", "took", "kb"} <= set(case.features)
    assert not {"op", "lu", "priu64", "d"} & set(case.features)
