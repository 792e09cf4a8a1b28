"""`trainguard watch --node-label` / `watch.node_label`: the label that names the node live."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakeprom import FakePrometheus

from trainguard.detect.config import DetectorConfig
from trainguard.errors import ConfigError
from trainguard.simulate import SimConfig
from trainguard.simulate.serve import LiveExporter
from trainguard.telemetry.prometheus import PrometheusClient
from trainguard.watch.config import WatchConfig, load_config
from trainguard.watch.service import WatchService

SIM = SimConfig(nodes=3, gpus_per_node=2, days=0.05, seed=2, failures_per_day=0,
                maintenances_per_day=0, benign_per_day=0, scrape_gaps_per_day=0,
                app_xids_per_day=0)
T0 = float(SIM.start_s)
URL = "http://prom.test:9090"


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "watch.toml"
    p.write_text(text)
    return p


def test_node_label_from_the_file_and_the_flag(tmp_path: Path) -> None:
    path = _toml(tmp_path, '[watch]\nprometheus = "http://p:9090"\nnode_label = "node"\n')
    assert load_config(path, {}).node_label == ("node",)
    flag = ("kubernetes_node", "instance")
    assert load_config(path, {"node_label": flag}).node_label == flag
    assert load_config(None, {"prometheus": "http://p:9090"}).node_label == ()
    listed = _toml(tmp_path, '[watch]\nprometheus = "http://p:9090"\n'
                   'node_label = ["kubernetes_node", "instance"]\n')
    assert load_config(listed, {}).node_label == flag


@pytest.mark.parametrize(("text", "match"), [
    ('node_label = 3', "watch.node_label must be a label name or a list of them"),
    ('node_label = " "', "watch.node_label must name a label, got ''"),
    ('node_label = ["a", 3]', "watch.node_label must be label names, got 3"),
])
def test_a_bad_node_label_names_the_key(tmp_path: Path, text: str, match: str) -> None:
    path = _toml(tmp_path, f'[watch]\nprometheus = "http://p:9090"\n{text}\n')
    with pytest.raises(ConfigError, match=match):
        load_config(path, {})


def _round(tmp_path: Path, node_label: str) -> tuple[WatchService, tuple[str, ...], int]:
    """One warm-up round of a watch whose node label is `node_label`."""
    prom = FakePrometheus(LiveExporter.from_config(SIM, 1.0, clock=lambda: T0))
    now = T0 + 1200
    prom.advance(now)
    cfg = WatchConfig(prometheus=URL, detect=DetectorConfig(warmup_s=600), history_s=1200,
                      state_dir=tmp_path / "state", node_label=(node_label,), listen=None)
    svc = WatchService(cfg, client=PrometheusClient(URL, transport=prom.transport, retries=0),
                       clock=lambda: now)
    svc.load()
    report = svc.round()
    return svc, report.errors, report.samples


def test_the_chosen_label_names_the_nodes_live(tmp_path: Path) -> None:
    _, errors, samples = _round(tmp_path, "Hostname")
    assert errors == ()
    assert samples > 0


def test_a_node_label_no_series_carries_is_a_round_error_naming_the_labels(
        tmp_path: Path) -> None:
    _, errors, _ = _round(tmp_path, "kubernetes_node")
    assert len(errors) == 1
    assert errors[0].startswith("query: no series carries the node label kubernetes_node; ")
    assert "Hostname" in errors[0] and "--node-label NAME" in errors[0]


def test_the_cli_flag_reaches_the_config(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trainguard.cli.main import app

    result = CliRunner().invoke(app, ["watch", "--prometheus", "http://p:9090",
                                      "--node-label", "a b", "--once"])
    assert result.exit_code == 2, result.output
    assert "--node-label must name a label, got 'a b'" in " ".join(result.output.split())
