"""The watch HTTP server: binding rules, auth, routing and every malformed request -> 4xx."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from trainguard.errors import ConfigError
from trainguard.watch.http import (
    HttpError,
    HttpServer,
    Request,
    Response,
    ServerConfig,
    is_loopback,
)


def _echo(req: Request) -> Response:
    return Response.json({"got": req.json()})


def _boom(req: Request) -> Response:
    raise RuntimeError("handler bug")


def _teapot(req: Request) -> Response:
    raise HttpError(418, "short and stout")


ROUTES = {("GET", "/ping"): lambda r: Response.text("pong"), ("POST", "/echo"): _echo,
          ("POST", "/boom"): _boom, ("GET", "/teapot"): _teapot}


def _raw(port: int, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes; return status, headers, body (the server closes after 4xx/1.0)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _req(port: int, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    hdrs = dict(headers or {})
    if body is not None:
        hdrs.setdefault("Content-Length", str(len(body)))
    text = f"{method} {path} HTTP/1.1\r\nHost: x\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    return _raw(port, text.encode() + (body or b""))


@pytest.fixture
def server() -> Iterator[HttpServer]:
    srv = HttpServer(ServerConfig(max_body_bytes=1000, read_timeout_s=1.0), ROUTES)
    srv.start()
    yield srv
    srv.stop()


def test_serves_and_reports_real_port(server: HttpServer) -> None:
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}"
    status, headers, body = _req(server.port, "GET", "/ping")
    assert (status, body) == (200, b"pong")
    assert headers["content-type"].startswith("text/plain")


def test_post_json_round_trip(server: HttpServer) -> None:
    status, _, body = _req(server.port, "POST", "/echo", b'{"a": [1, 2]}',
                           {"Content-Type": "application/json"})
    assert status == 200
    assert json.loads(body) == {"got": {"a": [1, 2]}}


@pytest.mark.parametrize(("method", "path", "body", "headers", "status"), [
    ("GET", "/nope", None, {}, 404),
    ("POST", "/ping", b"{}", {}, 405),
    ("DELETE", "/echo", None, {}, 405),
    ("POST", "/echo", b"{not json", {}, 400),
    ("POST", "/echo", b"\xff\xfe", {}, 400),
    ("POST", "/echo", b"[" * 100_000, {"Content-Length": "100000"}, 413),
    ("POST", "/echo", b"{}", {"Content-Type": "text/plain"}, 415),
    ("POST", "/echo", None, {}, 411),
    ("POST", "/echo", b"{}", {"Content-Length": "two"}, 400),
    ("POST", "/echo", b"{}", {"Content-Length": "-2"}, 400),
    ("POST", "/echo", b"{}", {"Content-Length": "50"}, 400),  # shorter than announced
    ("POST", "/echo", b"2\r\n{}\r\n0\r\n\r\n", {"Transfer-Encoding": "chunked"}, 411),
    ("GET", "/teapot", None, {}, 418),
])
def test_bad_requests_get_4xx_and_server_keeps_serving(
        server: HttpServer, method: str, path: str, body: bytes | None,
        headers: dict[str, str], status: int) -> None:
    got, hdrs, text = _req(server.port, method, path, body, headers)
    assert got == status
    assert "error" in json.loads(text)
    if status == 405:
        assert hdrs["allow"]
    assert _req(server.port, "GET", "/ping")[0] == 200


def test_deeply_nested_json_is_400_not_a_crash(server: HttpServer) -> None:
    srv = HttpServer(ServerConfig(max_body_bytes=1 << 20), ROUTES)
    with srv:
        status, _, _ = _req(srv.port, "POST", "/echo", b"[" * 500_000)
    assert status == 400


def test_handler_exception_is_500_json_and_logged(server: HttpServer,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    status, _, body = _req(server.port, "POST", "/boom", b"{}")
    assert status == 500
    assert json.loads(body) == {"error": "internal error"}
    assert "handler bug" in caplog.text
    assert _req(server.port, "GET", "/ping")[0] == 200


def test_garbage_request_line_is_400(server: HttpServer) -> None:
    status, _, body = _raw(server.port, b"\x00\x01 garbage\r\n\r\n")
    assert status == 400
    assert "error" in json.loads(body)
    assert _req(server.port, "GET", "/ping")[0] == 200


def test_head_has_no_body(server: HttpServer) -> None:
    srv = HttpServer(ServerConfig(), {("HEAD", "/x"): lambda r: Response.text("abc")})
    with srv:
        status, headers, body = _req(srv.port, "HEAD", "/x")
    assert (status, headers["content-length"], body) == (200, "3", b"")


@pytest.mark.parametrize(("auth", "status"), [
    (None, 401), ("Bearer wrong", 401), ("Basic s3cret", 401), ("Bearer s3cret", 200),
    ("bearer s3cret", 200),
])
def test_token_checked_on_every_request(auth: str | None, status: int) -> None:
    srv = HttpServer(ServerConfig(token="s3cret"), ROUTES)
    with srv:
        got, headers, _ = _req(srv.port, "GET", "/ping", headers={"Authorization": auth}
                               if auth else {})
        # Unknown paths too: nothing about the routes is revealed without the token.
        unknown = _req(srv.port, "GET", "/nope", headers={"Authorization": auth}
                       if auth else {})[0]
    assert got == status
    assert unknown == (404 if status == 200 else 401)
    if status == 401:
        assert headers["www-authenticate"].startswith("Bearer")


def test_non_loopback_bind_requires_token() -> None:
    with pytest.raises(ConfigError, match=r"watch\.http\.token is required"):
        ServerConfig(host="0.0.0.0")
    ServerConfig(host="0.0.0.0", token="t")  # accepted with a token


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"port": 70000}, "watch.http.port"),
    ({"token": ""}, "watch.http.token"),
    ({"token": "a b"}, "watch.http.token"),
    ({"max_body_bytes": 0}, "watch.http.max_body_bytes"),
    ({"read_timeout_s": 0}, "watch.http.read_timeout_s"),
    ({"host": ""}, "watch.http.host"),
])
def test_config_validation(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ServerConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.53", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("10.0.0.1", False), ("gpu-node-1", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_bad_routes_rejected() -> None:
    with pytest.raises(ConfigError, match="unsupported method"):
        HttpServer(ServerConfig(), {("FETCH", "/x"): _echo})
    with pytest.raises(ConfigError, match="must start with"):
        HttpServer(ServerConfig(), {("GET", "x"): _echo})


def test_stop_joins_and_frees_the_port() -> None:
    srv = HttpServer(ServerConfig(), ROUTES)
    srv.start()
    port = srv.port
    srv.stop()
    srv.stop()  # idempotent
    with pytest.raises(RuntimeError, match="not started"):
        _ = srv.port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
