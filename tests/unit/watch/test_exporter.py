"""/metrics: every shared metric name, label escaping, snapshot swaps, own registry."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from trainguard.watch import names
from trainguard.watch.exporter import MetricsExporter, MetricsSnapshot, OpenAlert
from trainguard.watch.http import HttpServer, ServerConfig

SNAP = MetricsSnapshot(
    node_scores={"gpu-node-1": 0.0, "gpu-node-2": 4.25},
    open_alerts=(OpenAlert("gpu-node-2", "warning", "predictive"),
                 OpenAlert("gpu-node-2", "warning", "predictive")),  # duplicate: one series
    alerts_total={"warning": 3, "critical": 1},
    errors_total={"query": 2},
    actions_total={("exclude", "dry_run"): 1},
    last_success=1_700_000_000.0, lag_s=12.5)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_every_metric_rendered() -> None:
    exporter = MetricsExporter()
    exporter.update(SNAP)
    got = _samples(exporter.render().decode())
    assert got[(names.NODE_RISK, (("node", "gpu-node-2"),))] == 4.25
    assert got[(names.NODE_RISK, (("node", "gpu-node-1"),))] == 0.0
    assert got[(names.NODE_ALERT_ACTIVE,
                (("kind", "predictive"), ("node", "gpu-node-2"), ("severity", "warning")))] == 1
    assert sum(1 for k in got if k[0] == names.NODE_ALERT_ACTIVE) == 1
    assert got[(names.ALERTS_TOTAL, (("severity", "warning"),))] == 3
    assert got[(names.SCRAPE_ERRORS_TOTAL, (("stage", "query"),))] == 2
    assert got[(names.ACTIONS_TOTAL, (("action", "exclude"), ("outcome", "dry_run")))] == 1
    assert got[(names.SCRAPE_LAST_SUCCESS, ())] == 1_700_000_000.0
    assert got[(names.SCRAPE_LAG, ())] == 12.5


def test_types_in_text() -> None:
    exporter = MetricsExporter()
    exporter.update(SNAP)
    text = exporter.render().decode()
    assert f"# TYPE {names.ALERTS_TOTAL} counter" in text
    assert f"# TYPE {names.NODE_RISK} gauge" in text


def test_before_first_round_no_health_gauges() -> None:
    text = MetricsExporter().render().decode()
    assert names.SCRAPE_LAST_SUCCESS not in text
    assert names.SCRAPE_LAG not in text


@pytest.mark.parametrize("node", ['a"b', "back\\slash", "new\nline", "ünï"])
def test_label_values_escaped(node: str) -> None:
    exporter = MetricsExporter()
    exporter.update(MetricsSnapshot(node_scores={node: 1.0}))
    assert _samples(exporter.render().decode()) == {(names.NODE_RISK, (("node", node),)): 1.0}


def test_update_replaces_snapshot_and_nodes_disappear() -> None:
    exporter = MetricsExporter()
    exporter.update(SNAP)
    exporter.update(MetricsSnapshot(node_scores={"gpu-node-9": 1.0}))
    text = exporter.render().decode()
    assert "gpu-node-2" not in text and "gpu-node-9" in text
    assert exporter.snapshot.node_scores == {"gpu-node-9": 1.0}


def test_own_registry_not_global() -> None:
    a, b = MetricsExporter(), MetricsExporter()  # no duplicate-registration error
    a.update(SNAP)
    assert b"gpu-node-2" not in b.render()
    assert names.NODE_RISK not in {m.name for m in REGISTRY.collect()}


def test_negative_counter_rejected() -> None:
    with pytest.raises(ValueError, match=r"snapshot\.alerts_total"):
        MetricsSnapshot(alerts_total={"warning": -1})
    with pytest.raises(ValueError, match=r"snapshot\.actions_total"):
        MetricsSnapshot(actions_total={("exclude", "done"): -1})


def test_served_over_http() -> None:
    exporter = MetricsExporter()
    exporter.update(SNAP)
    with HttpServer(ServerConfig(), exporter.routes()) as srv, \
            urllib.request.urlopen(f"{srv.url}/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        body = resp.read().decode()
    assert _samples(body) == _samples(exporter.render().decode())
