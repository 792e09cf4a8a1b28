"""Write src/trainguard/evidence/data/alternatives.json from the development corpus.

    python scripts/calibrate_alternatives.py [CORPUS]   (default tests/data/realworld)

The file holds how often each cue of ``trainguard.evidence.alternatives.CUES`` occurs in each
category's cases and the leave-one-out calibration bins; tests check it is what this script
writes for the corpus in the tree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainguard.evidence.alternatives import fit, to_json
from trainguard.evidence.altfit import corpus_samples

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT / "tests" / "data" / "realworld"
OUT = ROOT / "src" / "trainguard" / "evidence" / "data" / "alternatives.json"


def main(argv: list[str]) -> int:
    corpus = Path(argv[0]) if argv else DEFAULT_CORPUS
    samples = corpus_samples(corpus)
    cal = fit(samples)
    OUT.write_text(to_json(cal, "tests/data/realworld"), encoding="utf-8")
    print(f"{len(samples)} cases -> {OUT.relative_to(ROOT)}; bins {cal.bins}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
