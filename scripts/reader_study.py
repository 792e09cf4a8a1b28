"""A blind reading of held-out excerpts: how well a careful reader labels them from the text
alone, against the labels taken from each thread, beside `logs classify` on the same cases.

    python scripts/reader_study.py            # readers and the fresh rules
    python scripts/reader_study.py --replay   # also the text model, fitted without each corpus
    python scripts/reader_study.py --json

The cases, the readers' answers and what the readers were given are in tests/data/reader_study/
(see its README). Each packet of cases was read by two readers who saw only the excerpts and
the labelling rules. "fresh rules" is what the rules answered before each corpus existed
(tests/data/fresh_rule_answers.jsonl); "--replay" weighs it against a text model fitted on every
other corpus, as scripts/fit_text_model.py does to choose its thresholds (needs the dev extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "tests" / "data" / "reader_study"
DATA = ROOT / "tests" / "data"

Key = tuple[str, str]
"""(corpus, file) of a case."""
Answer = tuple[str, str]
"""(category, action)."""


def read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def study_cases() -> dict[str, Key]:
    """Case id -> (corpus, file)."""
    return {str(r["id"]): (str(r["corpus"]), str(r["file"]))
            for r in read_jsonl(STUDY / "cases.jsonl")}


def thread_labels(keys: Sequence[Key]) -> dict[Key, Answer]:
    """The (category, action) each corpus's labels.jsonl gives its cases."""
    out: dict[Key, Answer] = {}
    for corpus in sorted({k[0] for k in keys}):
        for r in read_jsonl(DATA / corpus / "labels.jsonl"):
            out[(corpus, str(r["file"]))] = (str(r["category"]), str(r["action"]))
    return out


def readings() -> dict[str, dict[str, dict[str, object]]]:
    """Answers file name (``A-r1``) -> case id -> the reader's answer."""
    return {p.stem: {str(r["id"]): r for r in read_jsonl(p)}
            for p in sorted((STUDY / "answers").glob("*.jsonl"))}


def accuracy(answers: Mapping[str, Answer], truth: Mapping[str, Answer]) -> tuple[float, float]:
    """Share of ``answers`` whose category, and whose action, is the truth's."""
    n = len(answers)
    cat = sum(a[0] == truth[i][0] for i, a in answers.items())
    act = sum(a[1] == truth[i][1] for i, a in answers.items())
    return cat / n, act / n


def agreement(a: Mapping[str, Answer], b: Mapping[str, Answer]) -> tuple[float, float]:
    """Share of the cases both read on which the two agree, on category and on action."""
    both = sorted(a.keys() & b.keys())
    return (sum(a[i][0] == b[i][0] for i in both) / len(both),
            sum(a[i][1] == b[i][1] for i in both) / len(both))


def replay_answers(keys: Sequence[Key]) -> dict[Key, Answer]:
    """What the fresh rules with a held-out text model answer (fit_text_model's replay)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_text_model as fit  # needs scikit-learn: imported only on --replay

    fresh = fit.fresh_answers()
    cases, _ = fit.read_cases(fit.corpora())
    th = dict(fit.from_json(fit.OUT.read_text()).thresholds)
    out = {k: (str(fresh[k]["category"]), str(fresh[k]["action"])) for k in keys}
    for item in fit.held_out_predictions(cases, fresh, only={k[0] for k in keys}):
        c = item[0]
        if (c.corpus, c.file) in out:
            out[(c.corpus, c.file)] = fit.replayed(item, fresh[(c.corpus, c.file)]["confidence"]
                                                   or 0.0, th)
    return out


def measure(replay: bool) -> dict[str, object]:
    ids = study_cases()
    labels = thread_labels(list(ids.values()))
    truth = {i: labels[k] for i, k in ids.items()}
    raw = readings()
    read = {name: {i: (str(r["category"]), str(r["action"])) for i, r in rows.items()}
            for name, rows in raw.items()}
    rows: list[dict[str, object]] = []
    for name, answers in read.items():
        cat, act = accuracy(answers, truth)
        conf = [float(str(r["confidence"])) for r in raw[name].values()]
        rows.append({"answer": f"reader {name}", "cases": len(answers), "category": cat,
                     "action": act, "mean_confidence": sum(conf) / len(conf)})
    packets = sorted({n.split("-")[0] for n in read})
    pairs = []
    for p in packets:
        first, second = sorted(n for n in read if n.startswith(f"{p}-"))
        cat, act = agreement(read[first], read[second])
        pairs.append({"packet": p, "cases": len(read[first]), "category": cat, "action": act})
    for slot in sorted({n.split("-")[1] for n in read}):
        pooled = {i: a for n, ans in read.items() if n.endswith(f"-{slot}") for i, a in ans.items()}
        cat, act = accuracy(pooled, truth)
        rows.append({"answer": f"readers {slot} (all packets)", "cases": len(pooled),
                     "category": cat, "action": act})
    fresh = {(str(r["corpus"]), str(r["file"])): (str(r["category"]), str(r["action"]))
             for r in read_jsonl(DATA / "fresh_rule_answers.jsonl")}
    machine = {"fresh rules": {i: fresh[k] for i, k in ids.items()}}
    if replay:
        got = replay_answers(list(ids.values()))
        machine["fresh rules + text model (replay)"] = {i: got[k] for i, k in ids.items()}
    for name, answers in machine.items():
        cat, act = accuracy(answers, truth)
        rows.append({"answer": name, "cases": len(answers), "category": cat, "action": act})
    return {"cases": len(ids), "rows": rows, "agreement": pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay", action="store_true",
                        help="also the text model fitted without each corpus (needs scikit-learn)")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    result = measure(args.replay)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['cases']} cases\n| answer | cases | category | action |\n|---|---|---|---|")
    for r in result["rows"]:  # type: ignore[attr-defined]
        print(f"| {r['answer']} | {r['cases']} | {r['category']:.1%} | {r['action']:.1%} |")
    print("\n| packet | cases | readers agree on category | on action |\n|---|---|---|---|")
    for p in result["agreement"]:  # type: ignore[attr-defined]
        print(f"| {p['packet']} | {p['cases']} | {p['category']:.1%} | {p['action']:.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
