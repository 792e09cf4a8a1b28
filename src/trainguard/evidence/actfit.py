"""Fitting and cross-validating the learned decisions (``inference.py``) on labelled corpora.

A corpus is a folder with ``labels.jsonl`` (``{"file", "category", "action"}`` per line), as
``tests/data/realworld/``. A :class:`Case` is what the rules alone say of a labelled file (its
first incident as ``logs classify`` scans, models off) and the label.

Both thresholds are chosen by cross-validation, never in-sample:

* the config model's (``actions.py``): fitted on one corpus and scored on the other, both
  ways, and leave-one-out over both; the threshold is the one with the most actions gained
  among those that lose none in any of the three (:data:`~trainguard.evidence.actions.NEVER`,
  the model off, when none gains);
* the answer threshold: the cue model (``alternatives.py``) calibrated on one corpus answers
  the other's ``unknown`` incidents, both ways; the threshold with the most right answers net
  of wrong ones, none of the two folds net negative, the highest of equals.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainguard.evidence.actions import (
    NEVER,
    ActionSample,
    ConfigModel,
    config_probability,
    count,
    cues_of,
    is_candidate,
)
from trainguard.evidence.alternatives import Calibration, alternatives
from trainguard.evidence.events import EvidenceLine
from trainguard.evidence.incidents import correlate
from trainguard.evidence.inference import infer
from trainguard.evidence.rules import load_rules
from trainguard.evidence.scanner import ScanOptions, scan_paths
from trainguard.taxonomy import Action, Category

CONFIG_GRID: tuple[float, ...] = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))
ANSWER_GRID: tuple[float, ...] = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))
"""Answer thresholds tried: from 0.5 up, an answer is never one the model itself calls less
likely right than wrong."""


@dataclass(frozen=True, slots=True)
class Case:
    """A labelled file and what the rules alone say of it (its first incident)."""

    category: str
    action: str
    rule_category: Category
    rule_action: Action
    root_lines: tuple[str, ...]
    lines: tuple[EvidenceLine, ...]
    suspicious: bool = False
    """No signature explains it (failure words only): the answer model may guess."""

    @property
    def sample(self) -> ActionSample:
        return ActionSample(cues_of(self.root_lines), self.rule_category.value,
                            self.rule_action.value, self.action)


@dataclass(frozen=True, slots=True)
class Score:
    """How a corpus fared: right categories, right actions, unknowns, wrong answers made."""

    cases: int
    category: int
    action: int
    unknown: int
    answered_wrong: int

    def rates(self) -> dict[str, float | int]:
        n = max(1, self.cases)
        return {"cases": self.cases, "category": self.category / n, "action": self.action / n,
                "unknown": self.unknown / n, "answered_wrong": self.answered_wrong / n}


def corpus_cases(corpus: Path) -> list[Case]:
    """The cases of a labelled corpus (I/O: scans every file)."""
    rules = load_rules()
    out: list[Case] = []
    for raw in (corpus / "labels.jsonl").read_text(encoding="utf-8").splitlines():
        if not raw.strip():
            continue
        lab = json.loads(raw)
        events, _ = scan_paths([str(corpus / str(lab["file"]))], rules,
                               ScanOptions(suspicious_lines=True))
        incidents = correlate(events, rules, learned=False)
        cat, act = str(lab["category"]), str(lab["action"])
        if not incidents:
            out.append(Case(cat, act, Category.UNKNOWN, Action.NONE, (), ()))
            continue
        inc = incidents[0]
        out.append(Case(cat, act, inc.category, inc.action,
                        tuple(e.program_text for e in inc.root_cause.evidence), inc.lines,
                        inc.suspicious))
    return out


def decide(case: Case, cal: Calibration, model: ConfigModel, answer_threshold: float
           ) -> tuple[str, str]:
    """(category, action) the classifier gives with these models and thresholds."""
    alts = alternatives(case.lines, cal) if case.suspicious else ()
    inf = infer(case.rule_category, case.rule_action, case.root_lines, alts,
                (model, answer_threshold), lines=[e.program_text for e in case.lines])
    cat, act = inf.applied(case.rule_category, case.rule_action)
    return cat.value, act.value


def score(cases: Sequence[Case], cal: Calibration, model: ConfigModel,
          answer_threshold: float) -> Score:
    cat_ok = act_ok = unknown = wrong = 0
    for case in cases:
        cat, act = decide(case, cal, model, answer_threshold)
        cat_ok += cat == case.category
        act_ok += act == case.action
        unknown += cat == Category.UNKNOWN.value
        wrong += case.rule_category is Category.UNKNOWN and cat not in (
            Category.UNKNOWN.value, case.category)
    return Score(len(cases), cat_ok, act_ok, unknown, wrong)


def _net(pairs: Sequence[tuple[float, bool]], threshold: float) -> int:
    """Right minus wrong among the (probability, right?) pairs at or above ``threshold``."""
    return sum(1 if right else -1 for p, right in pairs if p >= threshold)


def config_pairs(train: Sequence[Case], test: Sequence[Case]) -> list[tuple[float, bool]]:
    """(P(fix_config), is it?) of each candidate test case, the model counted on ``train``."""
    model = count(c.sample for c in train if c.rule_category is not Category.UNKNOWN)
    return [(config_probability(model, c.sample.cues, c.rule_category.value),
             c.action == Action.FIX_CONFIG.value)
            for c in test if c.rule_category is not Category.UNKNOWN and is_candidate(c.sample)]


def loo_config_pairs(cases: Sequence[Case]) -> list[tuple[float, bool]]:
    """:func:`config_pairs` for each case with the model counted on all the others."""
    out: list[tuple[float, bool]] = []
    for i, case in enumerate(cases):
        out.extend(config_pairs([*cases[:i], *cases[i + 1:]], [case]))
    return out


def choose(grid: Sequence[float], folds: Sequence[Sequence[tuple[float, bool]]],
           objective: Callable[[list[int]], int]) -> float:
    """The grid value with the best ``objective`` over the folds' nets, no fold negative, the
    highest of equals; :data:`NEVER` when none gains."""
    best, best_value = NEVER, 0
    for t in grid:
        nets = [_net(f, t) for f in folds]
        if min(nets) < 0:
            continue
        value = objective(nets)
        if value > best_value or (value == best_value and value > 0):
            best, best_value = t, value
    return best


def choose_config_threshold(a: Sequence[Case], b: Sequence[Case]) -> float:
    """Most actions gained leaving one out over both corpora, none lost in any fold."""
    folds = [config_pairs(a, b), config_pairs(b, a), loo_config_pairs([*a, *b])]
    return choose(CONFIG_GRID, folds, lambda nets: nets[-1])


def answer_pairs(cal: Calibration, test: Sequence[Case]) -> list[tuple[float, bool]]:
    """(top alternative's confidence, is it right?) for the test's ``unknown`` cases."""
    out: list[tuple[float, bool]] = []
    for case in test:
        if case.suspicious and case.lines:
            alts = alternatives(case.lines, cal)
            if alts:
                out.append((alts[0].confidence, alts[0].category.value == case.category))
    return out


def choose_answer_threshold(folds: Sequence[Sequence[tuple[float, bool]]]) -> float:
    return choose(ANSWER_GRID, folds, sum)


__all__ = ["ANSWER_GRID", "CONFIG_GRID", "Case", "Score", "answer_pairs", "choose",
           "choose_answer_threshold", "choose_config_threshold", "config_pairs",
           "corpus_cases", "decide", "loo_config_pairs", "score"]
