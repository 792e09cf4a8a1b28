"""`trainguard tune`'s search over the early-warning (precursor) thresholds.

The early-warning rules (`precursors.py`, `trend.py`) and the known-precursor weight act inside
the detector, before the episode tracker: a recorded score trace cannot replay them, so each
setting tried costs one detector run over the whole history. The search is therefore small and
bounded:

1. The knobs form groups (:data:`EARLY_GROUPS`: recurring error counts, stalls, jitter, slow
   degradation, the known-precursor weight, host collapse, the confirmation window). A *level*
   moves every knob of one group by the same number of steps from the base config, stricter
   (> 0) or looser (< 0), always within the knob's valid range (:func:`level`).
   `precursor_window_blocks` is not searched: the event counts are moved within it.
2. Coordinate-wise, in :data:`EARLY_GROUPS` order: each group one level stricter, then one level
   looser, for as long as the cap on detector runs allows (:func:`plan`).
3. Each setting runs with the episode settings chosen on the base config's trace, and is scored
   on the tuning part. It qualifies when it is within the budget, with its episode guard (as
   in `tune`) and with its *early guard*: the same setting one level looser (for one level
   stricter that is the base itself, already run; for one level looser it costs a run more).
4. The most early detections, then detections, then the fewest false alarms; ties go to the
   base settings (no reason in the data to move), then to the stricter setting (:func:`pick`).
5. When a setting other than the base wins, the episode settings are tuned again by replay on
   its trace (episode settings are tuned *after* the early-warning choice, not jointly); the
   replayed choice must keep the early guard within the budget too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainguard.detect.alerts import AlertEpisode
from trainguard.detect.config import DetectorConfig
from trainguard.detect.trend import SLOTS
from trainguard.detect.truth import GroundTruth
from trainguard.detect.tune_grid import (
    EARLY_RUNS,
    Budget,
    Candidate,
    Figures,
    Progress,
    candidate_grid,
    figures,
    guard,
    rank,
    replay_all,
    within_budget,
)
from trainguard.detect.tune_trace import Trace, record, replay
from trainguard.telemetry.frame import Telemetry

__all__ = ["EARLY_GROUPS", "EARLY_KNOBS", "EARLY_RUNS", "EarlyChoice", "Move", "Trial",
           "level", "pick", "plan", "search"]

EARLY_GROUPS: dict[str, tuple[str, ...]] = {
    "precursor": ("precursor_min_events", "precursor_background_ratio", "precursor_confidence",
                  "precursor_burst_events", "precursor_burst_confidence"),
    "stall": ("stall_fraction", "stall_min_events"),
    "jitter": ("jitter_ratio", "jitter_blocks"),
    "trend": ("trend_min_events", "trend_confidence", "trend_min_span_s"),
    "known_weight": ("known_precursor_weight",),
    "host_collapse": ("host_collapse_fraction", "host_collapse_blocks"),
    "confirm": ("precursor_confirm_s",),
}
"""The knobs each level moves together, in the order the search tries them."""
EARLY_KNOBS = tuple(k for knobs in EARLY_GROUPS.values() for k in knobs)
CONFIRM_LADDER_S = (24 * 3600.0, 12 * 3600.0, 6 * 3600.0, 3 * 3600.0, 3600.0)
"""`precursor_confirm_s` from loosest to strictest: a shorter and shorter time in which the same
GPU must confirm a jitter hit. Off (0) is the operator's choice, never the search's."""


def _within(value: float, base: float, lo: float, hi: float) -> float:
    """`value` kept in [lo, hi], widened to hold `base` (a level never passes the base)."""
    return min(max(value, min(lo, base)), max(hi, base))


def _num(x: float) -> float:
    return float(f"{x:.6g}")


def level(base: DetectorConfig, group: str, step: int) -> dict[str, Any]:
    """The knobs of `group` moved `step` levels from `base`: > 0 stricter (fewer early
    warnings), < 0 looser; 0 gives the base values. Counts move by one per level, ratios by a
    factor, confidences by a factor on their complement, all within the knob's valid range."""
    b = base
    if group not in EARLY_GROUPS:
        raise ValueError(f"unknown early-warning group {group!r}")
    if step == 0:
        return {k: getattr(b, k) for k in EARLY_GROUPS[group]}
    win = b.precursor_window_blocks
    if group == "precursor":
        return {"precursor_min_events": int(_within(b.precursor_min_events + step,
                                                    b.precursor_min_events, 1, win)),
                "precursor_background_ratio": _num(_within(
                    b.precursor_background_ratio * 1.5 ** step, b.precursor_background_ratio,
                    1.0, 100.0)),
                "precursor_confidence": _confidence(b.precursor_confidence, step, 0.99999),
                "precursor_burst_events": int(_within(
                    b.precursor_burst_events + step, b.precursor_burst_events, 1,
                    max(b.precursor_burst_window_blocks, 1))),
                "precursor_burst_confidence": _near_one(b.precursor_burst_confidence, step)}
    if group == "stall":
        # a stricter stall is a deeper one: a lower fraction of the siblings' activity
        return {"stall_fraction": _num(_within(b.stall_fraction - 0.1 * step, b.stall_fraction,
                                               0.3, 0.95)),
                "stall_min_events": int(_within(b.stall_min_events + step, b.stall_min_events,
                                                1, win))}
    if group == "jitter":
        return {"jitter_ratio": _num(_within(b.jitter_ratio * 1.25 ** step, b.jitter_ratio,
                                             1.25, 100.0)),
                "jitter_blocks": int(_within(b.jitter_blocks + step, b.jitter_blocks, 1, 1000))}
    if group == "trend":
        return {"trend_min_events": int(_within(b.trend_min_events + step, b.trend_min_events,
                                                2, SLOTS)),
                "trend_confidence": _confidence(b.trend_confidence, step, 0.9999),
                "trend_min_span_s": _num(b.trend_min_span_s * 1.5 ** step)}
    if group == "confirm":
        return {"precursor_confirm_s": _confirm_level(b.precursor_confirm_s, step)}
    if group == "known_weight":  # a bonus only (>= 1): stricter is a smaller one
        return {"known_precursor_weight": _num(_within(b.known_precursor_weight - 0.25 * step,
                                                       b.known_precursor_weight, 1.0, 10.0))}
    # host_collapse: a stricter collapse is a deeper one, a lower fraction of the usual level
    return {"host_collapse_fraction": _num(_within(b.host_collapse_fraction * 0.8 ** step,
                                                   b.host_collapse_fraction, 0.05, 0.9)),
            "host_collapse_blocks": int(_within(b.host_collapse_blocks + step,
                                                b.host_collapse_blocks, 1, 1000))}


def _confidence(base: float, step: int, hi: float) -> float:
    """A confidence `step` levels stricter: its complement (the chance of a miss) divided by 3
    per level, within [0.5, hi]."""
    return _num(_within(1.0 - (1.0 - base) * 3.0 ** -step, base, 0.5, hi))


def _near_one(base: float, step: int) -> float:
    """`_confidence` for one a millionth from 1 or closer: its complement keeps six significant
    digits (the confidence's own would round it to 1), within [0.5, 1 - 1e-12]."""
    chance = _within((1.0 - base) * 3.0 ** -step, 1.0 - base, 1e-12, 0.5)
    return 1.0 - _num(chance)


def _confirm_level(base_s: float, step: int) -> float:
    """`step` rungs of :data:`CONFIRM_LADDER_S` from the rung nearest `base_s` (stricter is a
    shorter window), never past either end; confirmation off stays off."""
    if base_s <= 0:
        return base_s
    here = min(range(len(CONFIRM_LADDER_S)), key=lambda i: abs(CONFIRM_LADDER_S[i] - base_s))
    i = min(max(here + step, 0), len(CONFIRM_LADDER_S) - 1)
    return base_s if i == here else CONFIRM_LADDER_S[i]


@dataclass(frozen=True, slots=True)
class Move:
    """One early-warning setting to try: `group` moved `step` levels; `cfg` is it on the
    episode settings in use, `guard` the same one level looser."""

    group: str
    step: int
    cfg: DetectorConfig
    guard: DetectorConfig


def plan(on: DetectorConfig, max_runs: int) -> tuple[list[Move], list[DetectorConfig]]:
    """The moves to try around `on` (its early knobs are the base), and the detector runs they
    need in order (each config once; `on` itself is not run again), within `max_runs`. A move
    whose runs do not fit is left out; a later, cheaper one may still fit."""
    moves: list[Move] = []
    runs: list[DetectorConfig] = []
    seen = {on}
    for group in EARLY_GROUPS:
        for step in (1, -1):
            cfg = replace(on, **level(on, group, step))
            if cfg == on:
                continue  # clamped onto the base: nothing to try
            if any(m.cfg == cfg for m in moves):
                continue
            g = replace(on, **level(on, group, step - 1))
            need = [c for c in dict.fromkeys((g, cfg)) if c not in seen]
            if len(runs) + len(need) > max_runs:
                continue
            runs += need
            seen.update(need)
            moves.append(Move(group, step, cfg, g))
    return moves, runs


@dataclass(frozen=True, slots=True)
class Trial:
    """One early-warning setting's figures on the tuning part (with the episode settings in
    use), its episode guard's and its early guard's."""

    group: str
    """"base" for the base settings."""
    step: int
    cfg: DetectorConfig
    fig: Figures
    episode_guard: Figures
    early_guard: Figures

    def within(self, budget: Budget) -> bool:
        return all(within_budget(f, budget)
                   for f in (self.fig, self.episode_guard, self.early_guard))

    def to_dict(self, budget: Budget) -> dict[str, Any]:
        knobs = EARLY_GROUPS.get(self.group, ())
        return {"group": self.group, "step": self.step,
                "settings": {k: getattr(self.cfg, k) for k in knobs},
                "early": self.fig.early, "detected": self.fig.detected,
                "false_positives": self.fig.false_positives,
                "fp_per_day": round(self.fig.fp_per_day, 4),
                "guard_fp_per_day": round(max(self.episode_guard.fp_per_day,
                                              self.early_guard.fp_per_day), 4),
                "within_budget": self.within(budget)}


def pick(trials: Sequence[Trial], budget: Budget) -> int | None:
    """Index of the best trial within `budget` (see the module docstring, step 4)."""
    ok = [i for i, t in enumerate(trials) if t.within(budget)]
    if not ok:
        return None

    def key(i: int) -> tuple[int, ...]:
        t = trials[i]
        return (t.fig.early, t.fig.detected, -t.fig.false_positives, -abs(t.step), t.step)
    return max(ok, key=key)


@dataclass(frozen=True, slots=True)
class EarlyChoice:
    """What the early-warning search tried and chose."""

    base: DetectorConfig
    chosen: Trial
    trials: tuple[Trial, ...]
    """The base settings first."""
    runs: int
    """Detector runs the search made (settings tried plus their guards)."""
    max_runs: int

    @property
    def moved(self) -> bool:
        return self.chosen.step != 0

    def changes(self) -> list[tuple[str, Any, Any]]:
        """(knob, base value, chosen value) of the knobs the choice moved."""
        return [(k, getattr(self.base, k), getattr(self.chosen.cfg, k)) for k in EARLY_KNOBS
                if getattr(self.base, k) != getattr(self.chosen.cfg, k)]

    def to_dict(self, budget: Budget) -> dict[str, Any]:
        return {"max_runs": self.max_runs, "runs": self.runs,
                "chosen": {"group": self.chosen.group, "step": self.chosen.step},
                "knobs": {k: {"chosen": getattr(self.chosen.cfg, k),
                              "base": getattr(self.base, k)} for k in EARLY_KNOBS},
                "tried": [t.to_dict(budget) for t in self.trials]}


def search(tel: Telemetry, truth: GroundTruth, span: tuple[float, float], budget: Budget,
           base: DetectorConfig, start: Candidate, base_trace: Trace, *,
           max_runs: int = EARLY_RUNS, progress: Progress | None = None
           ) -> tuple[EarlyChoice, Candidate, list[AlertEpisode] | None]:
    """Search the early-warning knobs around `start`, the episode choice on the `base` config
    (whose trace is `base_trace`); returns what was tried and chosen, the final setting with
    its figures on the tuning part `span` (see the module docstring), and that setting's alerts
    over the whole history when the search ran it (None: not run here)."""
    n, per = len(tel.nodes), budget.per_nodes
    # `start` was replayed on the base config's trace; unless it is the base config itself, a
    # run of its own (one more, within the cap) makes its figures a run's like the others'
    own = start.cfg == base
    moves, runs = plan(start.cfg, max_runs - (0 if own else 1))
    if moves and not own:
        runs = [start.cfg, *runs]
    samples = int(tel.times.size)
    total = max(len(runs), 1) * samples
    traces: dict[DetectorConfig, Trace] = {}
    figs: dict[DetectorConfig, Figures] = {}
    eguards: dict[DetectorConfig, Figures] = {}
    alerts: dict[DetectorConfig, list[AlertEpisode]] = {}
    if own or not moves:
        traces[start.cfg], figs[start.cfg], eguards[start.cfg] = base_trace, start.fig, start.guard
    done = 0

    def run(cfg: DetectorConfig) -> None:
        nonlocal done
        if cfg in figs:
            return  # run already
        trace, alerts[cfg] = record(tel, cfg, progress=_stage(progress, done, samples, total))
        figs[cfg] = figures(alerts[cfg], truth, span, n, per)
        eguards[cfg] = figures(replay(trace, guard(cfg)), truth, span, n, per)
        traces[cfg] = trace
        done += 1

    run(start.cfg)
    trials = [Trial("base", 0, start.cfg, figs[start.cfg], eguards[start.cfg], figs[start.cfg])]
    best = trials[0]
    for m in moves:
        run(m.guard)
        run(m.cfg)
        trials.append(Trial(m.group, m.step, m.cfg, figs[m.cfg], eguards[m.cfg], figs[m.guard]))
        i = pick(trials, budget)
        best = trials[0 if i is None else i]
        # only the best one's trace and its guard's are needed later (traces are large)
        keep = {start.cfg, best.cfg, *(x.guard for x in moves if x.cfg == best.cfg)}
        for c in [c for c in traces if c not in keep]:
            del traces[c]
    choice = EarlyChoice(start.cfg, best, tuple(trials), done, max_runs)
    if not choice.moved:
        return choice, start, alerts.get(start.cfg)
    move = next(m for m in moves if m.cfg == best.cfg)
    final = _retune(traces[move.cfg], traces[move.guard], move, base, truth, span, budget, n,
                    progress) or Candidate(best.cfg, best.fig, best.episode_guard)
    return choice, final, alerts.get(final.cfg)


def _stage(progress: Progress | None, k: int, samples: int, total: int
           ) -> Callable[[int, int], None] | None:
    """The `k`-th detector run's progress as part of the "early warnings" stage."""
    if progress is None:
        return None
    return lambda d, _t: progress("early warnings", k * samples + d, total)


def _retune(trace: Trace, guard_trace: Trace, move: Move, base: DetectorConfig,
            truth: GroundTruth, span: tuple[float, float], budget: Budget, n: int,
            progress: Progress | None) -> Candidate | None:
    """The episode settings replayed on the chosen early-warning setting's trace: the best
    within the budget whose early guard is within it too (the episode setting the search ran
    with always is; None only if a replay differed from the run)."""
    early = {k: getattr(move.cfg, k) for k in EARLY_KNOBS}
    looser = {k: getattr(move.guard, k) for k in EARLY_KNOBS}
    cands = candidate_grid(replace(base, **early))
    rep = None if progress is None else (
        lambda d, t: progress("replaying on the early choice", d, t))
    scored = replay_all(trace, cands, truth, span, n, budget.per_nodes, rep)
    ok = sorted((c for c in scored if c.within(budget)),
                key=lambda c: rank(c.cfg, c.fig, base), reverse=True)
    for c in ok:
        g = figures(replay(guard_trace, replace(c.cfg, **looser)), truth, span, n,
                    budget.per_nodes)
        if within_budget(g, budget):
            return c
    return None
