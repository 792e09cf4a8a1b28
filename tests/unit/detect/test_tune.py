"""`trainguard tune`'s pure parts: recording and replaying score traces, figures, selection."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trainguard.detect.alerts import AlertEpisode, AlertKind, Signal
from trainguard.detect.calibration import KindRate
from trainguard.detect.config import DetectorConfig
from trainguard.detect.truth import Failure, GroundTruth
from trainguard.detect.tune import (
    EVIDENCE_KNOBS,
    Budget,
    Candidate,
    Figures,
    candidate_grid,
    figures,
    guard,
    min_history_s,
    select,
    split_spans,
    tune,
)
from trainguard.detect.tune_trace import (
    ExpireStep,
    HardStep,
    RecordingTracker,
    SoftStep,
    Trace,
    replay,
)
from trainguard.errors import ConfigError
from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.taxonomy import Action, Category, Severity
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry

BLOCK = 120.0
NODES = ("n0", "n1", "n2")
XID = Signal("DCGM_FI_DEV_XID_ERRORS", "0", 79.0, "XID 79")


def _soft(b: int, scores: list[float], lead: list[int] | None = None) -> SoftStep:
    return SoftStep(b * BLOCK, np.array(scores),
                    None if lead is None else np.array(lead, dtype=np.int8), {})


def _trace(*rows: tuple[list[float], list[int] | None], hard: dict[int, int] | None = None
           ) -> Trace:
    """Blocks of node scores; `hard` maps a block index to a node with hard evidence there."""
    steps: list[SoftStep | HardStep | ExpireStep] = []
    for b, (scores, led) in enumerate(rows):
        if hard and b in hard:
            steps.append(HardStep(hard[b], b * BLOCK - 30, XID, 100.0))
        steps.append(_soft(b, scores, led))
        steps.append(ExpireStep(b * BLOCK))
    return Trace(NODES, tuple(steps))


def _run(n_blocks: int, node: int, score: float, start: int = 2, length: int = 6) -> Trace:
    """Gauge-led scores (lead code 0): `score` on `node` for `length` blocks from `start`."""
    rows: list[tuple[list[float], list[int] | None]] = []
    for b in range(n_blocks):
        s = [1.0, 1.0, 1.0]
        if start <= b < start + length:
            s[node] = score
        rows.append((s, [0, 0, 0]))
    return _trace(*rows)


@pytest.mark.parametrize(("score_on", "persist", "alerts"), [
    (9.0, 4, 1), (9.0, 6, 1), (9.0, 7, 0), (11.0, 4, 0), (10.0, 4, 1)])
def test_replay_applies_thresholds_and_persistence(score_on: float, persist: int,
                                                   alerts: int) -> None:
    trace = _run(20, node=1, score=10.0, length=6)
    cfg = DetectorConfig(score_on=score_on, score_off=4.0, persist_gauge_blocks=persist)
    got = replay(trace, cfg)
    assert len(got) == alerts
    if alerts:
        # the onset is the block that completed the persistence run
        assert got[0].node == "n1" and got[0].start == (2 + persist - 1) * BLOCK
        assert got[0].kind is AlertKind.PREDICTIVE


def test_replay_hard_evidence_quiets_predictive_alerts() -> None:
    rows: list[tuple[list[float], list[int] | None]] = [([1.0, 20.0, 1.0], [0] * 3)
                                                        for _ in range(30)]
    cfg = DetectorConfig(persist_gauge_blocks=3, quiet_after_hard_s=3600.0)
    quiet = _trace(*rows, hard={1: 1})
    kinds = [a.kind for a in replay(quiet, cfg)]
    assert kinds == [AlertKind.HARD]
    loud = _trace(*rows)
    assert [a.kind for a in replay(loud, cfg)] == [AlertKind.PREDICTIVE]


def test_recording_tracker_replays_to_the_same_episodes() -> None:
    """What a recording tracker saw, replayed with the same config, gives its own episodes."""
    cfg = DetectorConfig(persist_blocks=2, persist_gauge_blocks=3, cooldown_s=600.0,
                         hard_cooldown_s=600.0, quiet_after_hard_s=900.0)
    rng = np.random.default_rng(3)
    rec = RecordingTracker(cfg, list(NODES))
    for b in range(200):
        t = b * BLOCK
        if b in (40, 41, 120):
            rec.hard_event(b % 3, t - 10, XID, 100.0)
        score = rng.gamma(2.0, 3.0, size=3)
        lead = rng.integers(0, 4, size=3).astype(np.int8)  # every kind of lead the tracker knows
        rec.soft_block(t, score, {}, rec.quiet(t), lead)
        rec.expire_hard(t)
    trace = rec.trace()
    want = rec.finish()
    assert len(want) > 3  # the random scores do open episodes: the comparison means something
    assert replay(trace, cfg) == want
    assert trace.blocks == 200


def test_recording_tracker_inside_the_detector_matches_a_plain_run() -> None:
    from trainguard.detect.detector import detect
    from trainguard.detect.tune_trace import record

    tel = _telemetry(hours=8, xid_at_h=6.0)
    cfg = DetectorConfig(warmup_s=3600.0)
    trace, alerts = record(tel, cfg)
    assert alerts == detect(tel, cfg)
    assert replay(trace, cfg) == alerts
    assert any(a.kind is AlertKind.HARD for a in alerts)


# --- figures and selection ---------------------------------------------------------------------

def _alert(node: str, start: float, kind: AlertKind = AlertKind.PREDICTIVE) -> AlertEpisode:
    return AlertEpisode(node, start, start + 600, 10.0, kind, ())


def test_figures_count_early_detections_and_false_alarms_per_budget_nodes() -> None:
    truth = GroundTruth(failures=(Failure("n0", 20_000.0, 79), Failure("n1", 30_000.0, 79),
                                  Failure("n2", 40_000.0, 79)))
    alerts = [_alert("n0", 20_000.0 - 120),    # early
              _alert("n1", 30_000.0 - 30),     # before the XID but < 1 min: not early
              _alert("n3", 5_000.0),           # false alarm (n3 never fails)
              replace(_alert("n3", 6_000.0, AlertKind.HARD), signals=(XID,))]  # false alarm
    fig = figures(alerts, truth, (0.0, 86_400.0), 16, 64)
    assert (fig.n_failures, fig.detected, fig.early, fig.false_positives) == (3, 2, 1, 2)
    assert fig.fp_per_day == pytest.approx(2 * 64 / 16)
    by_kind = {k.kind: k.false_positives for k in fig.kinds}
    assert by_kind == {"predictive": 1, "hard": 1}
    # the hard-evidence false alarm is a finding: which metric, on which node, how often
    assert [(f.metric, f.false_positives, f.nodes) for f in fig.hard] == [
        ("DCGM_FI_DEV_XID_ERRORS", 1, ("n3",))]
    assert fig.hard[0].fp_per_day == pytest.approx(64 / 16)
    assert fig.to_dict()["hard_findings"][0]["metric"] == "DCGM_FI_DEV_XID_ERRORS"


def test_hard_findings_group_by_metric_most_first() -> None:
    from trainguard.detect.tune_findings import hard_findings

    row = Signal("DCGM_FI_DEV_ROW_REMAP_FAILURE", "1", 1.0)
    alerts = [replace(_alert("n1", 100.0, AlertKind.HARD), signals=(XID,)),
              replace(_alert("n2", 200.0, AlertKind.HARD), signals=(XID,)),
              replace(_alert("n2", 300.0, AlertKind.HARD), signals=(row,)),
              _alert("n0", 400.0)]  # predictive: not a hard finding
    found = hard_findings(alerts, days=2.0, n_nodes=32, per_nodes=64)
    assert [(f.metric, f.false_positives, f.nodes) for f in found] == [
        ("DCGM_FI_DEV_XID_ERRORS", 2, ("n1", "n2")),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 1, ("n2",))]
    assert found[0].fp_per_day == pytest.approx(2 * 64 / 32 / 2.0)
    assert "DCGM_FI_DEV_XID_ERRORS" in found[0].text(64, "tuning part")


def _fig(early: int, detected: int, fp: int) -> Figures:
    return Figures((0.0, 86_400.0), 10, detected, early, fp, float(fp),
                   (KindRate("predictive", fp, float(fp), 3.0),), 3.0)


BASE = DetectorConfig()


def test_select_maximises_early_then_detected_within_budget() -> None:
    ok = _fig(0, 0, 0)
    cands = [Candidate(replace(BASE, score_on=20.0), _fig(1, 5, 0), ok),
             Candidate(replace(BASE, score_on=9.0), _fig(3, 5, 1), ok),   # over budget
             Candidate(replace(BASE, score_on=12.0), _fig(2, 4, 0), ok),
             Candidate(replace(BASE, score_on=14.0), _fig(2, 6, 0), ok)]
    assert select(cands, Budget(0.3, 64), BASE) == 3
    assert select(cands, Budget(1.0, 64), BASE) == 1


def test_select_needs_the_guard_within_budget_too() -> None:
    cands = [Candidate(replace(BASE, score_on=9.0), _fig(3, 5, 0), _fig(3, 5, 2)),
             Candidate(replace(BASE, score_on=12.0), _fig(1, 5, 0), _fig(1, 5, 0))]
    assert select(cands, Budget(0.3, 64), BASE) == 1


def test_select_ties_go_to_the_setting_closest_to_the_base() -> None:
    same = _fig(1, 5, 0)
    cands = [Candidate(replace(BASE, score_on=36.0, score_off=16.0), same, same),
             BASE_CAND := Candidate(BASE, same, same),
             Candidate(replace(BASE, persist_gauge_blocks=36), same, same)]
    assert cands[select(cands, Budget(0.3, 64), BASE) or 0] is BASE_CAND


def _fig_hard(early: int, pred_fp: int, hard_fp: int) -> Figures:
    return Figures((0.0, 86_400.0), 10, 5, early, pred_fp + hard_fp, float(pred_fp + hard_fp),
                   (KindRate("predictive", pred_fp, float(pred_fp), 3.0),
                    KindRate("hard", hard_fp, float(hard_fp), 3.0)), 3.0)


def test_hard_false_alarms_over_budget_leave_predictive_alerts_none() -> None:
    """Episode settings cannot change hard-evidence alerts: when those alone exceed the
    budget, the predictive ones may raise no false alarm at all."""
    loose = Candidate(replace(BASE, score_on=9.0), _fig_hard(3, 1, 1), _fig_hard(3, 1, 1))
    strict = Candidate(replace(BASE, score_on=18.0), _fig_hard(1, 0, 1), _fig_hard(1, 0, 1))
    assert select([loose, strict], Budget(0.3), BASE) == 1
    assert select([loose, strict], Budget(2.0), BASE) == 0
    assert strict.within(Budget(0.3)) and not loose.within(Budget(0.3))


def test_select_none_when_nothing_meets_the_budget() -> None:
    assert select([Candidate(BASE, _fig(1, 1, 3), _fig(1, 1, 3))], Budget(0.3), BASE) is None


def test_candidate_grid_holds_the_base_and_varies_episode_knobs_only() -> None:
    base = DetectorConfig(score_on=10.0, halflife_s=1234.0)
    grid = candidate_grid(base)
    assert base in grid
    assert len(grid) == len(set(grid))
    assert {c.halflife_s for c in grid} == {1234.0}
    assert min(c.score_on for c in grid) < 10.0 < max(c.score_on for c in grid)
    assert all(c.score_off <= c.score_on for c in grid)
    # accumulated-evidence bars (where the config has them) move with score_on
    for knob in EVIDENCE_KNOBS:
        if hasattr(base, knob):
            assert all(getattr(c, knob) / getattr(base, knob) == pytest.approx(c.score_on / 10.0)
                       for c in grid)


def test_guard_is_looser() -> None:
    g = guard(BASE)
    assert g.score_on < BASE.score_on and g.score_off < BASE.score_off
    assert g.persist_blocks <= BASE.persist_blocks
    assert g.persist_gauge_blocks < BASE.persist_gauge_blocks


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.5, 2.0])
def test_split_must_be_inside(fraction: float) -> None:
    with pytest.raises(ConfigError, match="--split"):
        split_spans(0.0, 100.0, fraction)


def test_split_is_time_ordered() -> None:
    assert split_spans(100.0, 200.0, 0.25) == ((100.0, 125.0), (125.0, 200.0))


@pytest.mark.parametrize(("fp", "nodes"), [(-1.0, 64), (0.3, 0)])
def test_budget_validation(fp: float, nodes: int) -> None:
    with pytest.raises(ConfigError):
        Budget(fp, nodes)


# --- tune(): clear errors before any scoring ---------------------------------------------------

STEP = 60
T0 = 1_700_000_000 // 3600 * 3600


def _telemetry(hours: float, xid_at_h: float | None = None, n: int = 6, g: int = 4
               ) -> Telemetry:
    rng = np.random.default_rng(0)
    t = int(hours * 3600 / STEP)
    times = (T0 + np.arange(t) * STEP).astype(np.int64)
    ents = tuple(Entity(f"node{i}", str(j)) for i in range(n) for j in range(g))
    util = np.clip(90 + rng.normal(0, 2, (n * g, t)), 0, 100)
    temp = 60 + rng.normal(0, 0.7, (n * g, t))
    xid = np.zeros((n * g, t))
    if xid_at_h is not None:
        xid[1, int(xid_at_h * 3600 / STEP):] = 79
    return Telemetry(times, STEP, (
        MetricSeries("DCGM_FI_DEV_GPU_UTIL", MetricKind.GAUGE, ents, util),
        MetricSeries("DCGM_FI_DEV_GPU_TEMP", MetricKind.GAUGE, ents, temp),
        MetricSeries("DCGM_FI_DEV_XID_ERRORS", MetricKind.GAUGE, ents, xid)))


def test_tune_says_how_much_history_it_needs() -> None:
    need_h = min_history_s(BASE, 0.5) / 3600
    with pytest.raises(ConfigError, match=rf"8\.0 h.*at least {need_h:.1f} h"):
        tune(_telemetry(8), GroundTruth(), Budget(0.3), fraction=0.5)


def test_tune_needs_a_failure_in_the_tuning_part() -> None:
    hours = min_history_s(BASE, 0.5) / 3600 + 1
    late = GroundTruth(failures=(Failure("node0", T0 + (hours - 1) * 3600, 79),))
    with pytest.raises(ConfigError, match="no known failure in the tuning part"):
        tune(_telemetry(hours), late, Budget(0.3), fraction=0.5)


# --- failures from the event store -------------------------------------------------------------

def _xid_event(host: str, t: float, xid: int, kind: str = "absolute") -> FailureEvent:
    return FailureEvent(Category.GPU_HARDWARE, Action.EXCLUDE_NODE, Severity.FATAL, "xid",
                        f"Xid {xid}", time=t, time_kind=TimeKind(kind), host=host, gpu_index=0,
                        xid=xid)


def test_store_events_become_failures_with_the_kernel_log_rules(tmp_path: Path) -> None:
    from trainguard.detect.tune_truth import truth_from_events
    from trainguard.store import Store

    with Store.open(str(tmp_path / "tg.db")) as store:
        store.add_events([_xid_event("n1", 1000.0, 79), _xid_event("n1", 1200.0, 45),  # merged
                          _xid_event("n2", 5000.0, 13),                     # application XID
                          _xid_event("n3", 50.0, 48, kind="relative"),      # no wall time
                          _xid_event("n4", 9000.0, 94)])
        truth = truth_from_events(store.events())
    assert [(f.node, f.time, f.xid) for f in truth.failures] == [("n1", 1000.0, 79),
                                                                 ("n4", 9000.0, 94)]
    assert [(a.node, a.xid) for a in truth.app_xids] == [("n2", 13)]
