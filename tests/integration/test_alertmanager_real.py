"""A real Alertmanager (Debian's ``prometheus-alertmanager``) against trainguard's client and
webhook receiver: an alert posted with :class:`AlertmanagerClient` is listed by Alertmanager, and
Alertmanager delivers it to our ``/alertmanager/webhook`` (and its resolution after)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from alertmanager_server import alertmanager, require_binary
from alertmanager_server import listed as am_listed

from trainguard.watch import names
from trainguard.watch.alertmanager import AlertmanagerClient, NodeAlert
from trainguard.watch.http import HttpServer, ServerConfig
from trainguard.watch.webhook import WEBHOOK_PATH, ReceivedAlert, WebhookReceiver

pytestmark = pytest.mark.integration

DELIVERY_TIMEOUT_S = 20.0


@dataclass
class Collected:
    alerts: list[ReceivedAlert]
    changed: threading.Condition

    def add(self, alert: ReceivedAlert) -> None:
        with self.changed:
            self.alerts.append(alert)
            self.changed.notify_all()

    def wait_for(self, status: str, timeout_s: float) -> list[ReceivedAlert]:
        with self.changed:
            self.changed.wait_for(lambda: any(a.alert.status == status for a in self.alerts),
                                  timeout=timeout_s)
            return [a for a in self.alerts if a.alert.status == status]


@dataclass
class Stack:
    am_url: str
    collected: Collected
    alerts_file: Path


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    require_binary()
    collected = Collected([], threading.Condition())
    alerts_file = tmp_path / "alerts.jsonl"
    receiver = WebhookReceiver(alerts_file=alerts_file, on_alert=collected.add)
    server = HttpServer(ServerConfig(), receiver.routes())
    server.start()
    config = {
        "route": {"receiver": "trainguard", "group_by": ["alertname", "node"],
                  "group_wait": "100ms", "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "trainguard", "webhook_configs": [
            {"url": server.url + WEBHOOK_PATH, "send_resolved": True}]}],
    }
    try:
        with alertmanager(tmp_path, config) as url:
            yield Stack(url, collected, alerts_file)
    finally:
        server.stop()


def test_alert_arrives_in_alertmanager_and_back_through_webhook(stack: Stack) -> None:
    client = AlertmanagerClient(stack.am_url, sleep=lambda s: None)
    start = time.time() - 5
    alert = NodeAlert(node="gpu-node-7", severity="warning", start=start, score=4.2,
                      summary="ECC errors rising")
    assert client.post([alert]) is True, client.last_error

    listed = [a for a in am_listed(stack.am_url)
              if a["labels"].get("alertname") == names.ALERT_NAME]
    assert len(listed) == 1
    assert listed[0]["labels"]["node"] == "gpu-node-7"
    assert listed[0]["labels"]["source"] == names.SOURCE
    assert listed[0]["annotations"]["summary"] == "ECC errors rising"
    assert listed[0]["status"]["state"] == "active"

    firing = stack.collected.wait_for("firing", DELIVERY_TIMEOUT_S)
    assert [(a.node, a.name) for a in firing] == [("gpu-node-7", names.ALERT_NAME)]
    assert firing[0].alert.starts_at == pytest.approx(start, abs=0.01)

    # Resolving: the same alert with endsAt in the past.
    resolved_alert = NodeAlert(node="gpu-node-7", severity="warning", start=start,
                               end=time.time() - 1, score=4.2, summary="ECC errors rising")
    assert client.post([resolved_alert]) is True
    resolved = stack.collected.wait_for("resolved", DELIVERY_TIMEOUT_S)
    assert [a.node for a in resolved] == ["gpu-node-7"]

    lines = [json.loads(x) for x in stack.alerts_file.read_text().splitlines()]
    assert [(r["node"], r["status"]) for r in lines] == [("gpu-node-7", "firing"),
                                                         ("gpu-node-7", "resolved")]
    assert client.errors == 0
