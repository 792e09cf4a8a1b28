"""Hostile webhook payloads: each is a 400 that says why, and nothing of it is delivered."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainguard.watch.http import HttpServer, ServerConfig
from trainguard.watch.webhook import (
    WEBHOOK_PATH,
    WebhookPayloadError,
    WebhookReceiver,
    node_problem,
    parse_payload,
)


def _alert(**over: Any) -> dict[str, Any]:
    alert: dict[str, Any] = {
        "status": "firing",
        "labels": {"alertname": "GpuXid", "node": "gpu-node-3", "severity": "critical"},
        "annotations": {"summary": "XID 79 on GPU 2"},
        "startsAt": "2024-05-01T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prom:9090/graph", "fingerprint": "1a30ba71cca2921f",
    }
    alert.update(over)
    return alert


def _payload(*alerts: dict[str, Any], **over: Any) -> dict[str, Any]:
    doc = {"version": "4", "groupKey": "{}:{}", "truncatedAlerts": 0, "status": "firing",
           "receiver": "trainguard", "groupLabels": {}, "commonLabels": {},
           "commonAnnotations": {}, "externalURL": "http://am:9093",
           "alerts": list(alerts or [_alert()])}
    doc.update(over)
    return doc


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    path = tmp_path / "alerts.jsonl"
    with HttpServer(ServerConfig(), WebhookReceiver(alerts_file=path).routes()) as srv:
        yield srv.url + WEBHOOK_PATH, path


def _post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


_GOOD = _alert(labels={"node": "gpu-node-1"}, fingerprint="aaaa")


@pytest.mark.parametrize(("body", "needle"), [
    # Python's int() refuses more than 4300 digits with a ValueError: it was a 500
    (b'{"version": "4", "truncatedAlerts": ' + b"9" * 5000 + b"}", "too many digits"),
    (json.dumps(_payload()).encode().replace(b'"alerts": [', b'"alerts": [-' + b"1" * 4301
                                              + b", "), "too many digits"),
    (b'{"version": "4", "truncatedAlerts": NaN}', "NaN is not a JSON value"),
    (json.dumps(_payload(truncatedAlerts=10 ** 30)).encode(), "truncatedAlerts"),
    (json.dumps(_payload(_GOOD, _alert(labels={"node": "gpu\nnode-4"}))).encode(),
     "alerts[1].labels.node"),
    (json.dumps(_payload(_GOOD, _alert(labels={"node": "$(reboot)"}))).encode(),
     "alerts[1].labels.node: '$(reboot)' is not a node name"),
    (json.dumps(_payload(_alert(labels={"Hostname": "n1;rm -rf ~"}))).encode(),
     "alerts[0].labels.Hostname"),
    (json.dumps(_payload(_alert(labels={"instance": "`id`:9100"}))).encode(),
     "alerts[0].labels.instance"),
    (json.dumps(_payload(_alert(labels={"instance": "fe80::1%$(id)"}))).encode(),
     "alerts[0].labels.instance"),
    (json.dumps(_payload(_alert(labels={"node": "n" * 65}))).encode(), "at most 64"),
    # year 10000 in UTC, through a timezone offset fromisoformat accepts
    (json.dumps(_payload(_alert(startsAt="9999-12-31T23:59:59-23:59"))).encode(),
     "alerts[0].startsAt: '9999-12-31T23:59:59-23:59' is outside 2000-2100"),
    (json.dumps(_payload(_alert(startsAt="1970-01-01T00:00:01Z"))).encode(),
     "alerts[0].startsAt"),
    (json.dumps(_payload(_alert(endsAt="2200-01-01T00:00:00Z"))).encode(), "alerts[0].endsAt"),
    (json.dumps(_payload(_alert(status="resolved", endsAt="2024-05-01T09:00:00Z"))).encode(),
     "alerts[0].endsAt: before startsAt"),
    (json.dumps(_payload(_alert(labels={"node": "n1", "job": "a\x1b[2Jb"}))).encode(),
     "alerts[0].labels.job: control character"),
    (json.dumps(_payload(_alert(labels={"node": "n1", "a\nb": "x"}))).encode(),
     "alerts[0].labels: bad name"),
    (json.dumps(_payload(_alert(annotations={"summary": "a\x07b"}))).encode(),
     "alerts[0].annotations.summary: control character"),
    (json.dumps(_payload(_alert(fingerprint="ab\ncd"))).encode(), "alerts[0].fingerprint"),
    (json.dumps(_payload(_alert(fingerprint="$(id)"))).encode(), "alerts[0].fingerprint"),
    (json.dumps(_payload(receiver="x\r\ny")).encode(), "receiver: control character"),
    (json.dumps(_payload(externalURL="u" * 5000)).encode(), "externalURL: longer than"),
    (json.dumps(_payload(_alert(labels={f"l{i}": "v" for i in range(300)}))).encode(),
     "alerts[0].labels: more than 256"),
])
def test_a_hostile_payload_is_a_400_that_says_why_and_delivers_nothing(
        served: tuple[str, Path], body: bytes, needle: str) -> None:
    url, path = served
    status, answer = _post(url, body)
    assert (status, needle in answer["error"]) == (400, True), answer
    assert not path.exists()  # not even the good alert of the same notification
    assert _post(url, json.dumps(_payload()).encode())[0] == 200  # and it keeps serving


@pytest.mark.parametrize("labels", [
    {"node": "gpu-017.cluster.example"}, {"instance": "10.0.0.5:9100"},
    {"instance": "[fe80::1]:9100"}, {"Hostname": "node_3"},
])
def test_real_node_labels_are_delivered(tmp_path: Path, labels: dict[str, str]) -> None:
    rx = WebhookReceiver(alerts_file=tmp_path / "a.jsonl")
    assert rx.receive(parse_payload(_payload(_alert(labels=labels)))).delivered == 1


def test_multi_line_annotations_and_url_instances_are_accepted(tmp_path: Path) -> None:
    rx = WebhookReceiver(alerts_file=tmp_path / "a.jsonl")
    probe = _alert(labels={"instance": "https://example.com/health"}, fingerprint="bbbb",
                   annotations={"description": "line one\n\tline two"})
    counts = rx.receive(parse_payload(_payload(probe)))
    assert (counts.delivered, counts.skipped) == (0, 1)  # a probe target names no node


@pytest.mark.parametrize(("node", "ok"), [
    ("gpu-node-3", True), ("10.1.2.3", True), ("::1", True), ("fe80::1%eth0", False),
    ("a b", False), ("-rf", False), ("", False), ("x" * 65, False), ("n\u2028x", False),
])
def test_node_problem(node: str, ok: bool) -> None:
    assert (node_problem(node) is None) == ok


def test_parse_payload_rejects_an_out_of_range_time_directly() -> None:
    with pytest.raises(WebhookPayloadError, match=r"^alerts\[0\]\.startsAt: .* outside"):
        parse_payload(_payload(_alert(startsAt="2150-01-01T00:00:00+00:00")))
