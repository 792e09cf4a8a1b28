"""A small threaded HTTP server for ``trainguard watch``'s endpoints (standard library only).

Routes are a table of ``(method, path) -> handler``; a handler takes a :class:`Request` and
returns a :class:`Response`, or raises :class:`HttpError` for a 4xx. The server owns everything a
handler should not have to think about:

1. authentication: a bearer token is required on every request when bound to a non-loopback
   address (the server refuses to start without one) and optional on loopback;
2. routing: unknown path -> 404, known path with another method -> 405 (with ``Allow``);
3. the body: ``Content-Length`` required for bodies (chunked -> 411), not a number -> 400,
   over ``max_body_bytes`` -> 413 (not read), shorter than announced -> 400;
4. failures: a handler's unexpected exception is logged and answered with a short JSON 500; the
   server keeps serving.

    >>> server = HttpServer(ServerConfig(port=0), {("GET", "/ping"): lambda r: Response.text("ok")})
    >>> server.start(); port = server.port; server.stop()
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from trainguard.errors import ConfigError, TrainguardError

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1 << 20
_DRAIN_TIMEOUT_S = 0.5
_DRAIN_MAX_BYTES = 16 << 20
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class HttpError(TrainguardError):
    """A request a handler refuses: answered with ``status`` and a JSON ``{"error": message}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request, body already read (and bounded)."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    """Header names lower-cased."""
    body: bytes = b""

    def json(self) -> Any:
        """The body as JSON; :class:`HttpError` 400/415 when it is not."""
        ctype = self.headers.get("content-type", "application/json").split(";")[0].strip()
        if ctype.lower() not in ("application/json", ""):
            raise HttpError(415, f"content-type must be application/json, got {ctype!r}")
        try:
            return json.loads(self.body.decode("utf-8"), parse_constant=_no_constant)
        except UnicodeDecodeError as exc:
            raise HttpError(400, f"body is not UTF-8: {exc.reason}") from exc
        except json.JSONDecodeError as exc:
            raise HttpError(400, f"body is not JSON: {exc.msg} at line {exc.lineno}") from exc
        except ValueError as exc:  # int(): a number past Python's 4300-digit limit
            raise HttpError(400, "body is not acceptable JSON: a number has too many "
                                 "digits") from exc
        except RecursionError as exc:
            raise HttpError(400, "body is not JSON: nested too deeply") from exc


def _no_constant(name: str) -> Any:
    """``NaN``/``Infinity`` are Python's extension, not JSON."""
    raise HttpError(400, f"body is not JSON: {name} is not a JSON value")


@dataclass(frozen=True, slots=True)
class Response:
    """What a handler answers."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Response:
        return cls(status, json.dumps(value, sort_keys=True).encode() + b"\n")

    @classmethod
    def text(cls, value: str, status: int = 200,
             content_type: str = "text/plain; charset=utf-8") -> Response:
        return cls(status, value.encode(), content_type)


Handler = Callable[[Request], Response]
Routes = Mapping[tuple[str, str], Handler]


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals; any other name counts as exposed."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where and how the endpoints listen."""

    host: str = "127.0.0.1"
    """Bind address; anything but loopback requires ``token``."""
    port: int = 0
    """TCP port; 0 picks a free one (read it back from :attr:`HttpServer.port`)."""
    token: str | None = None
    """Bearer token every request must carry (``Authorization: Bearer <token>``)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Larger request bodies are refused with 413 without being read."""
    read_timeout_s: float = 10.0
    """A client that stops sending for this long is disconnected."""

    def __post_init__(self) -> None:
        if not self.host:
            raise ConfigError("watch.http.host must not be empty")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"watch.http.port must be 0..65535, got {self.port}")
        if self.token is not None and (not self.token or any(c.isspace() for c in self.token)):
            raise ConfigError("watch.http.token must be non-empty without whitespace")
        if not is_loopback(self.host) and self.token is None:
            raise ConfigError(f"watch.http.token is required to bind to {self.host} "
                              "(only loopback addresses may run without one)")
        if self.max_body_bytes <= 0:
            raise ConfigError("watch.http.max_body_bytes must be > 0")
        if self.read_timeout_s <= 0:
            raise ConfigError("watch.http.read_timeout_s must be > 0")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: HttpServer, address: tuple[str, int]) -> None:
        self.owner = owner
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-response is routine, not a traceback on stderr.
        log.debug("watch http: connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "trainguard"
    sys_version = ""

    def setup(self) -> None:
        self.request.settimeout(self.server.owner.config.read_timeout_s)
        super().setup()

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("watch http: %s " + fmt, self.address_string(), *args)

    def _send(self, resp: Response) -> None:
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        for name, value in resp.headers:
            self.send_header(name, value)
        if resp.status >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(resp.body)

    def _dispatch(self) -> None:
        try:
            resp = self._respond()
        except HttpError as exc:
            resp = _error(exc.status, exc.message)
        except Exception:
            log.exception("watch http: %s %s failed", self.command, self.path)
            resp = _error(500, "internal error")
        try:
            self._send(resp)
            if resp.status == 413:
                self._drain()
        except OSError:
            log.debug("watch http: client went away before the response", exc_info=True)

    def _drain(self) -> None:
        """Lingering close after refusing an unread body: closing with unread input makes the
        kernel send a reset, and the client may lose the 413 it is owed. Read (and drop) a
        bounded amount for a short while, then close."""
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_WR)
        self.connection.settimeout(_DRAIN_TIMEOUT_S)
        left = _DRAIN_MAX_BYTES
        try:
            while left > 0 and (chunk := self.connection.recv(min(left, 65536))):
                left -= len(chunk)
        except OSError:
            pass

    def _respond(self) -> Response:
        owner = self.server.owner
        cfg = owner.config
        if cfg.token is not None:
            got = self.headers.get("Authorization", "")
            scheme, _, value = got.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    value.strip().encode(), cfg.token.encode()):
                return Response(401, b'{"error": "missing or wrong bearer token"}\n',
                                headers=(("WWW-Authenticate", 'Bearer realm="trainguard"'),))
        parts = urlsplit(self.path)
        methods = owner.methods_for(parts.path)
        if not methods:
            raise HttpError(404, f"no such endpoint: {parts.path}")
        handler = owner.routes.get((self.command, parts.path))
        if handler is None:
            return Response(405, b'{"error": "method not allowed"}\n',
                            headers=(("Allow", ", ".join(sorted(methods))),))
        body = self._read_body(cfg.max_body_bytes)
        headers = {k.lower(): v for k, v in self.headers.items()}
        return handler(Request(self.command, parts.path, parts.query, headers, body))

    def _read_body(self, limit: int) -> bytes:
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(411, "chunked bodies are not accepted; send Content-Length")
        raw = self.headers.get("Content-Length")
        if raw is None:
            if self.command in ("POST", "PUT", "PATCH"):
                raise HttpError(411, "Content-Length is required")
            return b""
        if not raw.strip().isdigit():
            raise HttpError(400, f"bad Content-Length: {raw[:40]!r}")
        length = int(raw)
        if length > limit:
            raise HttpError(413, f"body of {length} bytes exceeds the limit of {limit}")
        try:
            body = self.rfile.read(length)
        except (TimeoutError, OSError) as exc:
            raise HttpError(400, "body shorter than Content-Length") from exc
        if len(body) != length:
            raise HttpError(400, "body shorter than Content-Length")
        return body

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        # The stdlib's own refusals (bad request line, headers too long) as JSON, not HTML.
        self.close_connection = True
        # A request line too broken to parse leaves the stdlib at HTTP/0.9 (no status line).
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        text = message or HTTPStatus(code).phrase
        body = json.dumps({"error": text}).encode() + b"\n"
        try:
            self.send_response(code, text)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(body)
        except OSError:
            log.debug("watch http: client went away before the error", exc_info=True)


for _method in _METHODS:
    setattr(_Handler, f"do_{_method}", _Handler._dispatch)


def _error(status: int, message: str) -> Response:
    return Response(status, json.dumps({"error": message}).encode() + b"\n")


@dataclass
class HttpServer:
    """The endpoints on one socket, served from a background thread.

        >>> routes = {("GET", "/metrics"): exporter.handle}  # doctest: +SKIP
        >>> server = HttpServer(ServerConfig(), routes)  # doctest: +SKIP
        >>> server.start()  # binds; raises OSError if the port is taken  # doctest: +SKIP
        >>> server.url  # 'http://127.0.0.1:41234'  # doctest: +SKIP
        >>> server.stop()  # stops serving and joins the thread  # doctest: +SKIP
    """

    config: ServerConfig
    routes: Routes
    _server: _Server | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _paths: dict[str, set[str]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for method, path in self.routes:
            if method not in _METHODS:
                raise ConfigError(f"route {path}: unsupported method {method!r}")
            if not path.startswith("/"):
                raise ConfigError(f"route path must start with '/', got {path!r}")
            self._paths.setdefault(path, set()).add(method)

    def methods_for(self, path: str) -> set[str]:
        return self._paths.get(path, set())

    def start(self) -> None:
        if self._server is not None:
            return
        self._server = _Server(self, (self.config.host, self.config.port))
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=f"trainguard-http-{self.port}", daemon=True)
        self._thread.start()
        log.info("watch http: listening on %s", self.url)

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self.config.host
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"http://{host}:{self.port}"

    def __enter__(self) -> HttpServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "Handler",
    "HttpError",
    "HttpServer",
    "Request",
    "Response",
    "Routes",
    "ServerConfig",
    "is_loopback",
]
