"""PrometheusClient and read_prometheus against a fake Prometheus HTTP API on 127.0.0.1."""

from __future__ import annotations

import base64
import itertools
import json
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from trainguard.errors import ConfigError, TelemetryError
from trainguard.telemetry import (
    Entity,
    MetricKind,
    PrometheusClient,
    TelemetryBuilder,
    read_prometheus,
)
from trainguard.telemetry.prometheus import MAX_POINTS

SERIES = {
    "temp": [{"__name__": "temp", "Hostname": "n1", "gpu": "0"},
             {"__name__": "temp", "Hostname": "n2", "gpu": "0"}],
    "reqs_total": [{"__name__": "reqs_total", "instance": "n1:9100"}],
}


@dataclass
class FakeProm:
    requests: list[tuple[str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)
    fail: list[tuple[int, bytes]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def answer(self, path: str, q: dict[str, list[str]]) -> tuple[int, Any]:
        if path == "/api/v1/label/__name__/values":
            return 200, sorted(SERIES)
        if path == "/api/v1/metadata":
            return 200, {"reqs_total": [{"type": "counter", "help": "", "unit": ""}],
                         "temp": [{"type": "gauge", "help": "", "unit": ""}]}
        if path == "/api/v1/query_range":
            start, end = float(q["start"][0]), float(q["end"][0])
            step = float(q["step"][0].rstrip("s"))
            ts = np.arange(start, end + 1e-9, step)
            query = q["query"][0]
            # `read_prometheus` samples with last_over_time(name[step - 1ms]); functions drop
            # the metric name, as Prometheus does.
            wrapped = re.fullmatch(r"last_over_time\((\w+)\[\d+ms\]\)", query)
            name = wrapped.group(1) if wrapped else query
            result = [{"metric": {k: v for k, v in labels.items()
                                  if not wrapped or k != "__name__"},
                       "values": [[t, "NaN" if t % 300 == 0 else str(t / 10 + i)]
                                  for t in ts.tolist()]}
                      for i, labels in enumerate(SERIES.get(name, []))]
            return 200, {"resultType": "matrix", "result": result}
        return 404, None


@pytest.fixture
def prom() -> Iterator[FakeProm]:
    fake = FakeProm()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            q = parse_qs(url.query)
            with fake.lock:
                fake.requests.append((url.path, q, dict(self.headers)))
                failure = fake.fail.pop(0) if fake.fail else None
            if failure is not None:
                status, body = failure
            else:
                status, data = fake.answer(url.path, q)
                body = json.dumps({"status": "success", "data": data}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01},
                              daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def _client(url: str, sleeps: list[float] | None = None, **kw: Any) -> PrometheusClient:
    record = sleeps if sleeps is not None else []
    return PrometheusClient(url, sleep=record.append, timeout_s=5, **kw)


def test_query_range_windows_have_no_gaps_or_duplicates(prom: FakeProm) -> None:
    step = 10
    end = step * 25_000
    (temp0, temp1) = _client(prom.url).query_range("temp", 0, end, step)
    windows = [(float(q["start"][0]), float(q["end"][0])) for p, q, _ in prom.requests]
    assert len(windows) == 3
    assert windows[0][0] == 0 and windows[-1][1] == end
    for (_, e1), (s2, _) in itertools.pairwise(windows):
        assert s2 == e1 + step
    assert all((e - s) / step + 1 <= MAX_POINTS for s, e in windows)
    labels, ts, vals = temp0
    assert labels["Hostname"] == "n1"
    np.testing.assert_array_equal(ts, np.arange(0, end + 1, step))
    assert np.isnan(vals[0]) and vals[1] == 1.0
    assert temp1[2][1] == 2.0


@pytest.mark.parametrize("status", [503, 502, 429])
def test_retries_with_exponential_backoff(prom: FakeProm, status: int) -> None:
    prom.fail = [(status, b"busy"), (status, b"busy")]
    sleeps: list[float] = []
    names = _client(prom.url, sleeps, backoff_s=0.5).series_names()
    assert names == ["reqs_total", "temp"]
    assert sleeps == [0.5, 1.0]
    assert len(prom.requests) == 3


def test_retries_exhausted_names_the_status(prom: FakeProm) -> None:
    prom.fail = [(503, b'{"status":"error","error":"overloaded"}')] * 5
    sleeps: list[float] = []
    with pytest.raises(TelemetryError, match=r"HTTP 503 .* after 3 attempts: overloaded"):
        _client(prom.url, sleeps, retries=2).series_names()
    assert len(sleeps) == 2


def test_400_is_not_retried_and_shows_prometheus_message(prom: FakeProm) -> None:
    body = json.dumps({"status": "error", "errorType": "bad_data",
                       "error": "1:5: parse error: unexpected '{'"}).encode()
    prom.fail = [(400, body)]
    sleeps: list[float] = []
    with pytest.raises(TelemetryError, match=r"HTTP 400.*bad_data: 1:5: parse error"):
        _client(prom.url, sleeps).query_range("temp{", 0, 100, 10)
    assert sleeps == [] and len(prom.requests) == 1


@pytest.mark.parametrize(("kw", "expect"), [
    ({"bearer_token": "s3cret"}, "Bearer s3cret"),
    ({"basic_auth": ("u", "p:w")}, "Basic " + base64.b64encode(b"u:p:w").decode()),
    ({}, None),
])
def test_auth_and_encoding_headers(prom: FakeProm, kw: dict[str, Any], expect: str | None) -> None:
    _client(prom.url, **kw).series_names(["temp"], 0, 100)
    _, q, headers = prom.requests[0]
    assert q["match[]"] == ["temp"] and q["start"] == ["0"] and q["end"] == ["100"]
    assert headers.get("Authorization") == expect
    assert headers.get("Accept-Encoding") == "identity"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_is_one_clear_error() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    sleeps: list[float] = []
    with pytest.raises(TelemetryError, match=f"cannot reach Prometheus at {url}: .*refused"):
        _client(url, sleeps, retries=2).series_names()
    assert len(sleeps) == 2
    with pytest.raises(TelemetryError, match=f"^cannot reach Prometheus at {url}"):
        read_prometheus(_client(url, retries=1), TelemetryBuilder(), start=0, end=60,
                        step_s=30)


def test_non_json_answer(prom: FakeProm) -> None:
    prom.fail = [(200, b"<html>login</html>")]
    with pytest.raises(TelemetryError, match="does not look like a Prometheus server"):
        _client(prom.url).series_names()


def test_read_prometheus_types_alignment_and_concurrency(prom: FakeProm) -> None:
    b = TelemetryBuilder(time_range_s=None)  # small synthetic times
    calls: list[tuple[int, int]] = []
    stats = read_prometheus(_client(prom.url, max_concurrency=2), b, start=1003, end=1297,
                            step_s=30, progress=lambda d, t: calls.append((d, t)))
    assert (stats.start, stats.end) == (990, 1320)
    assert (stats.metrics, stats.series) == (2, 3)
    ranges = {(q["start"][0], q["end"][0], q["step"][0])
              for p, q, _ in prom.requests if p.endswith("query_range")}
    assert ranges == {("990", "1320", "30")}  # plain seconds: a float step works too
    assert {q["query"][0] for p, q, _ in prom.requests if p.endswith("query_range")} == {
        "last_over_time(temp[29999ms])", "last_over_time(reqs_total[29999ms])"}
    assert calls[-1] == (2, 2)
    tel = b.build()
    assert tel.step_s == 30 and tel.times[0] == 990 and tel.times[-1] == 1320
    kinds = {m.name: m.kind for m in tel.metrics}
    assert kinds == {"reqs_total": MetricKind.COUNTER, "temp": MetricKind.GAUGE}
    assert tel.metric("temp").entities == (Entity("n1", "0"), Entity("n2", "0"))  # type: ignore[union-attr]


def test_read_prometheus_selected_metrics_without_metadata(prom: FakeProm) -> None:
    prom.fail = [(404, b'{"status":"error","error":"not found"}')]  # old Prometheus
    b = TelemetryBuilder(time_range_s=None)
    read_prometheus(_client(prom.url), b, metrics=["temp"], start=0, end=90, step_s=30)
    assert [p for p, _, _ in prom.requests] == ["/api/v1/metadata", "/api/v1/query_range"]
    assert b.build().metrics[0].kind is MetricKind.UNKNOWN


@pytest.mark.parametrize("kw", [{"bearer_token": "a", "basic_auth": ("u", "p")},
                                {"retries": -1}, {"max_concurrency": 0}])
def test_bad_client_config(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.prometheus"):
        PrometheusClient("http://x:9090", **kw)
    with pytest.raises(ConfigError, match="http://"):
        PrometheusClient("x:9090")
