"""Write src/trainguard/evidence/data/actions.json from the two labelled corpora, and print the
cross-validated accuracy of `logs classify` with and without the learned decisions.

    python scripts/calibrate_actions.py [--check]

The config model (``evidence/actions.py``) is counted on both corpora (tests/data/realworld
and tests/data/realworld_heldout); its threshold and the answer threshold for ``unknown``
incidents are chosen by cross-validation (``evidence/actfit.py``). The figures printed are
cross-corpus: models fitted on one corpus, scored on the other. With ``--check`` nothing is
written; the exit status is 1 when the stored file differs from what the corpora give.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainguard.evidence.actfit import (
    Case,
    answer_pairs,
    choose_answer_threshold,
    choose_config_threshold,
    corpus_cases,
    score,
)
from trainguard.evidence.actions import NEVER, count, to_json
from trainguard.evidence.alternatives import fit
from trainguard.evidence.altfit import corpus_samples
from trainguard.taxonomy import Category

ROOT = Path(__file__).resolve().parents[1]
CORPORA = (ROOT / "tests" / "data" / "realworld", ROOT / "tests" / "data" / "realworld_heldout")
OUT = ROOT / "src" / "trainguard" / "evidence" / "data" / "actions.json"
SOURCE = "tests/data/realworld + tests/data/realworld_heldout"


def _known(cases: list[Case]) -> list[Case]:
    return [c for c in cases if c.rule_category is not Category.UNKNOWN]


def build() -> tuple[str, list[str]]:
    """(the file's text, the report lines)."""
    a, b = (corpus_cases(c) for c in CORPORA)
    cal = {CORPORA[0]: fit(corpus_samples(CORPORA[0])), CORPORA[1]: fit(corpus_samples(CORPORA[1]))}
    tau = choose_config_threshold(a, b)
    answer = choose_answer_threshold([answer_pairs(cal[CORPORA[1]], a),
                                      answer_pairs(cal[CORPORA[0]], b)])
    report = [f"config threshold {tau}, answer threshold {answer}"]
    for train, test, cases, train_cases in ((CORPORA[1], CORPORA[0], a, b),
                                            (CORPORA[0], CORPORA[1], b, a)):
        for label, model_t, answer_t in (("rules only", NEVER, NEVER),
                                         ("learned", tau, answer)):
            model = count((c.sample for c in _known(train_cases)), model_t)
            r = score(cases, cal[train], model, answer_t).rates()
            report.append(f"{test.name} (models fitted on {train.name}), {label}: "
                          f"category {r['category']:.1%}, action {r['action']:.1%}, "
                          f"unknown {r['unknown']:.1%}, answered wrong {r['answered_wrong']:.1%}")
    model = count((c.sample for c in _known([*a, *b])), tau)
    return to_json(model, SOURCE, answer), report


def main(argv: list[str]) -> int:
    text, report = build()
    print("\n".join(report))
    if "--check" in argv:
        same = OUT.is_file() and OUT.read_text(encoding="utf-8") == text
        print("actions.json is up to date" if same else "actions.json differs: regenerate it")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"-> {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
