"""`trainguard tune`'s building blocks: the budget, a setting's figures on a part of the
history, the candidate grid and its guards, and how candidates are ranked and selected. Shared by
the episode-setting search (`tune.py`) and the early-warning search (`tune_early.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from trainguard.detect.alerts import AlertEpisode, AlertKind
from trainguard.detect.calibration import KindRate, kind_rates, poisson_upper95
from trainguard.detect.config import DetectorConfig
from trainguard.detect.scorecard import score
from trainguard.detect.truth import GroundTruth
from trainguard.detect.tune_findings import HardFinding, hard_findings
from trainguard.detect.tune_trace import Trace, replay
from trainguard.errors import ConfigError, TrainguardError

__all__ = ["EARLY_LEAD_S", "EARLY_RUNS", "EVIDENCE_KNOBS", "GUARD_FACTOR", "MIN_SCORED_S",
           "Budget", "BudgetUnreachable", "Candidate", "Figures", "Progress", "candidate_grid",
           "figures", "guard", "min_history_s", "rank", "replay_all", "select", "split_spans",
           "within_budget"]

EARLY_LEAD_S = 60.0
"""An alert this long or longer before the XID is an early detection."""
MIN_SCORED_S = 6 * 3600.0
"""Each part needs this much history after the detector's warm-up."""

SCORE_ON_FACTORS = (0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)
"""Candidate score_on, as multiples of the base config's."""
SCORE_OFF_RATIOS = (None, 0.7)
"""Candidate score_off / score_on (None: the base config's ratio)."""
PERSIST_BLOCKS = (2, 3, 4, 6, 8)
PERSIST_GAUGE_BLOCKS = (6, 9, 12, 18, 24, 36)
COOLDOWN_FACTORS = (1.0,)
EVIDENCE_KNOBS = ("evidence_counter", "evidence_activity")
"""Episode thresholds in score units x blocks (accumulated evidence): scaled with score_on.
Looked up by name, so a DetectorConfig without them is tuned without them."""
GUARD_FACTOR = 1.25
"""A candidate's guard divides its thresholds and persistence by this (see step 4)."""
EARLY_RUNS = 8
"""Default cap on the early-warning search's detector runs (settings tried plus guards)."""

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total)."""


class BudgetUnreachable(TrainguardError):
    """No candidate setting keeps the false alarms within the budget on the tuning part."""


@dataclass(frozen=True, slots=True)
class Budget:
    """At most `fp_per_day` false alarms per day per `per_nodes` nodes."""

    fp_per_day: float
    per_nodes: int = 64

    def __post_init__(self) -> None:
        if not self.fp_per_day >= 0:
            raise ConfigError("--fp-per-day must be >= 0")
        if self.per_nodes < 1:
            raise ConfigError("--per-nodes must be >= 1")


@dataclass(frozen=True, slots=True)
class Figures:
    """One config's result on one part of the history."""

    span: tuple[float, float]
    n_failures: int
    detected: int
    early: int
    """Failures alerted at least EARLY_LEAD_S before the XID."""
    false_positives: int
    fp_per_day: float
    """Per day per `Budget.per_nodes` nodes."""
    kinds: tuple[KindRate, ...]
    fp_per_day_upper95: float
    """One-sided 95% upper bound of `fp_per_day` (all kinds together)."""
    hard: tuple[HardFinding, ...] = ()
    """Hard-evidence false alarms by metric (:mod:`.tune_findings`)."""

    @property
    def days(self) -> float:
        return (self.span[1] - self.span[0]) / 86400.0

    @property
    def hard_fp_per_day(self) -> float:
        """The part of `fp_per_day` from hard-evidence alerts (episode settings do not change
        it)."""
        return sum(k.fp_per_day for k in self.kinds if k.kind == AlertKind.HARD.value)

    def to_dict(self) -> dict[str, Any]:
        return {"span": list(self.span), "days": round(self.days, 4),
                "failures": self.n_failures, "detected": self.detected, "early": self.early,
                "false_positives": self.false_positives,
                "fp_per_day": round(self.fp_per_day, 4),
                "fp_per_day_upper95": round(self.fp_per_day_upper95, 4),
                "by_kind": {k.kind: {"false_positives": k.false_positives,
                                     "fp_per_day": round(k.fp_per_day, 4),
                                     "fp_per_day_upper95": round(k.fp_per_day_upper95, 4)}
                            for k in self.kinds},
                "hard_findings": [f.to_dict() for f in self.hard]}


def figures(alerts: Sequence[AlertEpisode], truth: GroundTruth, span: tuple[float, float],
            n_nodes: int, per_nodes: int) -> Figures:
    """Score `alerts` whose onsets fall in `span` (failures in `span` only)."""
    card = score(alerts, truth, span, n_nodes, name="")
    early = sum(m.lead_s is not None and m.lead_s >= EARLY_LEAD_S for m in card.matches)
    days = card.days
    scale = per_nodes / n_nodes / days if days > 0 and n_nodes else 0.0
    return Figures(span, card.total.n, card.total.detected, early, card.false_positives,
                   card.false_positives * scale,
                   kind_rates(card.fp_alerts, days, n_nodes, per_nodes),
                   poisson_upper95(card.false_positives) * scale,
                   hard_findings(card.fp_alerts, days=days, n_nodes=n_nodes,
                                 per_nodes=per_nodes))


def split_spans(t0: float, t1: float, fraction: float
                ) -> tuple[tuple[float, float], tuple[float, float]]:
    """The tuning part [t0, cut) and the held-out part [cut, t1], cut at `fraction`."""
    if not 0 < fraction < 1:
        raise ConfigError(f"--split must be between 0 and 1 (got {fraction})")
    cut = t0 + fraction * (t1 - t0)
    return (t0, cut), (cut, t1)


def min_history_s(cfg: DetectorConfig, fraction: float) -> float:
    """History needed so that the shorter part holds the warm-up plus MIN_SCORED_S."""
    return (cfg.warmup_s + MIN_SCORED_S) / min(fraction, 1.0 - fraction)


def candidate_grid(base: DetectorConfig) -> list[DetectorConfig]:
    """Episode settings to try, around `base` (its other fields kept)."""
    base_ratio = base.score_off / base.score_on if base.score_on > 0 else 0.0
    out = []
    for f_on in SCORE_ON_FACTORS:
        on = base.score_on * f_on
        scaled = _scaled_evidence(base, f_on)
        for ratio in SCORE_OFF_RATIOS:
            off = on * (base_ratio if ratio is None else ratio)
            for pb in PERSIST_BLOCKS:
                for pg in PERSIST_GAUGE_BLOCKS:
                    for f_cd in COOLDOWN_FACTORS:
                        out.append(replace(base, score_on=on, score_off=off, persist_blocks=pb,
                                           persist_gauge_blocks=pg,
                                           cooldown_s=base.cooldown_s * f_cd, **scaled))
    # the same setting twice (e.g. ratio == base ratio) would only cost time
    return list(dict.fromkeys(out))


def _scaled_evidence(cfg: DetectorConfig, factor: float) -> dict[str, Any]:
    have = {f.name for f in fields(cfg)}
    return {k: float(getattr(cfg, k)) * factor for k in EVIDENCE_KNOBS if k in have}


def guard(cfg: DetectorConfig) -> DetectorConfig:
    """`cfg` made looser by GUARD_FACTOR: what the budget must also hold for."""
    g = GUARD_FACTOR
    return replace(cfg, score_on=cfg.score_on / g, score_off=cfg.score_off / g,
                   persist_blocks=max(1, round(cfg.persist_blocks / g)),
                   persist_gauge_blocks=max(1, round(cfg.persist_gauge_blocks / g)),
                   **_scaled_evidence(cfg, 1.0 / g))


def _distance(cfg: DetectorConfig, base: DetectorConfig) -> float:
    """How far `cfg` moved from `base` (sum of absolute log ratios of the tuned knobs)."""
    pairs = ((cfg.score_on, base.score_on), (cfg.score_off, base.score_off),
             (cfg.persist_blocks, base.persist_blocks),
             (cfg.persist_gauge_blocks, base.persist_gauge_blocks),
             (cfg.cooldown_s, base.cooldown_s))
    return sum(abs(math.log(a / b)) for a, b in pairs if a > 0 and b > 0)


def rank(cfg: DetectorConfig, fig: Figures, base: DetectorConfig) -> tuple[float, ...]:
    """Sort key of an episode setting: the best is the largest (see the module docstring)."""
    # Ties: the setting closest to the base (the data gave no reason to move further), then
    # the stricter one.
    return (fig.early, fig.detected, -fig.false_positives, -round(_distance(cfg, base), 9),
            cfg.score_on, cfg.persist_gauge_blocks, cfg.persist_blocks, cfg.score_off)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One setting's figures on the tuning part, and its guard's."""

    cfg: DetectorConfig
    fig: Figures
    guard: Figures

    def within(self, budget: Budget) -> bool:
        """Within budget, with its guard. Hard-evidence false alarms are the same for every
        setting: the predictive ones get what they leave of the budget, and none when they
        take all of it (the strictest setting that still detects wins, see `tune`)."""
        return within_budget(self.fig, budget) and within_budget(self.guard, budget)


def within_budget(f: Figures, budget: Budget) -> bool:
    """`f`'s predictive false alarms fit in what its hard-evidence ones leave of `budget`."""
    hard = f.hard_fp_per_day
    return f.fp_per_day - hard <= max(budget.fp_per_day - hard, 0.0) + 1e-12


def select(cands: Sequence[Candidate], budget: Budget, base: DetectorConfig) -> int | None:
    """Index of the best candidate within `budget` (see the module docstring), or None."""
    ok = [i for i, c in enumerate(cands) if c.within(budget)]
    if not ok:
        return None
    return max(ok, key=lambda i: rank(cands[i].cfg, cands[i].fig, base))


def replay_all(trace: Trace, cands: Sequence[DetectorConfig], truth: GroundTruth,
               span: tuple[float, float], n_nodes: int, per_nodes: int,
               progress: Callable[[int, int], None] | None
               ) -> list[Candidate]:
    """Each candidate's figures on `span`, and its guard's, by replay of `trace`."""
    out = []
    for i, cfg in enumerate(cands):
        out.append(Candidate(cfg, figures(replay(trace, cfg), truth, span, n_nodes, per_nodes),
                             figures(replay(trace, guard(cfg)), truth, span, n_nodes,
                                     per_nodes)))
        if progress is not None and (i % 20 == 19 or i == len(cands) - 1):
            progress(i + 1, len(cands))
    return out
