"""Fit the text model (src/trainguard/evidence/data/textmodel.json) on every labelled corpus.

    python scripts/fit_text_model.py            # fit, choose thresholds by replay, write
    python scripts/fit_text_model.py --check    # refit with the stored thresholds; compare
    python scripts/fit_text_model.py --catalog  # replay with the message catalog too; no write

What the model reads of a case is what ``logs classify`` gives it: the first incident's evidence
lines and their neighbours (``Incident.text_lines``, the learned models off). Cases with no
incident are left out (there is nothing to read). Needs scikit-learn (the ``dev`` extra):
TfidfVectorizer and LogisticRegression fit the weights, which ``textmodel.py`` scores in plain
Python.

**Thresholds by replay, leaving a corpus out.** For each held-out corpus with a recorded *fresh*
answer (``tests/data/fresh_rule_answers.jsonl``: what the rules said before that corpus existed,
see ``scripts/fresh_rule_answers.py``), a model is fitted on every other corpus and its
predictions are weighed against the fresh answer by ``textread.decide``. The thresholds with the
most right categories plus right actions over all those corpora are kept (the higher of equals;
``NEVER`` turns a doubt off).
The table printed is that replay: the fresh rules alone against the rules with the text model.

**The message catalog** (``tests/data/message_catalog/``: upstream error messages labelled from
their source code) is not in the stored model. ``--catalog`` replays with it in every fit, at
weight :data:`CATALOG_WEIGHT`, to measure it again; round 22 found it no help (its README).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

from trainguard.evidence import Incident, ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.textmodel import (
    Prediction,
    TextModel,
    from_json,
    head_of,
    text_features,
)
from trainguard.evidence.textread import (
    NEVER,
    beyond_evidence,
    contested,
    decide,
    read_by_number,
)
from trainguard.taxonomy import Action, Category

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
OUT = ROOT / "src" / "trainguard" / "evidence" / "data" / "textmodel.json"
FRESH = DATA / "fresh_rule_answers.jsonl"
CATALOG = DATA / "message_catalog"
CATALOG_WEIGHT = 0.5
"""A catalog message's weight in the fit with ``--catalog``, against 1 for a labelled
excerpt."""
C = 10.0
"""Inverse L2 strength of the logistic regressions."""
MIN_DF = 2
"""A feature must occur in at least this many cases."""
ANSWER_GRID = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6)
OVERRIDE_GRID = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, NEVER)
SOFT_ACTION_GRID = (0.5, 0.6, 0.7, 0.8, 0.9, NEVER)


@dataclass(frozen=True, slots=True)
class Case:
    corpus: str
    file: str
    category: str
    action: str
    features: tuple[str, ...]
    may_answer: bool
    read_by_number: bool
    beyond_evidence: bool
    """Whether the model reads lines besides the incident's evidence."""
    contested: bool
    """Whether today's rules read the incident as more than one cause."""
    weight: float = 1.0
    """Its weight in the fit: a labelled excerpt 1, a catalog message :data:`CATALOG_WEIGHT`."""
    text: str = ""
    """The lines the model reads, as text (``scripts/sentence_model_replay.py`` embeds them)."""


def corpora() -> list[Path]:
    return sorted(p.parent for p in DATA.glob("realworld*/labels.jsonl"))


def read_cases(dirs: Sequence[Path]) -> tuple[list[Case], int]:
    """Every labelled case with an incident, and how many had none."""
    rules = load_rules()
    cases: list[Case] = []
    none = 0
    for d in dirs:
        for raw in (d / "labels.jsonl").read_text(encoding="utf-8").splitlines():
            if not raw.strip():
                continue
            lab = json.loads(raw)
            events, _ = scan_paths([str(d / lab["file"])], rules,
                                   ScanOptions(suspicious_lines=True))
            incidents = correlate(events, rules, learned=False)
            if not incidents:
                none += 1
                continue
            inc = incidents[0]
            lines = [e.program_text for e in inc.text_lines]
            cases.append(Case(d.name, str(lab["file"]), str(lab["category"]),
                              str(lab["action"]), tuple(text_features(lines)),
                              may_answer(inc), read_by_number(inc.root_cause), _beyond(inc),
                              contested(inc.root_cause, inc.related), text="\n".join(lines)))
    return cases, none


_PRINTF = re.compile(r"%\"PRI[a-zA-Z0-9]+\"|"
                     r"%[-+ #0]*[0-9*]*(?:\.[0-9*]+)?(?:hh|h|ll|l|z|j|t|L|q)?[diouxXeEfgGcspn]")
"""A C format placeholder (``%s``, ``%lu``, ``%.*s``, ``%"PRIu64"``)."""
_BRACES = re.compile(r"\{[^{}]*\}")
"""A Python or C++ format placeholder (``{}``, ``{rank}``)."""


def catalog_cases(folder: Path = CATALOG) -> list[Case]:
    """The messages of ``tests/data/message_catalog/*.jsonl`` as cases of weight
    :data:`CATALOG_WEIGHT` (``--catalog``): upstream source's own error messages, labelled from
    that source (see its README). Format placeholders (``%s``, ``{}``) are dropped: they are no
    words of a log. They are never held out: the replay scores labelled excerpts only."""
    out: list[Case] = []
    for path in sorted(folder.glob("*.jsonl")):
        for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not raw.strip():
                continue
            row = json.loads(raw)
            text = _BRACES.sub(" ", _PRINTF.sub(" ", str(row["message"])))
            out.append(Case(f"catalog/{path.stem}", str(n), str(row["category"]),
                            str(row["action"]), tuple(text_features(text.splitlines())),
                            True, False, False, False, CATALOG_WEIGHT))
    return out


def _beyond(inc: Incident) -> bool:
    return beyond_evidence(inc.evidence_lines, inc.text_lines)


def may_answer(inc: Incident) -> bool:
    """Whether an ``unknown`` answer for this case may be replaced, replayed: today's rules may
    read the case (they were written after it), so only a rule that reads it as ``unknown``
    (a benign look-alike) says no; at run time ``read_text`` asks ``Incident.suspicious``."""
    return inc.suspicious or inc.root_cause.category is not Category.UNKNOWN


def fit(cases: Sequence[Case], thresholds: dict[str, float], source: str) -> TextModel:
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression
    except ImportError:  # pragma: no cover - the dev extra has it
        raise SystemExit("error: fitting needs scikit-learn: pip install -e '.[dev]'") from None
    vec = TfidfVectorizer(analyzer=lambda feats: feats, min_df=MIN_DF, sublinear_tf=True)
    x = vec.fit_transform([list(c.features) for c in cases])
    heads = {}
    for name, labels in (("category", [c.category for c in cases]),
                         ("action", [c.action for c in cases])):
        lr = LogisticRegression(C=C, max_iter=5000).fit(
            x, labels, sample_weight=[c.weight for c in cases])
        heads[name] = head_of([str(k) for k in lr.classes_], lr.coef_.tolist(),
                              lr.intercept_.tolist())
    vocab = {str(f): int(i) for f, i in vec.vocabulary_.items()}
    return TextModel(vocab, tuple(float(v) for v in vec.idf_), heads, thresholds, source)


Replayed = tuple[Case, tuple[str, str], Prediction, Prediction]
"""A held-out case, the fresh rules' (category, action), and the two heads' predictions of a
model fitted without its corpus."""


def fresh_answers() -> dict[tuple[str, str], dict[str, Any]]:
    """``scripts/fresh_rule_answers.py``'s rows by (corpus, file)."""
    rows = [json.loads(line) for line in FRESH.read_text().splitlines() if line.strip()]
    return {(r["corpus"], r["file"]): r for r in rows}


HeadsFit = Callable[[Sequence[Case], Sequence[Case]], list[tuple[Prediction, Prediction]]]
"""Fits on the first cases and gives each of the second its (category, action) predictions:
:func:`text_model_heads`, or ``scripts/sentence_model_replay.py``'s own."""


def text_model_heads(train: Sequence[Case], test: Sequence[Case]
                     ) -> list[tuple[Prediction, Prediction]]:
    """The text model fitted on ``train``, its two heads on each case of ``test``."""
    model = fit(train, {}, "")
    heads = [model.predictions(c.features) for c in test]
    return [(h["category"], h["action"]) for h in heads]


def held_out_predictions(cases: Sequence[Case], fresh: dict[tuple[str, str], dict[str, Any]],
                         only: set[str] | None = None,
                         fit_heads: HeadsFit = text_model_heads) -> list[Replayed]:
    """Leave each corpus with fresh answers (of ``only``, if given) out, fit, predict it."""
    held = sorted({c.corpus for c in cases if (c.corpus, c.file) in fresh
                   and (only is None or c.corpus in only)})
    preds: list[Replayed] = []
    for i, name in enumerate(held, start=1):
        print(f"[{i}/{len(held)}] leaving out {name}", file=sys.stderr)
        test = [c for c in cases if c.corpus == name]
        heads = fit_heads([c for c in cases if c.corpus != name], test)
        for c, (category, action) in zip(test, heads, strict=True):
            row = fresh[(c.corpus, c.file)]
            preds.append((c, (row["category"], row["action"]), category, action))
    return preds


def replayed(item: Replayed, rule_confidence: float, th: dict[str, float]) -> tuple[str, str]:
    """The (category, action) ``logs classify`` would have given: the fresh rules' answer
    weighed against the held-out model by ``textread.decide``."""
    c, (fc, fa), pc, pa = item
    d = decide(Category(fc), Action(fa), pc, pa, th, may_answer=c.may_answer,
               read_by_number=c.read_by_number, rule_confidence=rule_confidence,
               beyond_evidence=c.beyond_evidence, contested=c.contested)
    return d.category.value, d.action.value


def replay(cases: Sequence[Case], preds: list[Replayed] | None = None) -> dict[str, Any]:
    """Leave each corpus with fresh answers out, predict it (unless ``preds`` holds those
    predictions already), choose thresholds."""
    rows = fresh_answers()
    fresh = {k: (r["category"], r["action"]) for k, r in rows.items()}
    # The rule's own confidence as it was then (the limit on doubting a sure rule).
    sure = {k: r["confidence"] or 0.0 for k, r in rows.items()}
    if preds is None:
        preds = held_out_predictions(cases, rows)
    held = {c.corpus for c, *_ in preds}
    # The fresh answers of cases that have no incident today are unknowns nothing can change.
    with_incident = {(c.corpus, c.file) for c in cases}
    missing = [v for k, v in fresh.items() if k not in with_incident and k[0] in held]

    def score(th: dict[str, float]) -> tuple[int, int]:
        cat = act = 0
        for item in preds:
            c = item[0]
            got = replayed(item, sure[(c.corpus, c.file)], th)
            cat += got[0] == c.category
            act += got[1] == c.action
        return cat, act

    best: tuple[tuple[int, float, float, float, float], dict[str, float]] | None = None
    for a, k, t, s in product(ANSWER_GRID, OVERRIDE_GRID, OVERRIDE_GRID, SOFT_ACTION_GRID):
        th = {"answer": a, "category": k, "action": t, "soft_action": s}
        cat, act = score(th)
        key = (cat + act, a, k, t, s)
        if best is None or key > best[0]:
            best = (key, th)
    assert best is not None
    th = best[1]
    n = len(preds) + len(missing)
    labels = {(c.corpus, c.file): (c.category, c.action) for c, *_ in preds}
    base_cat = sum(fc == labels[k][0] for k, (fc, _) in fresh.items() if k in labels)
    base_act = sum(fa == labels[k][1] for k, (_, fa) in fresh.items() if k in labels)
    cat, act = score(th)
    return {"thresholds": th, "cases": n, "corpora": len(held),
            "fresh_rules": [base_cat / n, base_act / n], "with_text_model": [cat / n, act / n]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="refit with the stored thresholds; exit 1 if the stored model "
                             "differs")
    parser.add_argument("--catalog", action="store_true",
                        help="replay with tests/data/message_catalog in every fit as well "
                             "and print the table; writes nothing (the stored model has no "
                             "catalog: see its README)")
    args = parser.parse_args(argv)
    dirs = corpora()
    cases, none = read_cases(dirs)
    source = f"{len(dirs)} corpora under tests/data/realworld*, {len(cases)} cases"
    print(f"{len(cases)} cases with an incident, {none} without, {len(dirs)} corpora",
          file=sys.stderr)
    if args.check:
        stored = from_json(OUT.read_text())
        model = fit(cases, dict(stored.thresholds), source)
        same = compare(stored, model)
        print("stored model matches the corpora" if same else "stored model differs")
        return 0 if same else 1
    if args.catalog:
        catalog = catalog_cases()
        print(f"with {len(catalog)} catalog messages at weight {CATALOG_WEIGHT}")
        _print_replay(replay([*cases, *catalog]))
        return 0
    result = replay(cases)
    model = fit(cases, result["thresholds"], source)
    OUT.write_text(model.to_json())
    _print_replay(result)
    print(f"{len(model.vocabulary)} features -> {OUT.relative_to(ROOT)}")
    return 0


def _print_replay(result: dict[str, Any]) -> None:
    fr, tm = result["fresh_rules"], result["with_text_model"]
    print(f"replay over {result['cases']} cases of {result['corpora']} held-out corpora "
          f"(each left out of the fit)")
    print("| answer | category | action |\n|---|---|---|")
    print(f"| fresh rules | {fr[0]:.1%} | {fr[1]:.1%} |")
    print(f"| fresh rules + text model | {tm[0]:.1%} | {tm[1]:.1%} |")
    print(f"thresholds {result['thresholds']}")


def compare(a: TextModel, b: TextModel) -> bool:
    """Same vocabulary, classes and thresholds; weights equal to the stored precision."""
    if dict(a.vocabulary) != dict(b.vocabulary) or dict(a.thresholds) != dict(b.thresholds):
        return False
    if not np.allclose(a.idf, b.idf, atol=1e-4):
        return False
    return all(a.heads[k].classes == b.heads[k].classes
               and np.allclose(a.heads[k].weights, b.heads[k].weights, atol=2e-3)
               and np.allclose(a.heads[k].intercept, b.heads[k].intercept, atol=2e-3)
               for k in ("category", "action"))


if __name__ == "__main__":
    raise SystemExit(main())
