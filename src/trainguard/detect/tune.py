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
6. Count the chosen config's alerts on each part, from a real detector run over the whole
   history: the held-out figure is what the config file's calibration reports. The run is the
   base's or one the early-warning search made when either was of the chosen config itself
   (replays are not bit-identical to a run, runs of one config are), else one more run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.detect.alerts import AlertEpisode
from trainguard.detect.calibration import Calibration, days_for_bound
from trainguard.detect.clustersize import ClusterSize, cluster_size
from trainguard.detect.config import DetectorConfig
from trainguard.detect.detector import detect
from trainguard.detect.truth import GroundTruth, align_nodes
from trainguard.detect.tune_early import EarlyChoice, search
from trainguard.detect.tune_grid import (
    EARLY_LEAD_S,
    EARLY_RUNS,
    EVIDENCE_KNOBS,
    GUARD_FACTOR,
    MIN_SCORED_S,
    Budget,
    BudgetUnreachable,
    Candidate,
    Figures,
    Progress,
    candidate_grid,
    figures,
    guard,
    min_history_s,
    rank,
    replay_all,
    select,
    split_spans,
    within_budget,
)
from trainguard.detect.tune_trace import record
from trainguard.errors import ConfigError
from trainguard.telemetry.frame import Telemetry

__all__ = ["EARLY_LEAD_S", "EARLY_RUNS", "EVIDENCE_KNOBS", "GUARD_FACTOR", "MIN_SCORED_S",
           "Budget", "BudgetUnreachable", "Candidate", "Figures", "TuneResult", "candidate_grid",
           "figures", "guard", "min_history_s", "rank", "replay_all", "select", "split_spans",
           "tune", "within_budget"]

log = logging.getLogger(__name__)


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
    winner, early, ran = scored[best], None, None
    if early_runs > 0:
        early, winner, ran = search(tel, truth, tune_span, budget, base, winner, trace,
                                    max_runs=early_runs, progress=progress)
    chosen, replayed = winner.cfg, winner.fig
    log.info("chosen: score_on=%.3g persist=%d/%d", chosen.score_on, chosen.persist_blocks,
             chosen.persist_gauge_blocks)
    alerts = base_alerts if chosen == base else ran
    if alerts is None:
        alerts = detect(tel, chosen, progress=prog("measuring"))
    elif progress is not None:  # measured by that earlier run: the stage is done at once
        progress("measuring", int(tel.times.size), int(tel.times.size))

    def fig(a: Sequence[AlertEpisode], span: tuple[float, float]) -> Figures:
        return figures(a, truth, span, n, budget.per_nodes)

    return TuneResult(chosen, base, budget, n, len(cands), replayed, fig(alerts, tune_span),
                      fig(alerts, held_span), fig(base_alerts, tune_span),
                      fig(base_alerts, held_span), cluster_size(tel).gpus_per_node, early)
