"""Issue 20, live = offline, on telemetry our simulator did not write: the independent held-out
generator (benchmarks/heldout/gen.py) writes a half-day cluster with an XID 48 (gauge and
uncorrectable counters), GPUs whose series vanish after XID 79, and precursors; a real
Prometheus holds it as backfilled history (no metadata, no staleness markers, its default
5-minute lookback). `trainguard watch`, warming up from that history, must alert on the same
nodes, kinds and onsets (within one step) as `trainguard detect` over the files, and report
what it found in the history (stored, marked historical) instead of dropping it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_server import (
    StartPrometheus,
    prometheus_factory_fixture,  # noqa: F401
)
from script_module import load_script

from trainguard.detect.detector import detect
from trainguard.store import Store
from trainguard.telemetry import load_sources
from trainguard.telemetry.prometheus import PrometheusClient
from trainguard.watch.config import WatchConfig
from trainguard.watch.service import WatchService

pytestmark = pytest.mark.integration

gen = load_script("benchmarks/heldout/gen.py", "heldout_gen")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("heldout") / "cluster"
    gen.generate(out, nodes=6, gpus=4, days=0.5, seed=4, style="a", failure_rate=120,
                 workers=1)
    return out


def test_watch_over_prometheus_history_alerts_like_detect_over_the_files(
        cluster: Path, prometheus_factory: StartPrometheus, tmp_path: Path) -> None:
    labels = [json.loads(x) for x in (cluster / "labels.jsonl").read_text().splitlines()]
    xids = {x["xid"] for x in labels if x["type"] == "failure"}
    assert {48, 79} <= xids  # the kinds the live service used to miss
    assert any(x["precursors"] for x in labels if x["type"] == "failure")

    tel, _ = load_sources([str(cluster / "metrics")])
    offline = detect(tel)
    kinds = {e.kind.value for e in offline}
    metrics = {s.metric for e in offline for s in e.signals}
    # what the issue saw missed live is in there: an XID gauge change, a vanished GPU, a
    # precursor alert ahead of an XID
    assert {"hard", "predictive"} <= kinds
    assert {"DCGM_FI_DEV_XID_ERRORS", "(all GPU series)"} <= metrics

    server = prometheus_factory(sorted((cluster / "metrics").glob("*.om")))
    end = int(tel.times[-1])
    cfg = WatchConfig(prometheus=server.url, state_dir=tmp_path / "state",
                      history_s=float(end - int(tel.times[0]) + 3600), step_s=tel.step_s)
    with Store.open(str(tmp_path / "tg.db")) as store:
        svc = WatchService(cfg, client=PrometheusClient(server.url), store=store,
                           clock=lambda: float(end + 60))
        svc.load()
        report = svc.round()
        assert not report.errors, report.errors
        stored = {(a.node, a.kind, a.start) for a in store.alerts()}

    live = list(svc.state.alerts.values())
    assert all(a.source == "detector" for a in live)
    assert len(live) == len(offline)
    for e in offline:
        match = [a for a in live if (a.node, a.kind) == (e.node, e.kind.value)
                 and abs(a.start - e.start) <= tel.step_s]
        assert len(match) == 1, (e, live)
    # history is reported, not dropped: every alert is stored; those over before the end of the
    # warm-up are marked historical (never paged or acted on)
    assert stored == {(a.node, a.kind, a.start) for a in live}
    assert any(a.historical for a in live)
    assert all(a.historical for a in live if a.end is not None and a.end < end - 3600)
