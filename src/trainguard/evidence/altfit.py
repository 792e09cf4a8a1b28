"""Fitting the ``unknown`` alternatives (``alternatives.py``) on a labelled corpus.

A corpus is a folder with ``labels.jsonl`` (one ``{"file": ..., "category": ...}`` per line) and
the files it names, as ``tests/data/realworld/``. A case's sample is the cues of every line the
scanner reports an event for (``logs classify``'s scan: failure-word lines included), with the
case's label; ``scripts/calibrate_alternatives.py`` turns the samples into
``data/alternatives.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainguard.evidence.alternatives import CATEGORIES, cues_in
from trainguard.evidence.rules import RuleSet, load_rules
from trainguard.evidence.scanner import ScanOptions, scan_paths

_KNOWN = frozenset(c.value for c in CATEGORIES)


def case_lines(path: Path, rules: RuleSet) -> list[str]:
    """The text of every evidence line of every event the scan reports for one file."""
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=True))
    return list(dict.fromkeys(line.program_text for e in events for line in e.evidence))


def corpus_samples(corpus: Path) -> list[tuple[frozenset[str], str]]:
    """(cues, category) per labelled case of ``corpus``, labels outside the taxonomy skipped."""
    rules = load_rules()
    out: list[tuple[frozenset[str], str]] = []
    for raw in (corpus / "labels.jsonl").read_text(encoding="utf-8").splitlines():
        if not raw.strip():
            continue
        lab = json.loads(raw)
        if lab["category"] not in _KNOWN:
            continue
        lines = case_lines(corpus / str(lab["file"]), rules)
        out.append((frozenset().union(*map(cues_in, lines)) if lines else frozenset(),
                    str(lab["category"])))
    return out


__all__ = ["case_lines", "corpus_samples"]
