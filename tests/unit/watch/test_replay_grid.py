"""A replay against a Prometheus that keeps time in milliseconds, as the real one does: every
round that brings one new point scores it, at its own detector time (issue 28: "no samples
between ..." warnings during the warm-up, although Prometheus had the samples)."""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from trainguard.telemetry.frame import Telemetry
from trainguard.telemetry.prometheus import PrometheusClient
from trainguard.watch.config import TimeMap, WatchConfig
from trainguard.watch.replaygrid import ReplayGrid
from trainguard.watch.service import WatchService

URL = "http://prom.test:9090"
SIM_START = 1_731_888_000
WALL_START = 1_800_000_000.123
SPEED = 90.0
STEP = 30
TM = TimeMap(SPEED, SIM_START, WALL_START, phase_s=0.9 * STEP / SPEED)


def _prom_ms(text: str) -> int:
    """Prometheus' parseTime: float seconds rounded to the millisecond."""
    return int(Decimal(text).scaleb(3).quantize(Decimal(1)))


def _prom_step_ms(text: str) -> int:
    """Prometheus' step: float seconds to nanoseconds, then cut to whole milliseconds."""
    return int(float(text) * 1e9) // 1_000_000


def simulated_sample(wall: float) -> float:
    """The simulator's newest sample at wall time `wall`: its simulated time is its value."""
    k = math.floor((wall - WALL_START) * SPEED / STEP + 1e-9)
    return float(SIM_START + k * STEP)


def millisecond_prometheus(request: urllib.request.Request, _timeout: float) -> tuple[int, bytes]:
    """One GPU series, evaluated on Prometheus' millisecond grid."""
    url = urllib.parse.urlsplit(request.full_url)
    q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
    data: object
    if url.path == "/api/v1/label/__name__/values":
        data = ["DCGM_FI_DEV_GPU_TEMP"]
    elif url.path in ("/api/v1/metadata", "/api/v1/targets"):
        data = {}
    elif url.path == "/api/v1/query_range":
        start, end, step = _prom_ms(q["start"]), _prom_ms(q["end"]), _prom_step_ms(q["step"])
        points = [[t / 1000, str(simulated_sample(t / 1000))]
                  for t in range(start, end + 1, step)]
        data = {"resultType": "matrix", "result": [
            {"metric": {"Hostname": "node01", "gpu": "0"}, "values": points}]}
    else:
        return 404, b'{"status":"error","error":"not found"}'
    return 200, json.dumps({"status": "success", "data": data}).encode()


def test_each_one_point_round_scores_its_point_at_its_own_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [TM.to_prom(SIM_START + 20 * STEP) + 0.2]
    cfg = WatchConfig(prometheus=URL, step_s=STEP, history_s=10 * STEP, replay=TM,
                      state_dir=tmp_path / "state")
    svc = WatchService(cfg, client=PrometheusClient(URL, transport=millisecond_prometheus,
                                                    retries=0), clock=lambda: now[0])
    svc.load()
    fed: list[Telemetry] = []
    monkeypatch.setattr(svc, "_feed", fed.append)
    reports = []
    for _ in range(12):  # the warm-up, then one new simulated sample per round
        reports.append(svc.round())
        now[0] += STEP / SPEED
    assert [r.errors for r in reports] == [()] * 12
    assert [r.samples for r in reports] == [11] + [1] * 11
    times = np.concatenate([t.times for t in fed])
    assert times.tolist() == list(range(SIM_START + 10 * STEP, SIM_START + 32 * STEP, STEP))
    for tel in fed:  # each value (the simulated time of its sample) sits at its own time
        [series] = tel.metrics
        assert series.values[0].tolist() == tel.times.astype(float).tolist()


@pytest.mark.parametrize("k", range(6))
def test_the_query_is_on_whole_milliseconds_and_maps_back_exactly(k: int) -> None:
    lo = SIM_START + k * STEP
    grid = ReplayGrid.of(TM, lo, lo + 5 * STEP, STEP)
    assert grid.start * 1000 == pytest.approx(round(grid.start * 1000), abs=1e-3)
    assert abs(grid.start - TM.to_prom(lo)) <= 0.0005 + 1e-9
    evals = [_prom_ms(f"{grid.start:.3f}") + i * _prom_step_ms(f"{grid.step:.3f}")
             for i in range(6)]
    assert grid.to_det(np.array(evals) / 1000).tolist() == [lo + i * STEP for i in range(6)]


def test_the_loop_logs_one_line_per_round_with_iso_times_and_the_warm_up(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import threading

    now = [TM.to_prom(SIM_START + 20 * STEP) + 0.2]
    cfg = WatchConfig(prometheus=URL, step_s=STEP, history_s=10 * STEP, replay=TM,
                      state_dir=tmp_path / "state", interval_s=0.001)
    svc = WatchService(cfg, client=PrometheusClient(URL, transport=millisecond_prometheus,
                                                    retries=0), clock=lambda: now[0])
    svc.load()
    stop = threading.Event()
    rounds = []

    def on_round(report: object) -> None:
        rounds.append(report)
        now[0] += STEP / SPEED
        if len(rounds) == 3:
            stop.set()

    with caplog.at_level(logging.INFO, logger="trainguard.watch"):
        svc.run(stop, on_round=on_round)
    lines = [r.getMessage() for r in caplog.records if r.name == "trainguard.watch.service"]
    warm = math.ceil(cfg.detect.warmup_s / cfg.detect.block_s)
    assert lines == [
        f"watch: scored 2024-11-18T00:05:00Z to 2024-11-18T00:10:00Z (11 samples); "
        f"warm-up: 3/{warm} blocks",  # blocks from 00:04:00, the block holding the first sample
        f"watch: scored 2024-11-18T00:10:30Z to 2024-11-18T00:10:30Z (1 sample); "
        f"warm-up: 3/{warm} blocks",
        f"watch: scored 2024-11-18T00:11:00Z to 2024-11-18T00:11:00Z (1 sample); "
        f"warm-up: 3/{warm} blocks"]
