"""The blind reading of held-out excerpts (tests/data/reader_study/): its structure, and that
scripts/reader_study.py reports what the files hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from heldout_corpus import DATA, LOG_CATEGORIES, labels

from trainguard.taxonomy import Action

ROOT = Path(__file__).resolve().parents[3]
STUDY = DATA / "reader_study"
ACTIONS = {a.value for a in Action} - {Action.NONE.value}


def _jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _cases() -> dict[str, tuple[str, str]]:
    rows = _jsonl(STUDY / "cases.jsonl")
    ids = [str(r["id"]) for r in rows]
    assert len(ids) == len(set(ids))
    return {str(r["id"]): (str(r["corpus"]), str(r["file"])) for r in rows}


def _label(corpus: str, file: str) -> tuple[str, str]:
    for r in labels(DATA / corpus):
        if r["file"] == file:
            return str(r["category"]), str(r["action"])
    raise AssertionError(f"{corpus}/{file} has no label")


ANSWERS = sorted((STUDY / "answers").glob("*.jsonl"))


def test_every_case_is_a_labelled_held_out_excerpt() -> None:
    cases = _cases()
    assert len(cases) == 144
    for corpus, file in cases.values():
        assert corpus.startswith("realworld_heldout")
        assert (DATA / corpus / file).is_file()
        assert _label(corpus, file)[0] in LOG_CATEGORIES


def test_each_packet_was_read_twice() -> None:
    packets = {p.stem.split("-")[0] for p in ANSWERS}
    assert packets == {i[0] for i in _cases()}
    for packet in packets:
        assert len([p for p in ANSWERS if p.stem.startswith(f"{packet}-")]) == 2


@pytest.mark.parametrize("path", ANSWERS, ids=lambda p: p.stem)
def test_an_answers_file_covers_its_packet_with_valid_answers(path: Path) -> None:
    rows = _jsonl(path)
    packet = path.stem.split("-")[0]
    assert [r["id"] for r in rows] == sorted(i for i in _cases() if i.startswith(packet))
    for r in rows:
        assert set(r) == {"id", "category", "action", "confidence"}
        assert r["category"] in LOG_CATEGORIES
        assert r["action"] in ACTIONS
        assert 0.0 <= float(str(r["confidence"])) <= 1.0


def test_the_script_reports_each_readers_accuracy_as_the_files_give_it() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "reader_study.py"), "--json"],
                         capture_output=True, text=True, check=True, timeout=120)
    result = json.loads(out.stdout)
    cases = _cases()
    rows = {r["answer"]: r for r in result["rows"]}
    for path in ANSWERS:
        answers = _jsonl(path)
        labels = [_label(*cases[str(a["id"])]) for a in answers]
        right_cat = sum(a["category"] == lab[0] for a, lab in zip(answers, labels, strict=True))
        right_act = sum(a["action"] == lab[1] for a, lab in zip(answers, labels, strict=True))
        row = rows[f"reader {path.stem}"]
        assert row["cases"] == len(answers)
        assert row["category"] == pytest.approx(right_cat / len(answers))
        assert row["action"] == pytest.approx(right_act / len(answers))
    assert rows["fresh rules"]["cases"] == 144
    assert {p["packet"] for p in result["agreement"]} == {"A", "B", "C"}
