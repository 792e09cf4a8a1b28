"""A round's errors reach a person once: `round` reports them without logging, the `run` loop
logs each one once, and a failed Alertmanager post says why."""

from __future__ import annotations

import logging
import threading
import urllib.request
from pathlib import Path

import pytest

from trainguard.telemetry.prometheus import PrometheusClient
from trainguard.watch.config import WatchConfig
from trainguard.watch.service import WatchService

URL = "http://prom.test:9090"


def _refused(_request: urllib.request.Request, _timeout: float) -> tuple[int, bytes]:
    raise ConnectionRefusedError(111, "Connection refused")


def _service(tmp_path: Path) -> WatchService:
    cfg = WatchConfig(prometheus=URL, step_s=30, history_s=600, state_dir=tmp_path / "state")
    client = PrometheusClient(URL, transport=_refused, retries=0)
    svc = WatchService(cfg, client=client, clock=lambda: 1_800_000_000.0)
    svc.load()
    return svc


def test_round_reports_its_errors_without_logging_them(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    svc = _service(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="trainguard"):
        report = svc.round()
    assert report.failed and report.fetched_to is None
    assert [e.split(":")[0] for e in report.errors] == ["query"]
    assert "cannot reach Prometheus" in report.errors[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_loop_logs_each_error_of_a_round_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    svc = _service(tmp_path)
    stop = threading.Event()
    reports = []

    def one_round(report: object) -> None:
        reports.append(report)
        stop.set()

    with caplog.at_level(logging.WARNING, logger="trainguard"):
        svc.run(stop, on_round=one_round)
    assert len(reports) == 1
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(logged) == 1 and "cannot reach Prometheus" in logged[0]
