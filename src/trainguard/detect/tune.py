"""`trainguard tune`: episode thresholds chosen under a false-alarm budget, on the cluster's own
history, and measured on a later part of it that the choice never saw.

1. Split the history in time: tune on the first part, measure on the rest.
2. Run the detector once over the whole history, recording its per-block scores
   (`tune_trace.py`); that run is also the base config's result.
3. Replay every candidate episode setting (score_on, score_off, persistence, cool-down, the
   evidence bars scaled with score_on) over the recorded scores and score it on the tuning
   part with the backtest scorecard.
4. Pick the candidate with the most early detections (alert >= 1 min before the XID), then the
   most detections, then the fewest false alarms, among those within the budget; ties go to the
   setting closest to the base config (no reason in the data to move), then the stricter one.
   A few days of one cluster hold few false alarms, and a setting that just avoids them is
   likely to meet new ones: a candidate qualifies only when its *guard*, the same setting made
   looser by GUARD_FACTOR (lower thresholds, shorter persistence), is within the budget too.
5. Search the early-warning (precursor) thresholds, which act inside the detector and so cost
   one detector run per setting tried, under the same budget and guard, with the episode
   settings just chosen; when another early-warning setting wins, replay the episode settings
   again on its trace (:mod:`.tune_early`; off with ``early_runs=0``).
6. Run the detector again with the chosen config over the whole history and count its alerts on
   each part: the held-out figure is what the config file's calibration reports.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from trainguard.detect.alerts import AlertEpisode, AlertKind
from trainguard.detect.calibration import (
    Calibration,
    KindRate,
    days_for_bound,
    kind_rates,
    poisson_upper95,
)
from trainguard.detect.clustersize import ClusterSize, cluster_size
from trainguard.detect.config import DetectorConfig
from trainguard.detect.detector import detect
from trainguard.detect.scorecard import score
from trainguard.detect.truth import GroundTruth, align_nodes
from trainguard.detect.tune_findings import HardFinding, hard_findings
from trainguard.detect.tune_trace import Trace, record, replay
from trainguard.errors import ConfigError, TrainguardError
from trainguard.telemetry.frame import Telemetry

if TYPE_CHECKING:
    from trainguard.detect.tune_early import EarlyChoice

__all__ = ["EARLY_LEAD_S", "EARLY_RUNS", "EVIDENCE_KNOBS", "GUARD_FACTOR", "MIN_SCORED_S",
           "Budget", "BudgetUnreachable", "Candidate", "Figures", "TuneResult", "candidate_grid",
           "figures", "guard", "min_history_s", "rank", "replay_all", "select", "split_spans",
           "tune", "within_budget"]

log = logging.getLogger(__name__)

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


@dataclass(frozen=True, slots=True)
class TuneResult:
    """The chosen config and the figures that justify it."""

    chosen: DetectorConfig
    base: DetectorConfig
    budget: Budget
    n_nodes: int
    candidates: int
    replayed_tune: Figures
    """The chosen setting on the tuning part, by replay (what the choice was made on)."""
    tune: Figures
    """... by a real detector run."""
    heldout: Figures
    base_tune: Figures
    base_heldout: Figures
    gpus_per_node: int | None = None
    """GPUs per node of the cluster tuned on (None: no per-GPU series)."""
    early: EarlyChoice | None = None
    """The early-warning search (None: not run)."""

    @property
    def size(self) -> ClusterSize:
        return ClusterSize(self.n_nodes, self.gpus_per_node)

    @property
    def heldout_too_short(self) -> bool:
        """The held-out part's 95% upper bound exceeds the budget: too little of it to show
        that the chosen setting meets the budget."""
        return self.heldout.fp_per_day_upper95 > self.budget.fp_per_day + 1e-12

    @property
    def heldout_days_needed(self) -> float:
        """Held-out days on this cluster after which zero false alarms would bound the rate
        within the budget (inf for a budget of 0)."""
        return days_for_bound(self.budget.fp_per_day, self.n_nodes, self.budget.per_nodes)

    @property
    def hard_over_budget(self) -> bool:
        """Hard-evidence false alarms alone exceeded the budget on the tuning part."""
        return self.replayed_tune.hard_fp_per_day > self.budget.fp_per_day + 1e-12

    def calibration(self) -> Calibration:
        return Calibration(self.budget.per_nodes, self.budget.fp_per_day, self.n_nodes,
                           self.tune.span, self.heldout.span, self.heldout.kinds,
                           self.gpus_per_node)

    def to_dict(self) -> dict[str, Any]:
        changed = {k: getattr(self.chosen, k) for k in (
            "score_on", "score_off", "persist_blocks", "persist_gauge_blocks", "cooldown_s")}
        need = self.heldout_days_needed
        return {"budget": {"fp_per_day": self.budget.fp_per_day,
                           "per_nodes": self.budget.per_nodes},
                "n_nodes": self.n_nodes, "gpus_per_node": self.gpus_per_node,
                "heldout_bound": {
                    "fp_per_day_upper95": round(self.heldout.fp_per_day_upper95, 4),
                    "over_budget": self.heldout_too_short,
                    "days_needed_at_zero_fp": None if math.isinf(need) else round(need, 2)},
                "candidates": self.candidates, "chosen": changed,
                "hard_over_budget": self.hard_over_budget,
                "tuned": {"replay": self.replayed_tune.to_dict(), "run": self.tune.to_dict()},
                "heldout": self.heldout.to_dict(),
                "early_warning": None if self.early is None else self.early.to_dict(self.budget),
                "default": {"tuned": self.base_tune.to_dict(),
                            "heldout": self.base_heldout.to_dict()}}


def _check_history(tel: Telemetry, base: DetectorConfig, fraction: float) -> None:
    have = (float(tel.times[-1]) + tel.step_s - float(tel.times[0])) if tel.times.size else 0.0
    need = min_history_s(base, fraction)
    if have < need:
        raise ConfigError(
            f"too little history to tune: {have / 3600:.1f} h; with --split {fraction:g} it "
            f"needs at least {need / 3600:.1f} h (each part: the detector's "
            f"{base.warmup_s / 3600:.1f} h warm-up plus {MIN_SCORED_S / 3600:.0f} h scored)")


def tune(tel: Telemetry, truth: GroundTruth, budget: Budget, *, base: DetectorConfig | None = None,
         fraction: float = 0.5, progress: Progress | None = None,
         early_runs: int = EARLY_RUNS) -> TuneResult:
    """Choose episode and early-warning settings for `tel` under `budget`, the latter with at
    most `early_runs` more detector runs (0: not searched; see the module docstring)."""
    base = base or DetectorConfig()
    _check_history(tel, base, fraction)
    truth, _ = align_nodes(truth, tel.nodes)
    t0, t1 = float(tel.times[0]), float(tel.times[-1]) + tel.step_s
    tune_span, held_span = split_spans(t0, t1, fraction)
    n_tune = sum(tune_span[0] <= f.time <= tune_span[1] for f in truth.failures)
    if n_tune == 0:
        raise ConfigError(
            f"no known failure in the tuning part ({len(truth.failures)} in all): tuning needs "
            "failures to detect; give a longer history, a later --split, or the failures "
            "(--failures / --kernel-logs)")
    n = len(tel.nodes)

    def prog(stage: str) -> Callable[[int, int], None] | None:
        return None if progress is None else (lambda d, t: progress(stage, d, t))

    trace, base_alerts = record(tel, base, progress=prog("scoring"))
    cands = candidate_grid(base)
    scored = replay_all(trace, cands, truth, tune_span, n, budget.per_nodes, prog("replaying"))
    best = select(scored, budget, base)
    if best is None:
        lowest = min(max(c.fig.fp_per_day, c.guard.fp_per_day) for c in scored)
        raise BudgetUnreachable(
            f"no setting keeps false alarms within {budget.fp_per_day:g}/day per "
            f"{budget.per_nodes} nodes on the tuning part, with margin: the lowest is "
            f"{lowest:.2f} (a looser copy of each setting must meet the budget too)")
    winner, early = scored[best], None
    if early_runs > 0:
        from trainguard.detect.tune_early import search  # it builds on this module

        early, winner = search(tel, truth, tune_span, budget, base, winner, trace,
                               max_runs=early_runs, progress=progress)
    chosen, replayed = winner.cfg, winner.fig
    log.info("chosen: score_on=%.3g persist=%d/%d", chosen.score_on, chosen.persist_blocks,
             chosen.persist_gauge_blocks)
    alerts = detect(tel, chosen, progress=prog("measuring"))

    def fig(a: Sequence[AlertEpisode], span: tuple[float, float]) -> Figures:
        return figures(a, truth, span, n, budget.per_nodes)

    return TuneResult(chosen, base, budget, n, len(cands), replayed, fig(alerts, tune_span),
                      fig(alerts, held_span), fig(base_alerts, tune_span),
                      fig(base_alerts, held_span), cluster_size(tel).gpus_per_node, early)


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
