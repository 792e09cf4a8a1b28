"""The Alertmanager client: payload shape, retries with injected backoff, errors counted."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from trainguard.errors import ConfigError
from trainguard.watch import names
from trainguard.watch.alertmanager import AlertmanagerClient, NodeAlert, to_payload
from trainguard.watch.http import HttpServer, Request, Response, ServerConfig

OPEN = NodeAlert(node="gpu-node-7", severity="warning", start=1_714_557_600.5, score=4.2,
                 summary="ECC errors rising")
CLOSED = NodeAlert(node="gpu-node-8", severity="critical", start=1_714_557_600.0,
                   end=1_714_557_900.0, kind="hard", generator_url="http://tg/alerts/1")


def test_payload_shape() -> None:
    first, second = to_payload([OPEN, CLOSED])
    assert first["labels"] == {"alertname": names.ALERT_NAME, "node": "gpu-node-7",
                               "severity": "warning", "source": names.SOURCE,
                               "kind": "predictive"}
    assert first["annotations"] == {"summary": "ECC errors rising", "score": "4.2"}
    assert first["startsAt"] == "2024-05-01T10:00:00.500Z"
    assert "endsAt" not in first and "generatorURL" not in first
    assert second["endsAt"] == "2024-05-01T10:05:00.000Z"
    assert second["generatorURL"] == "http://tg/alerts/1"


class FakeTransport:
    def __init__(self, *results: int | OSError) -> None:
        self.results = list(results)
        self.calls: list[tuple[str, Any, Mapping[str, str]]] = []

    def __call__(self, url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
        self.calls.append((url, json.loads(body), headers))
        result = self.results.pop(0)
        if isinstance(result, OSError):
            raise result
        return result


@pytest.mark.parametrize(("results", "ok", "calls", "sleeps"), [
    ([200], True, 1, []),
    ([ConnectionRefusedError(), 503, 200], True, 3, [1.0, 2.0]),
    ([500, 500, 500, 500], False, 4, [1.0, 2.0, 4.0]),
    ([429, 200], True, 2, [1.0]),
    ([400], False, 1, []),  # a bad payload is not retried
])
def test_retries_and_backoff(results: list[int | OSError], ok: bool, calls: int,
                             sleeps: list[float]) -> None:
    slept: list[float] = []
    transport = FakeTransport(*results)
    client = AlertmanagerClient("http://am:9093/", transport=transport, retries=3, backoff_s=1.0,
                                sleep=slept.append, token="t0k")
    assert client.post([OPEN]) is ok
    assert len(transport.calls) == calls
    assert slept == sleeps
    assert client.errors == (0 if ok else 1)
    url, body, headers = transport.calls[0]
    assert url == "http://am:9093/api/v2/alerts"
    assert body == to_payload([OPEN])
    assert headers["Authorization"] == "Bearer t0k"


def test_empty_batch_is_not_posted() -> None:
    transport = FakeTransport()
    assert AlertmanagerClient("http://am", transport=transport).post([]) is True
    assert transport.calls == []


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"url": "am:9093"}, "watch.alertmanager.url"),
    ({"retries": -1}, "watch.alertmanager.retries"),
    ({"backoff_s": -1.0}, "watch.alertmanager.backoff_s"),
    ({"timeout_s": 0.0}, "watch.alertmanager.timeout_s"),
])
def test_config_validation(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = {"url": "http://am"} | kwargs
    with pytest.raises(ConfigError, match=match):
        AlertmanagerClient(**args)


def test_alert_validation() -> None:
    with pytest.raises(ValueError, match=r"alert\.node"):
        NodeAlert(node="", severity="warning", start=0.0)


def test_real_socket_with_urllib_transport() -> None:
    got: list[Any] = []

    def accept(req: Request) -> Response:
        got.append(req.json())
        return Response.json({})

    with HttpServer(ServerConfig(), {("POST", "/api/v2/alerts"): accept}) as srv:
        url = srv.url
        client = AlertmanagerClient(srv.url, sleep=lambda s: None)
        assert client.post([OPEN, CLOSED]) is True
        bad = AlertmanagerClient(srv.url + "/nope", sleep=lambda s: None)
        assert bad.post([OPEN]) is False  # 404: counted, not raised
        assert bad.last_error == "HTTP 404"
    assert got == [to_payload([OPEN, CLOSED])]
    unreachable = AlertmanagerClient(url, retries=1, sleep=lambda s: None, timeout_s=1.0)
    assert unreachable.post([OPEN]) is False
    assert unreachable.errors == 1
