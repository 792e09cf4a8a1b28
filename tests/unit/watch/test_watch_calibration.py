"""The watch service with a `trainguard tune` calibration: every detector alert carries its kind's
expected false-alarm rate (changes, state, Alertmanager annotations); without one, none does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakeprom import FakePrometheus
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.detect.calibration import Calibration, DetectorFile, KindRate, dumps
from trainguard.detect.config import DetectorConfig
from trainguard.simulate import SimConfig
from trainguard.simulate.serve import LiveExporter
from trainguard.telemetry.prometheus import PrometheusClient
from trainguard.watch.alertmanager import AlertmanagerClient, NodeAlert, to_payload
from trainguard.watch.alerts import Change
from trainguard.watch.config import WatchConfig
from trainguard.watch.service import WatchService
from trainguard.watch.state import LiveAlert

SIM = SimConfig(nodes=6, gpus_per_node=2, days=0.1, seed=2, failures_per_day=6,
                maintenances_per_day=0, benign_per_day=0, scrape_gaps_per_day=0,
                app_xids_per_day=0, no_precursor_fraction=0)
"""An XID on node01 at 2520 s, a predictive alert on node03 at 3570 s (see test_service.py)."""
T0 = float(SIM.start_s)
URL = "http://prom.test:9090"
CAL = Calibration(64, 0.3, 16, (T0 - 2e5, T0 - 1e5), (T0 - 1e5, T0),
                  (KindRate("predictive", 1, 0.25, 1.5), KindRate("hard", 0, 0.0, 0.7)))


def _run(tmp_path: Path, cal: Calibration | None,
         notes: list[str] | None = None) -> tuple[list[Change], list[dict[str, object]]]:
    exporter = LiveExporter.from_config(SIM, 1.0, clock=lambda: T0)
    prom = FakePrometheus(exporter)
    posted: list[dict[str, object]] = []

    def am_transport(url: str, body: bytes, headers: object, timeout: float) -> int:
        posted.extend(json.loads(body))
        return 200

    now = [T0 + 1200]
    changes: list[Change] = []
    cfg = WatchConfig(prometheus=URL, detect=DetectorConfig(warmup_s=1800), history_s=1200,
                      state_dir=tmp_path / "state", calibration=cal)
    svc = WatchService(cfg, client=PrometheusClient(URL, transport=prom.transport, retries=0),
                       clock=lambda: now[0], on_change=changes.append,
                       on_note=None if notes is None else notes.append,
                       alertmanager=AlertmanagerClient("http://am.test:9093",
                                                       transport=am_transport, retries=0))
    svc.load()
    while now[0] < T0 + 4000:
        prom.advance(now[0])
        svc.round()
        now[0] += 90.0
    return changes, posted


def test_watch_alerts_carry_the_calibrated_rate_of_their_kind(tmp_path: Path) -> None:
    notes: list[str] = []
    changes, posted = _run(tmp_path, CAL, notes)
    # issue #28: a 16-node calibration on this 6-node cluster is noted, once
    assert len(notes) == 1 and "tuned on 16 nodes" in notes[0]
    assert "this cluster has 6 nodes" in notes[0] and "scales with the node count" in notes[0]
    fired = [c.alert for c in changes if c.kind == "fired"]
    assert {a.kind for a in fired} == {"hard", "predictive"}
    for a in fired:
        assert a.expected_fp_per_day == {"hard": 0.0, "predictive": 0.25}[a.kind]
        assert a.expected_fp_per_nodes == 64
        assert a.expected_fp_per_day_upper95 == {"hard": 0.7, "predictive": 1.5}[a.kind]
        back = LiveAlert.from_dict(json.loads(json.dumps(a.to_dict())))  # state round trip
        assert (back.expected_fp_per_day, back.expected_fp_per_nodes,
                back.expected_fp_per_day_upper95) == (
            a.expected_fp_per_day, a.expected_fp_per_nodes, a.expected_fp_per_day_upper95)
    assert posted
    for item in posted:
        ann = item["annotations"]
        assert isinstance(ann, dict) and "summary" in ann
        kind = item["labels"]["kind"]  # type: ignore[index]
        assert ann["expected_fp_per_day"] == {"hard": "0", "predictive": "0.25"}[kind]
        assert ann["expected_fp_per_nodes"] == "64"
        assert ann["expected_fp_per_day_upper95"] == {"hard": "0.7", "predictive": "1.5"}[kind]


def test_a_calibration_of_this_clusters_size_is_not_noted(tmp_path: Path) -> None:
    from dataclasses import replace

    notes: list[str] = []
    _run(tmp_path, replace(CAL, n_nodes=SIM.nodes, gpus_per_node=SIM.gpus_per_node), notes)
    assert notes == []


def test_without_calibration_no_rate_is_claimed(tmp_path: Path) -> None:
    changes, posted = _run(tmp_path, None)
    assert changes and all(c.alert.expected_fp_per_day is None for c in changes)
    assert posted and all("expected_fp_per_day" not in item["annotations"]  # type: ignore[operator]
                          for item in posted)


def test_payload_annotations_never_replace_the_summary() -> None:
    a = NodeAlert("n1", "warning", 0.0, summary="real", annotations={"summary": "x", "k": "v"})
    assert to_payload([a])[0]["annotations"] == {"summary": "real", "k": "v"}


@pytest.mark.parametrize(("text", "match"), [
    (None, "no such file"), ("[detect]\nscore_onn = 1\n", "unknown key(s): score_onn")])
def test_watch_detector_config_errors_exit_2(tmp_path: Path, text: str | None,
                                             match: str) -> None:
    path = tmp_path / "d.toml"
    if text is not None:
        path.write_text(text)
    r = CliRunner().invoke(app, ["watch", "--prometheus", URL, "--once", "--detector-config",
                                 str(path), "--state-dir", str(tmp_path / "s"), "--db", "none",
                                 "--listen", "off"])
    assert r.exit_code == 2
    assert match in r.stderr and "Traceback" not in r.output
    assert not (tmp_path / "s").exists()


def test_watch_reads_the_file_tune_writes(tmp_path: Path) -> None:
    from trainguard.detect.calibration import load
    from trainguard.watch.config import load_config
    path = tmp_path / "d.toml"
    path.write_text(dumps(DetectorFile(DetectorConfig(score_on=14.0), CAL)))
    f = load(path)
    cfg = load_config(None, {"prometheus": URL, "detect": f.detect, "calibration": f.calibration})
    assert cfg.detect.score_on == 14.0 and cfg.calibration == CAL
