"""The Alertmanager webhook receiver: strict parsing, node labels, dedupe, delivery, 4xx."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainguard.evidence.rules import RuleSet
from trainguard.recover.watch import NodeWatch
from trainguard.store import Store
from trainguard.taxonomy import Severity
from trainguard.watch.http import HttpServer, ServerConfig
from trainguard.watch.webhook import (
    WEBHOOK_PATH,
    ReceivedAlert,
    WebhookPayloadError,
    WebhookReceiver,
    node_of,
    parse_payload,
)


def _alert(**over: Any) -> dict[str, Any]:
    alert: dict[str, Any] = {
        "status": "firing",
        "labels": {"alertname": "GpuXid", "instance": "gpu-node-3:9400", "severity": "critical"},
        "annotations": {"summary": "XID 79 on GPU 2"},
        "startsAt": "2024-05-01T10:00:00.123456789Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prom:9090/graph",
        "fingerprint": "1a30ba71cca2921f",
    }
    alert.update(over)
    return alert


def _payload(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {"version": "4", "groupKey": "{}:{alertname=\"GpuXid\"}", "truncatedAlerts": 0,
            "status": "firing", "receiver": "trainguard", "groupLabels": {"alertname": "GpuXid"},
            "commonLabels": {"alertname": "GpuXid"}, "commonAnnotations": {},
            "externalURL": "http://am:9093", "alerts": list(alerts or [_alert()])}


def test_parse_valid_payload() -> None:
    p = parse_payload(_payload())
    assert p.receiver == "trainguard"
    a = p.alerts[0]
    assert a.starts_at == pytest.approx(1714557600.123456)
    assert a.ends_at is None
    assert a.labels["severity"] == "critical"


def _without(key: str) -> dict[str, Any]:
    p = _payload()
    del p[key]
    return p


def _alert_without(key: str) -> dict[str, Any]:
    a = _alert()
    del a[key]
    return _payload(a)


@pytest.mark.parametrize(("body", "field"), [
    ([], "body"),
    ({**_payload(), "version": "3"}, "version"),
    (_without("version"), "version"),
    ({**_payload(), "status": "weird"}, "status"),
    (_without("receiver"), "receiver"),
    ({**_payload(), "groupLabels": []}, "groupLabels"),
    ({**_payload(), "commonLabels": {"a": 1}}, "commonLabels.a"),
    ({**_payload(), "alerts": {}}, "alerts"),
    (_without("alerts"), "alerts"),
    ({**_payload(), "truncatedAlerts": -1}, "truncatedAlerts"),
    (_payload(_alert(), "x"), "alerts[1]"),
    (_payload(_alert(status="pending")), "alerts[0].status"),
    (_payload(_alert(startsAt="yesterday")), "alerts[0].startsAt"),
    (_payload(_alert(startsAt="2024-05-01T10:00:00")), "alerts[0].startsAt"),
    (_payload(_alert(startsAt="0001-01-01T00:00:00Z")), "alerts[0].startsAt"),
    (_payload(_alert(endsAt=5)), "alerts[0].endsAt"),
    (_payload(_alert(fingerprint="")), "alerts[0].fingerprint"),
    (_alert_without("fingerprint"), "alerts[0].fingerprint"),
    (_alert_without("labels"), "alerts[0].labels"),
    (_payload(_alert(labels={"node": None})), "alerts[0].labels.node"),
    (_payload(_alert(labels={"node": "x" * 5000})), "alerts[0].labels.node"),
])
def test_malformed_payload_names_the_field(body: Any, field: str) -> None:
    with pytest.raises(WebhookPayloadError, match=f"^{field.replace('[', '.').replace(']', '.')}"):
        parse_payload(body)


@pytest.mark.parametrize(("labels", "node"), [
    ({"node": "n1", "instance": "n2:9100"}, "n1"),
    ({"instance": "n2:9100"}, "n2"),
    ({"instance": "n2"}, "n2"),
    ({"instance": "[fe80::1]:9100"}, "fe80::1"),
    ({"Hostname": "n3"}, "n3"),
    ({"job": "x"}, None),
    ({"node": "  "}, None),
])
def test_node_of(labels: dict[str, str], node: str | None) -> None:
    assert node_of(labels) == node


def test_dedupe_and_resolved(tmp_path: Path) -> None:
    got: list[ReceivedAlert] = []
    rx = WebhookReceiver(alerts_file=tmp_path / "alerts.jsonl", on_alert=got.append)
    no_node = _alert(labels={"alertname": "Watchdog"}, fingerprint="ffff")
    first = rx.receive(parse_payload(_payload(_alert(), no_node)))
    assert (first.delivered, first.skipped, first.firing) == (1, 1, 1)
    again = rx.receive(parse_payload(_payload(_alert())))  # Alertmanager's repeat
    assert (again.delivered, again.duplicates) == (0, 1)
    done = rx.receive(parse_payload(_payload(
        _alert(status="resolved", endsAt="2024-05-01T10:05:00Z"))))
    assert (done.delivered, done.resolved) == (1, 1)
    lines = [json.loads(x) for x in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert [(r["node"], r["status"], r["end"]) for r in lines] == [
        ("gpu-node-3", "firing", None), ("gpu-node-3", "resolved", 1714557900.0)]
    assert lines[0]["source"] == "alertmanager" and lines[0]["alertname"] == "GpuXid"
    events = [a.to_event() for a in got]
    assert [e.severity for e in events] == [Severity.NON_FATAL, Severity.INFO]
    assert events[0].host == "gpu-node-3"
    assert events[0].field_value("alertname") == "GpuXid"


def test_alerts_file_feeds_nodewatch(tmp_path: Path) -> None:
    path = tmp_path / "alerts.jsonl"
    path.touch()
    watch = NodeWatch({"gpu-node-3": tmp_path / "kern.log"}, RuleSet([]), alerts_file=path)
    WebhookReceiver(alerts_file=path).receive(parse_payload(_payload()))
    events = watch.poll(0.0)
    assert [(e.host, e.signature) for e in events] == [("gpu-node-3", "detector_alert")]
    assert events[0].field_value("source") == "alertmanager"


def test_firing_alerts_go_to_store(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'tg.db'}")
    rx = WebhookReceiver(store=store)
    rx.receive(parse_payload(_payload(_alert())))
    rx.receive(parse_payload(_payload(_alert(status="resolved",
                                              endsAt="2024-05-01T10:05:00Z"))))
    alerts = store.alerts()
    assert [(a.node, a.source, a.end) for a in alerts] == [("gpu-node-3", "alertmanager", None)]


def test_sink_failures_counted_not_raised(tmp_path: Path) -> None:
    def bad(_: ReceivedAlert) -> None:
        raise RuntimeError("callback bug")

    rx = WebhookReceiver(alerts_file=tmp_path / "missing-dir" / "a.jsonl", on_alert=bad)
    counts = rx.receive(parse_payload(_payload()))
    assert counts.delivered == 1
    assert rx.errors == 2


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    path = tmp_path / "alerts.jsonl"
    rx = WebhookReceiver(alerts_file=path)
    with HttpServer(ServerConfig(max_body_bytes=64 << 10), rx.routes()) as srv:
        yield srv.url + WEBHOOK_PATH, path


def _post(url: str, body: bytes, ctype: str = "application/json") -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_accepts_valid(served: tuple[str, Path]) -> None:
    url, path = served
    status, body = _post(url, json.dumps(_payload()).encode())
    assert status == 200
    assert body == {"received": 1, "delivered": 1, "duplicates": 0, "skipped": 0,
                    "firing": 1, "resolved": 0}
    assert path.read_text().count("\n") == 1


@pytest.mark.parametrize(("body", "status", "needle"), [
    (b"not json", 400, "not JSON"),
    (b"[1, 2]", 400, "body"),
    (json.dumps({**_payload(), "version": 4}).encode(), 400, "version"),
    (json.dumps(_payload(_alert(startsAt="soon"))).encode(), 400, "alerts[0].startsAt"),
    (json.dumps(_payload(*[copy.deepcopy(_alert())] * 400)).encode(), 413, "exceeds"),
])
def test_http_malformed_is_4xx_and_keeps_serving(served: tuple[str, Path], body: bytes,
                                                 status: int, needle: str) -> None:
    url, _ = served
    got, answer = _post(url, body)
    assert got == status
    assert needle in answer["error"]
    assert _post(url, json.dumps(_payload()).encode())[0] == 200
