"""``unknown`` incidents name their two most likely categories with calibrated confidence and
the lines behind them (alternatives.py), calibrated on the development corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.evidence import ScanOptions, correlate, load_rules, scan_paths
from trainguard.evidence.actions import builtin_model
from trainguard.evidence.alternatives import (
    BIN_EDGES,
    builtin_calibration,
    cues_in,
    fit,
    raw_probabilities,
    to_json,
)
from trainguard.evidence.altfit import corpus_samples
from trainguard.evidence.incidents import Incident
from trainguard.taxonomy import Category

CORPUS = Path(__file__).resolve().parents[2] / "data" / "realworld"
DATA = Path(__file__).resolve().parents[3] / "src" / "trainguard" / "evidence" / "data"

UNKNOWN_LOG = [
    "2025-03-04 08:00:00 step 1200 loss 2.31",
    "2025-03-04 08:00:05 rank 3: fatal: worker lost while writing shard to /ckpt/step_1200",
    "2025-03-04 08:00:06 job aborted",
]


@pytest.fixture(scope="module")
def samples() -> list[tuple[frozenset[str], str]]:
    return corpus_samples(CORPUS)


def test_cues_are_generic_words() -> None:
    assert {"timeout", "collective"} <= cues_in("NCCL all_reduce timed out")
    assert "memory" in cues_in("process killed: out of memory")
    assert cues_in("step 10 loss 2.0 lr 3e-4") == frozenset({"numeric"})
    assert cues_in("") == frozenset()


def test_the_stored_calibration_is_what_the_dev_corpus_gives(
        samples: list[tuple[frozenset[str], str]]) -> None:
    """Regenerate with scripts/calibrate_alternatives.py when rules or cues change."""
    stored = (DATA / "alternatives.json").read_text(encoding="utf-8")
    assert to_json(fit(samples), "tests/data/realworld") == stored


def _reliability(cal_samples: list[tuple[frozenset[str], str]],
                 test_samples: list[tuple[frozenset[str], str]]) -> list[tuple[float, bool]]:
    cal = fit(cal_samples)
    out = []
    for cues, cat in test_samples:
        probs = raw_probabilities(cal.counts, cues)
        for c, p in sorted(probs.items(), key=lambda kv: -kv[1])[:2]:
            out.append((cal.confidence(p), c == cat))
    return out


def test_confidence_is_calibrated_on_cases_it_was_not_fitted_on(
        samples: list[tuple[frozenset[str], str]]) -> None:
    """Fit on half the dev corpus, check on the other half (both ways): among alternatives
    given at confidence c, about c are right."""
    halves = samples[0::2], samples[1::2]
    preds = _reliability(halves[0], halves[1]) + _reliability(halves[1], halves[0])
    mean_conf = sum(c for c, _ in preds) / len(preds)
    rate = sum(r for _, r in preds) / len(preds)
    assert abs(mean_conf - rate) <= 0.1, (mean_conf, rate)
    low = [r for c, r in preds if c < 0.35]
    high = [r for c, r in preds if c >= 0.5]
    assert len(low) >= 20 and len(high) >= 20
    assert sum(low) / len(low) < 0.35 < 0.5 <= sum(high) / len(high) + 0.1


def test_calibration_is_monotone() -> None:
    bins = builtin_calibration().bins
    assert [e for e, _ in bins] == list(BIN_EDGES)
    confs = [c for _, c in bins]
    assert confs == sorted(confs) and all(0 < c < 1 for c in confs)


def test_the_right_category_is_among_the_two_most_of_the_time(
        samples: list[tuple[frozenset[str], str]]) -> None:
    from trainguard.evidence.alternatives import loo_predictions
    preds = loo_predictions(samples)
    pairs = list(zip(preds[0::2], preds[1::2], strict=True))
    covered = sum(a[1] or b[1] for a, b in pairs) / len(pairs)
    assert covered >= 0.7, covered


def _incidents(tmp_path: Path, lines: list[str]) -> list[Incident]:
    path = tmp_path / "job.log"
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    rules = load_rules()
    events, _ = scan_paths([str(path)], rules, ScanOptions(suspicious_lines=True))
    return correlate(events, rules)


def test_an_unknown_incident_gives_two_alternatives_with_their_lines(tmp_path: Path) -> None:
    (inc,) = _incidents(tmp_path, UNKNOWN_LOG)
    assert inc.root_cause.category is Category.UNKNOWN  # no signature explains it
    alts = inc.alternatives
    # The top alternative answers only when confident enough (inference.py); both stay listed.
    answered = alts[0].confidence >= builtin_model()[1]
    assert inc.inferred is answered
    assert inc.category is (alts[0].category if answered else Category.UNKNOWN)
    assert len(alts) == 2
    assert alts[0].confidence >= alts[1].confidence
    assert {a.category for a in alts}.isdisjoint({Category.UNKNOWN})
    for a in alts:
        assert a.lines and all(line.line_no in (2, 3) for line in a.lines)
    d = inc.to_dict()
    assert [a["category"] for a in d["alternatives"]] == [a.category.value for a in alts]


def test_a_known_incident_gives_none(tmp_path: Path) -> None:
    (inc,) = _incidents(tmp_path, ["2025-03-04 08:00:00 OSError: [Errno 28] No space left on "
                                   "device"])
    assert inc.alternatives == ()
    assert inc.to_dict()["alternatives"] == []


def test_cli_shows_the_alternatives(tmp_path: Path) -> None:
    path = tmp_path / "job.log"
    path.write_text("".join(f"{line}\n" for line in UNKNOWN_LOG), encoding="utf-8")
    cli = [sys.executable, "-m", "trainguard.cli.main", "logs", "classify"]
    js = subprocess.run([*cli, "--json", str(path)], capture_output=True, text=True, timeout=60)
    assert js.returncode == 0, js.stderr
    alts = json.loads(js.stdout.splitlines()[0])["alternatives"]
    assert len(alts) == 2
    term = subprocess.run([*cli, str(path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "220"})
    assert term.returncode == 0, term.stderr
    for a in alts:
        assert f"likely {a['category']} {a['confidence']:.2f}" in term.stdout
