"""Aggregate accuracy of `trainguard logs classify` on a labelled log corpus (category and action
of the first incident, as the CLI scans), printed as aggregates only: held-out corpora are
measured once per round of rule work and never read case by case.

    python scripts/corpus_accuracy.py tests/data/realworld_heldout3 [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths


def first_incident(path: Path) -> tuple[str, str]:
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=True))
    incidents = correlate(events, rules)
    if not incidents:
        return "unknown", "none"
    return incidents[0].category.value, incidents[0].action.value


def measure(corpus: Path) -> dict[str, object]:
    labels = [json.loads(line) for line in (corpus / "labels.jsonl").read_text().splitlines()
              if line.strip()]
    category = action = unknown = 0
    for lab in labels:
        cat, act = first_incident(corpus / str(lab["file"]))
        category += cat == lab["category"]
        action += act == lab["action"]
        unknown += cat == "unknown"
    n = len(labels)
    return {"corpus": str(corpus), "cases": n, "category": category / n, "action": action / n,
            "unknown": unknown / n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not (args.corpus / "labels.jsonl").is_file():
        print(f"error: {args.corpus} has no labels.jsonl", file=sys.stderr)
        return 2
    result = measure(args.corpus)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['corpus']}: {result['cases']} cases; category {result['category']:.1%}, "
              f"action {result['action']:.1%}, unknown {result['unknown']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
