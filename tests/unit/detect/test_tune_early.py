"""`trainguard tune`'s early-warning search: levels, the run plan under its cap, the choice under
the budget with its guards, and the search inside `tune`."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np
import pytest

from trainguard.detect.calibration import KindRate
from trainguard.detect.config import DetectorConfig
from trainguard.detect.truth import Failure, GroundTruth
from trainguard.detect.tune import (
    Budget,
    Figures,
    candidate_grid,
    figures,
    min_history_s,
    replay_all,
    select,
    split_spans,
    tune,
)
from trainguard.detect.tune_early import (
    EARLY_GROUPS,
    EARLY_KNOBS,
    Trial,
    level,
    pick,
    plan,
)
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry

BASE = DetectorConfig()
EDGE = DetectorConfig(precursor_window_blocks=1, precursor_min_events=1,
                      precursor_background_ratio=0.5, precursor_confidence=0.4,
                      precursor_burst_window_blocks=1, precursor_burst_events=1,
                      precursor_burst_confidence=0.4,
                      stall_fraction=0.99, stall_min_events=1,
                      jitter_ratio=1.0, jitter_blocks=1, trend_min_events=2,
                      trend_confidence=0.4, trend_min_span_s=0.0, known_precursor_weight=1.0,
                      host_collapse_fraction=0.95, host_collapse_blocks=1)
"""Knobs at or past the ends of the ranges the levels keep to."""

STRICTER_IS_HIGHER = {"precursor_min_events", "precursor_background_ratio",
                      "precursor_confidence", "precursor_burst_events",
                      "precursor_burst_confidence", "stall_min_events",
                      "jitter_ratio", "jitter_blocks", "trend_min_events", "trend_confidence",
                      "trend_min_span_s", "host_collapse_blocks"}
STRICTER_IS_LOWER = {"stall_fraction", "known_precursor_weight", "host_collapse_fraction",
                     "precursor_confirm_s"}


def test_every_knob_has_a_direction() -> None:
    assert set(EARLY_KNOBS) == STRICTER_IS_HIGHER | STRICTER_IS_LOWER
    assert set(EARLY_KNOBS) <= {f.name for f in fields(DetectorConfig)}


@pytest.mark.parametrize("base", [BASE, EDGE], ids=["default", "edge"])
@pytest.mark.parametrize("group", list(EARLY_GROUPS))
def test_levels_are_valid_configs_moving_one_group_one_way(base: DetectorConfig,
                                                           group: str) -> None:
    assert replace(base, **level(base, group, 0)) == base
    prev = base
    for step in range(1, 5):  # stricter, level by level
        cfg = replace(base, **level(base, group, step))  # validated by DetectorConfig
        _assert_moves(prev, cfg, group, stricter=True)
        prev = cfg
    prev = base
    for step in range(-1, -5, -1):
        cfg = replace(base, **level(base, group, step))
        _assert_moves(prev, cfg, group, stricter=False)
        prev = cfg
    moved = replace(base, **level(base, group, 1)), replace(base, **level(base, group, -1))
    if base == BASE:  # from the defaults every group moves both ways
        assert all(m != base for m in moved)


def _assert_moves(prev: DetectorConfig, cfg: DetectorConfig, group: str, *,
                  stricter: bool) -> None:
    for f in fields(DetectorConfig):
        a, b = getattr(prev, f.name), getattr(cfg, f.name)
        if f.name not in EARLY_GROUPS[group]:
            assert a == b, f.name
        elif (f.name in STRICTER_IS_HIGHER) == stricter:
            assert b >= a, f.name
        else:
            assert b <= a, f.name
    assert cfg.stall_min_events <= max(cfg.precursor_window_blocks, prev.stall_min_events)


def test_an_unknown_group_is_refused() -> None:
    with pytest.raises(ValueError, match="nope"):
        level(BASE, "nope", 1)


def test_plan_keeps_to_the_cap_and_runs_each_config_once() -> None:
    moves, runs = plan(BASE, 8)
    assert 0 < len(runs) <= 8 and len(set(runs)) == len(runs) and BASE not in runs
    for m in moves:
        assert m.cfg in runs
        assert m.guard == BASE or m.guard in runs
        assert m.guard == replace(BASE, **level(BASE, m.group, m.step - 1))
    # one level stricter is guarded by the base itself (no run); looser needs a looser guard
    first = [(m.group, m.step) for m in moves]
    assert first[:4] == [("precursor", 1), ("precursor", -1), ("stall", 1), ("stall", -1)]
    assert len(runs) == sum(1 if m.step > 0 else 2 for m in moves)


@pytest.mark.parametrize(("cap", "want"), [
    (1, [("precursor", 1)]),
    (2, [("precursor", 1), ("stall", 1)]),          # precursor -1 needs 2 runs more: left out
    (3, [("precursor", 1), ("precursor", -1)])])
def test_a_small_cap_leaves_out_what_does_not_fit(cap: int, want: list[tuple[str, int]]
                                                  ) -> None:
    moves, runs = plan(BASE, cap)
    assert [(m.group, m.step) for m in moves] == want
    assert len(runs) <= cap


def test_plan_skips_a_level_clamped_onto_the_base() -> None:
    at_bound = replace(BASE, known_precursor_weight=1.0)  # no bonus: cannot be stricter
    moves, _ = plan(at_bound, 100)
    assert ("known_weight", 1) not in [(m.group, m.step) for m in moves]
    assert ("known_weight", -1) in [(m.group, m.step) for m in moves]


# --- the choice --------------------------------------------------------------------------------

def _fig(early: int, detected: int, fp: int) -> Figures:
    return Figures((0.0, 86_400.0), 10, detected, early, fp, float(fp),
                   (KindRate("predictive", fp, float(fp), 3.0),), 3.0)


OK = _fig(0, 0, 0)


def _trial(group: str, step: int, fig: Figures, episode_guard: Figures = OK,
           early_guard: Figures = OK) -> Trial:
    return Trial(group, step, replace(BASE, **level(BASE, group, step)) if step else BASE,
                 fig, episode_guard, early_guard)


def test_pick_prefers_more_early_detections_within_the_budget() -> None:
    trials = [_trial("base", 0, _fig(2, 5, 0)),
              _trial("precursor", -1, _fig(4, 6, 2)),   # over a budget of 0.3
              _trial("stall", -1, _fig(3, 5, 0)),
              _trial("jitter", -1, _fig(3, 4, 0))]
    assert pick(trials, Budget(0.3)) == 2
    assert pick(trials, Budget(2.0)) == 1


@pytest.mark.parametrize("which", ["episode_guard", "early_guard"])
def test_pick_refuses_a_setting_whose_guard_is_over_budget(which: str) -> None:
    over: dict[str, Any] = {which: _fig(4, 6, 2)}
    trials = [_trial("base", 0, _fig(2, 5, 0)), _trial("stall", -1, _fig(4, 6, 0), **over)]
    assert not trials[1].within(Budget(0.3))
    assert pick(trials, Budget(0.3)) == 0
    assert pick(trials, Budget(2.0)) == 1


def test_pick_ties_go_to_the_base_then_the_stricter() -> None:
    same = _fig(3, 5, 1)
    trials = [_trial("precursor", -1, same), _trial("base", 0, same), _trial("stall", 1, same)]
    assert pick(trials, Budget(1.0)) == 1
    assert pick([trials[0], trials[2]], Budget(1.0)) == 1
    # fewer false alarms for the same detections is a reason to move
    fewer = [_trial("base", 0, same), _trial("stall", 1, _fig(3, 5, 0))]
    assert pick(fewer, Budget(1.0)) == 1


def test_pick_none_when_nothing_is_within_the_budget() -> None:
    assert pick([_trial("base", 0, _fig(1, 1, 3))], Budget(0.3)) is None


def test_trial_json_names_the_settings_and_the_counts() -> None:
    t = _trial("stall", 1, _fig(3, 5, 1), early_guard=_fig(3, 5, 2))
    doc = t.to_dict(Budget(1.0))
    assert doc["settings"] == {k: getattr(t.cfg, k) for k in EARLY_GROUPS["stall"]}
    assert (doc["early"], doc["detected"], doc["false_positives"]) == (3, 5, 1)
    assert doc["guard_fp_per_day"] == 2.0 and doc["within_budget"] is False


# --- inside tune() -----------------------------------------------------------------------------

STEP = 60
T0 = 1_700_000_000 // 3600 * 3600
SMALL = DetectorConfig(warmup_s=1800.0)
HOURS = min_history_s(SMALL, 0.5) / 3600 + 0.5


def _telemetry(n: int = 6, g: int = 4) -> tuple[Telemetry, GroundTruth]:
    """A small cluster with one GPU whose correctable errors recur before its XID, in the
    tuning part."""
    rng = np.random.default_rng(1)
    t = int(HOURS * 3600 / STEP)
    times = (T0 + np.arange(t) * STEP).astype(np.int64)
    ents = tuple(Entity(f"node{i}", str(j)) for i in range(n) for j in range(g))
    util = np.clip(90 + rng.normal(0, 2, (n * g, t)), 0, 100)
    temp = 60 + rng.normal(0, 0.7, (n * g, t))
    sbe = np.zeros((n * g, t))
    xid = np.zeros((n * g, t))
    fail_at = int(3.0 * 3600 / STEP)
    sbe[5, fail_at - 40: fail_at] = np.arange(40) // 3  # recurring correctable errors
    sbe[5, fail_at:] = sbe[5, fail_at - 1]
    xid[5, fail_at:] = 79
    tel = Telemetry(times, STEP, (
        MetricSeries("DCGM_FI_DEV_GPU_UTIL", MetricKind.GAUGE, ents, util),
        MetricSeries("DCGM_FI_DEV_GPU_TEMP", MetricKind.GAUGE, ents, temp),
        MetricSeries("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", MetricKind.COUNTER, ents, sbe),
        MetricSeries("DCGM_FI_DEV_XID_ERRORS", MetricKind.GAUGE, ents, xid)))
    return tel, GroundTruth(failures=(Failure("node1", float(T0 + fail_at * STEP), 79),))


@pytest.fixture(scope="module")
def small() -> tuple[Telemetry, GroundTruth]:
    return _telemetry()


@pytest.fixture
def few_episode_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every 40th episode setting only: these tests are about the early-warning search."""
    import trainguard.detect.tune as tune_mod
    import trainguard.detect.tune_early as tune_early

    def grid(base: DetectorConfig) -> list[DetectorConfig]:
        return candidate_grid(base)[::40]

    monkeypatch.setattr(tune_mod, "candidate_grid", grid)
    monkeypatch.setattr(tune_early, "candidate_grid", grid)


def test_without_the_search_tune_chooses_as_the_episode_replay_does(
        small: tuple[Telemetry, GroundTruth], few_episode_settings: None) -> None:
    from trainguard.detect.tune_trace import record

    tel, truth = small
    stages: list[str] = []
    res = tune(tel, truth, Budget(1000.0), base=SMALL, early_runs=0,
               progress=lambda s, d, t: stages.append(s))
    assert res.early is None and res.to_dict()["early_warning"] is None
    assert "early warnings" not in stages
    span = split_spans(float(tel.times[0]), float(tel.times[-1]) + STEP, 0.5)[0]
    trace, _ = record(tel, SMALL)
    grid = candidate_grid(SMALL)[::40]
    scored = replay_all(trace, grid, truth, span, len(tel.nodes), 64, None)
    best = select(scored, Budget(1000.0), SMALL)
    assert best is not None and res.chosen == scored[best].cfg
    assert all(getattr(res.chosen, k) == getattr(SMALL, k) for k in EARLY_KNOBS)


def test_the_search_runs_within_its_cap_and_reports_what_it_tried(
        small: tuple[Telemetry, GroundTruth], few_episode_settings: None) -> None:
    tel, truth = small
    seen: list[tuple[str, int, int]] = []
    res = tune(tel, truth, Budget(1000.0), base=SMALL, early_runs=3,
               progress=lambda s, d, t: seen.append((s, d, t)))
    assert res.early is not None
    runs = res.early.runs
    assert 0 < runs <= 3
    early = [(d, t) for s, d, t in seen if s == "early warnings"]
    assert early[-1] == (runs * tel.times.size, runs * tel.times.size)
    assert [d for d, _ in early] == sorted(d for d, _ in early)
    # in the plan's order, as many as the cap allows (the base's own episode choice may take
    # a run of its own)
    order = [(m.group, m.step) for m in plan(res.early.base, 100)[0]]
    tried = [(t.group, t.step) for t in res.early.trials[1:]]
    assert tried == sorted(tried, key=order.index)
    assert tried[0] == ("precursor", 1)
    doc = res.to_dict()["early_warning"]
    assert set(doc["knobs"]) == set(EARLY_KNOBS)
    assert doc["tried"][0]["group"] == "base" and len(doc["tried"]) >= 2
    for k, v in doc["knobs"].items():
        assert getattr(res.chosen, k) == v["chosen"] and getattr(SMALL, k) == v["base"]


def test_a_moved_choice_is_the_final_config_with_its_episode_settings_replayed(
        small: tuple[Telemetry, GroundTruth], few_episode_settings: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever wins, the written config carries its early-warning knobs, and the episode
    settings are replayed on its trace (their figures are the chosen setting's own)."""
    import trainguard.detect.tune_early as tune_early

    def looser_stall(trials: list[Trial], budget: Budget) -> int | None:
        return next((i for i, t in enumerate(trials) if (t.group, t.step) == ("stall", -1)),
                    None)

    monkeypatch.setattr(tune_early, "pick", looser_stall)
    stages: list[str] = []
    tel, truth = small
    res = tune(tel, truth, Budget(1000.0), base=SMALL, early_runs=8,
               progress=lambda s, d, t: stages.append(s))
    assert res.early is not None and res.early.moved
    want = level(SMALL, "stall", -1)
    assert {k: getattr(res.chosen, k) for k in want} == want
    assert [k for k, _, _ in res.early.changes()] == list(EARLY_GROUPS["stall"])
    assert "replaying on the early choice" in stages
    span = split_spans(float(tel.times[0]), float(tel.times[-1]) + STEP, 0.5)[0]
    from trainguard.detect.tune_trace import record, replay

    trace, _ = record(tel, res.chosen)
    assert res.replayed_tune == figures(replay(trace, res.chosen), truth, span,
                                        len(tel.nodes), 64)


@pytest.mark.parametrize("moved", [False, True], ids=["kept", "moved"])
def test_no_config_is_run_twice_and_the_chosen_one_is_measured_as_a_fresh_run(
        small: tuple[Telemetry, GroundTruth], few_episode_settings: None,
        monkeypatch: pytest.MonkeyPatch, moved: bool) -> None:
    """#30: when the early-warning search already ran the setting chosen, its alerts measure
    it (no repeated detector run); the figures are those of a fresh run of that setting."""
    import trainguard.detect.detector as detector
    import trainguard.detect.tune_early as tune_early
    import trainguard.detect.tune_trace as tune_trace

    runs: list[DetectorConfig] = []
    real = detector.run_detector

    def counting(det: detector.Detector, tel: Telemetry, *, progress: Any = None) -> Any:
        runs.append(det.cfg)
        return real(det, tel, progress=progress)

    monkeypatch.setattr(detector, "run_detector", counting)
    monkeypatch.setattr(tune_trace, "run_detector", counting)
    if moved:
        monkeypatch.setattr(tune_early, "pick", lambda trials, _b: next(
            (i for i, t in enumerate(trials) if (t.group, t.step) == ("stall", -1)), None))
    tel, truth = small
    seen: list[tuple[str, int, int]] = []
    res = tune(tel, truth, Budget(1000.0), base=SMALL, early_runs=8,
               progress=lambda s, d, t: seen.append((s, d, t)))
    assert res.early is not None and res.early.moved is moved
    assert len(runs) == len(set(runs)) and res.chosen in runs
    samples = int(tel.times.size)
    assert [(d, t) for s, d, t in seen if s == "measuring"] == [(samples, samples)]
    fresh = real(detector.Detector(res.chosen), tel)
    t0, t1 = float(tel.times[0]), float(tel.times[-1]) + STEP
    tune_span, held_span = split_spans(t0, t1, 0.5)
    assert res.tune == figures(fresh, truth, tune_span, len(tel.nodes), 64)
    assert res.heldout == figures(fresh, truth, held_span, len(tel.nodes), 64)


def _gauge_trace(score: float, blocks: int) -> Any:
    """Node n1 `score` (gauge-led) for `blocks` blocks from block 2; everything else quiet."""
    from trainguard.detect.tune_trace import ExpireStep, SoftStep, Trace

    steps: list[Any] = []
    for b in range(50):
        s = np.ones(3)
        if 2 <= b < 2 + blocks:
            s[1] = score
        steps += [SoftStep(b * 120.0, s, np.zeros(3, dtype=np.int8), {}), ExpireStep(b * 120.0)]
    return Trace(("n0", "n1", "n2"), tuple(steps))


def test_replayed_episode_settings_must_keep_the_early_guard_within_the_budget() -> None:
    """On the chosen early-warning setting's trace every episode setting is quiet; on its
    guard's (one level looser) a long deviation raises a false alarm under all but the
    strictest score_on: only those may be chosen, though the base is closer."""
    from trainguard.detect.tune_early import Move, _retune

    cfg = replace(BASE, **level(BASE, "stall", -1))
    move = Move("stall", -1, cfg, replace(BASE, **level(BASE, "stall", -2)))
    quiet, loud = _gauge_trace(1.0, 0), _gauge_trace(30.0, 45)
    span = (0.0, 86_400.0)
    got = _retune(quiet, loud, move, BASE, GroundTruth(), span, Budget(0.0), 3, None)
    assert got is not None and got.cfg.score_on > 30.0
    assert got.cfg.stall_fraction == cfg.stall_fraction  # the chosen early-warning knobs
    # with a quiet guard the closest to the base wins, as in `tune`
    calm = _retune(quiet, quiet, move, BASE, GroundTruth(), span, Budget(0.0), 3, None)
    assert calm is not None and calm.cfg == cfg


def test_the_confirmation_window_moves_along_its_ladder_and_off_stays_off() -> None:
    assert level(BASE, "confirm", 1) == {"precursor_confirm_s": 3 * 3600.0}
    assert level(BASE, "confirm", -1) == {"precursor_confirm_s": 12 * 3600.0}
    assert level(BASE, "confirm", -9) == {"precursor_confirm_s": 24 * 3600.0}
    off = DetectorConfig(precursor_confirm_s=0.0)
    assert level(off, "confirm", 2) == level(off, "confirm", -2) == {"precursor_confirm_s": 0.0}
