"""A URL that is not a Prometheus server: every answer that is not the Prometheus API's JSON is
one short NotPrometheus line quoting a terminal-safe excerpt, never the whole body; real
Prometheus errors keep their message; an unreachable server stays PrometheusUnreachable."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainguard.errors import TelemetryError
from trainguard.telemetry import TelemetryBuilder
from trainguard.telemetry.promanswer import EXCERPT_CHARS, classify, excerpt
from trainguard.telemetry.prometheus import (
    NotPrometheus,
    PrometheusClient,
    PrometheusUnreachable,
    metric_kinds,
    read_prometheus,
)

LONG_HTML = (b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>\n"
             b"<h1>Not Found</h1>\n<p>The requested URL was not found on this server.</p>\n"
             + b"<p>padding</p>\n" * 500 + b"</body></html>")


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes


class Server:
    """A real HTTP server on 127.0.0.1 that answers every GET with `answer`."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.paths.append(self.path)
                a = owner.answer
                self.send_response(a.status)
                self.send_header("Content-Type", a.content_type)
                self.send_header("Content-Length", str(len(a.body)))
                self.end_headers()
                self.wfile.write(a.body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.01}, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[Server]:
    with Server(Answer(404, "text/html", LONG_HTML)) as s:
        yield s


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(url: str, retries: int = 0) -> PrometheusClient:
    return PrometheusClient(url, retries=retries, timeout_s=5, sleep=lambda _s: None)


FOREIGN = [
    pytest.param(Answer(404, "text/html", LONG_HTML), "an HTML page ('404 Not Found')",
                 id="404-html"),
    pytest.param(Answer(200, "text/html; charset=utf-8",
                        b"<html><body><div id=root>Grafana</div>" + b"x" * 5000
                        + b"</body></html>"), "an HTML page ('Grafana x", id="200-spa"),
    pytest.param(Answer(404, "text/plain", b"404 page not found\n"), "'404 page not found'",
                 id="404-text"),
    pytest.param(Answer(404, "application/json", b'{"message":"Not found"}'),
                 "JSON that is not a Prometheus API answer", id="other-json"),
    pytest.param(Answer(200, "application/json", b""), "an empty body", id="empty"),
    pytest.param(Answer(200, "text/plain", b"\x1b]0;owned\x07\x1b[31mred\x1b[0m " + b"y" * 300),
                 "'red yyy", id="escapes"),
]


@pytest.mark.parametrize(("answer", "what"), FOREIGN)
def test_an_answer_that_is_not_prometheus_is_one_short_line(
        server: Server, answer: Answer, what: str) -> None:
    server.answer = answer
    with pytest.raises(NotPrometheus) as info:
        _client(server.url).series_names()
    message = str(info.value)
    assert message.startswith(f"{server.url} does not look like a Prometheus server: "
                              f"/api/v1/label/__name__/values answered HTTP {answer.status} "
                              f"with {what}")
    assert "\n" not in message and "\x1b" not in message and "\x07" not in message
    # The body is quoted as an excerpt, however long it is.
    assert len(message) < 200 + len(server.url) + EXCERPT_CHARS
    assert "padding" not in message and "yyyyyyyyyy" * 10 not in message


def test_not_prometheus_is_not_retried(server: Server) -> None:
    with pytest.raises(NotPrometheus):
        _client(server.url, retries=3).series_names()
    assert len(server.paths) == 1


def test_a_proxy_error_page_is_retried_and_quoted_short(server: Server) -> None:
    server.answer = Answer(502, "text/html", LONG_HTML.replace(b"404 Not Found", b"502 Bad"))
    with pytest.raises(TelemetryError) as info:
        _client(server.url, retries=2).series_names()
    assert len(server.paths) == 3
    assert str(info.value).endswith("after 3 attempts: an HTML page ('502 Bad')")


@pytest.mark.parametrize("status", [401, 403])
def test_an_auth_refusal_says_so(server: Server, status: int) -> None:
    server.answer = Answer(status, "text/plain", b"Unauthorized\n")
    with pytest.raises(TelemetryError, match=f"HTTP {status}: not authorised") as info:
        _client(server.url).series_names()
    assert not isinstance(info.value, NotPrometheus)


def test_a_real_prometheus_error_keeps_its_message(server: Server) -> None:
    server.answer = Answer(400, "application/json",
                           b'{"status":"error","errorType":"bad_data","error":"parse error"}')
    with pytest.raises(TelemetryError, match=r"rejected .*\(HTTP 400\): bad_data: parse error"
                       ) as info:
        _client(server.url).query_range("x{", 0, 60, 30)
    assert not isinstance(info.value, NotPrometheus)


def test_metadata_falls_back_but_the_next_request_names_the_wrong_url(server: Server) -> None:
    # A Prometheus older than 2.15 has no /api/v1/metadata: no types, not an error...
    assert metric_kinds(_client(server.url)) == {}
    # ...but the names every Prometheus serves make a wrong URL one clear error.
    with pytest.raises(NotPrometheus, match="does not look like a Prometheus server"):
        read_prometheus(_client(server.url), TelemetryBuilder(), start=0, end=60, step_s=30)


def test_unreachable_stays_unreachable_through_metric_kinds() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(PrometheusUnreachable, match=f"^cannot reach Prometheus at {url}"):
        metric_kinds(_client(url, retries=1))


@pytest.mark.parametrize(("body", "what"), [
    (b"  <HTML><HEAD><TITLE>\n  Login \n</TITLE>", "an HTML page ('Login')"),
    (b"<html><body><p>a</p>\n\n<p>b</p></body></html>", "an HTML page ('a b')"),
    (b"<html></html>", "an HTML page"),
    (b"\x00\x01binary", "'??binary'"),
    (b"z" * 1000, "'" + "z" * (EXCERPT_CHARS - 1) + "…'"),
])
def test_excerpt(body: bytes, what: str) -> None:
    assert excerpt(body) == what


def test_classify_envelopes() -> None:
    ok = classify(200, b'{"status":"success","data":{"x":1}}')
    assert ok.is_prometheus and ok.envelope == {"status": "success", "data": {"x": 1}}
    bad = classify(422, b'{"status":"error","errorType":"execution","error":"too many"}')
    assert bad.is_prometheus and bad.error == "execution: too many"
    assert not classify(200, b'[1, 2]').is_prometheus
    assert not classify(200, b'{"status":"ok"}').is_prometheus
