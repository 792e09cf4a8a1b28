"""Issue #30 early warnings: slow wear trends (detect/trend.py) and activity drops that an
application XID or a job start explains (detect/explained.py), through the whole detector."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from trainguard.detect.alerts import AlertEpisode
from trainguard.detect.config import ConfigError, DetectorConfig
from trainguard.detect.detector import detect
from trainguard.detect.explained import application_xid_mask
from trainguard.detect.trend import poisson_confidence, predictive_confidence
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry

STEP = 30
T0 = 1_800_000_000 - 1_800_000_000 % 7200
NODES = [f"n{i}" for i in range(5)]
GPUS = 4
CFG = DetectorConfig(warmup_s=3600)
PER_H = 3600 // STEP

Shape = Callable[[dict[str, np.ndarray], np.random.Generator], None]


def _cluster(shape: Shape, hours: int, seed: int = 0) -> Telemetry:
    rng = np.random.default_rng(seed)
    n, g, t = len(NODES), GPUS, hours * PER_H
    arrays: dict[str, np.ndarray] = {
        "DCGM_FI_DEV_GPU_UTIL": np.clip(98 + rng.normal(0, 0.7, (n, g, t)), 0, 100).round(),
        "DCGM_FI_DEV_POWER_USAGE": 600 + rng.normal(0, 4, (n, g, t)),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": np.zeros((n, g, t)),
        "DCGM_FI_DEV_XID_ERRORS": np.zeros((n, g, t)),
    }
    shape(arrays, rng)
    ents = tuple(Entity(nd, str(k)) for nd in NODES for k in range(g))
    metrics = [MetricSeries(name, MetricKind.GAUGE, ents, a.reshape(n * g, t))
               for name, a in arrays.items()]
    return Telemetry(T0 + STEP * np.arange(t, dtype=np.int64), STEP, tuple(metrics))


def _details(alerts: list[AlertEpisode]) -> list[tuple[str, str, str]]:
    return [(a.node, s.metric, s.detail) for a in alerts if a.kind.value == "predictive"
            for s in a.signals]


def _remaps(first_h: float, every_min: float) -> Shape:
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        t = a["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"].shape[-1]
        inc = np.zeros(t)
        inc[int(first_h * PER_H)::int(every_min * 60 / STEP)] = 1.0
        a["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"][1, 2] = np.cumsum(inc)
    return shape


def test_remapped_rows_growing_for_hours_after_a_quiet_history_alert_with_lead_and_confidence(
) -> None:
    found = [d for d in _details(detect(_cluster(_remaps(8, 40), hours=14), CFG))
             if "degradation" in d[2]]
    assert found and found[0][:2] == ("n1", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS")
    assert "degradation seen for 2." in found[0][2] and "confidence 0.99" in found[0][2]


def test_a_gpu_that_always_remapped_at_that_rate_is_no_degradation() -> None:
    alerts = detect(_cluster(_remaps(0, 40), hours=14), CFG)
    assert not [d for d in _details(alerts) if "degradation" in d[2]]


def test_poisson_confidence() -> None:
    assert poisson_confidence(0, 1.0) == 0.0
    assert poisson_confidence(5, 1.0) == pytest.approx(1 - 0.0036599, abs=1e-6)
    assert poisson_confidence(5, 1.0) > poisson_confidence(4, 1.0) > poisson_confidence(4, 2.0)


def _stalls(xid: int) -> Shape:
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        t = a["DCGM_FI_DEV_GPU_UTIL"].shape[-1]
        for start in range(t - 120, t - 8, 12):  # a 2-min stall every 6 minutes
            a["DCGM_FI_DEV_GPU_UTIL"][3, 1, start:start + 4] = 20.0
            a["DCGM_FI_DEV_XID_ERRORS"][3, 1, start:start + 4] = xid
            if xid:
                a["DCGM_FI_DEV_XID_ERRORS"][3, 1, start + 4:start + 8] = 0.0
    return shape


def test_stalls_at_application_xids_are_the_applications() -> None:
    stalls = [d for d in _details(detect(_cluster(_stalls(0), hours=6), CFG)) if "stalls" in d[2]]
    assert stalls and stalls[0][0] == "n3"  # the same shape without XIDs is a precursor
    at_app = _details(detect(_cluster(_stalls(13), hours=6), CFG))
    assert not [d for d in at_app if "stalls" in d[2]]


def test_stalls_while_a_job_settles_are_not_counted() -> None:
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        t = a["DCGM_FI_DEV_GPU_UTIL"].shape[-1]
        a["DCGM_FI_DEV_GPU_UTIL"][3, :, t - 160:t - 120] = 0.0  # node idle, then a job starts
        a["DCGM_FI_DEV_POWER_USAGE"][3, :, t - 160:t - 120] = 70.0
        for start in range(t - 120, t - 100, 6):  # ragged start: 1-min dips on one GPU
            a["DCGM_FI_DEV_GPU_UTIL"][3, 1, start:start + 2] = 20.0
    alerts = detect(_cluster(shape, hours=6), CFG)
    assert not [d for d in _details(alerts) if "stalls" in d[2]]


def test_application_xid_mask() -> None:
    got = application_xid_mask(np.array([0.0, 13.0, 79.0, np.nan, 43.0, 48.0]))
    assert got.tolist() == [False, True, False, False, True, False]


@pytest.mark.parametrize("kw", [{"trend_confidence": 1.0}, {"trend_min_events": 1},
                                {"trend_window_s": 10.0}])
def test_bad_trend_settings_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        DetectorConfig(**kw)  # type: ignore[arg-type]


def _spells() -> Shape:
    """n1's GPU 2 remaps 3 rows in its first 7 h, then one every 80 minutes: uneven spells of a
    GPU that remaps now and then, no faster and faster."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        t = a["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"].shape[-1]
        inc = np.zeros(t)
        inc[[1 * PER_H, 3 * PER_H, 5 * PER_H]] = 1.0
        inc[7 * PER_H::80 * 60 // STEP] = 1.0
        a["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"][1, 2] = np.cumsum(inc)
    return shape


def test_a_few_events_in_a_short_history_prove_no_low_rate() -> None:
    """The rule sees the last two of the first 7 h's remaps (the first one tells it the field is a
    counter): a usual rate of 7 a day. 18 in the next day is 1 in 3,000 at that rate (Poisson),
    but that rate, known from two events, could as well be three times higher: 1 in 20
    (`predictive_confidence`). No degradation."""
    assert not [d for d in _details(detect(_cluster(_spells(), hours=32), CFG))
                if "degradation" in d[2]]


def test_predictive_confidence() -> None:
    assert predictive_confidence(0, 3.0, 0.5) == 0.0
    # Many events in a long history: close to Poisson at the rate they give.
    assert predictive_confidence(30, 2000.0, 2000 / 2020) == pytest.approx(
        poisson_confidence(30, 20.0), abs=2e-3)
    # Few: a heavier tail than Poisson at the same rate.
    assert predictive_confidence(17, 2.0, 210 / 930) < poisson_confidence(17, 2 / 210 * 720)
