"""`trainguard watch` as a person runs it (a real process, real HTTP on 127.0.0.1): a `--once`
round against a wrong --prometheus exits 2 with one short line, as `detect --prometheus` does;
`--once` serves no HTTP and creates no default store; `--listen off` serves nothing, even over a
config file's listen."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app

NOT_FOUND_PAGE = (b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>\n"
                  b"<h1>Not Found</h1>\n" + b"<p>The requested URL was not found.</p>\n" * 200
                  + b"</body></html>")
EMPTY_PROMETHEUS = b'{"status":"success","data":[]}'
"""What a Prometheus that has scraped nothing yet answers to every API request used here."""


class Server:
    """A real HTTP server on 127.0.0.1 answering every GET with one (status, type, body)."""

    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def not_prometheus() -> Iterator[str]:
    server = Server(404, "text/html", NOT_FOUND_PAGE)
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def empty_prometheus() -> Iterator[str]:
    server = Server(200, "application/json", EMPTY_PROMETHEUS)
    try:
        yield server.url
    finally:
        server.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command() -> list[str]:
    script = Path(sys.executable).with_name("trainguard")  # the console script, as installed
    return [str(script)] if script.is_file() else [sys.executable, "-m", "trainguard.cli.main"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TRAINGUARD_DB"}


def trainguard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process: logging is configured as for a person (under CliRunner,
    pytest's log handlers would hide a line the service logs)."""
    return subprocess.run([*_command(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False, env=_env())


def watch_until_started(*args: str, cwd: Path) -> tuple[int, str]:
    """`trainguard watch ARGS` (no --once) until it prints its start line or exits, then
    SIGTERM: its exit status and stderr."""
    log = cwd / "watch.err"
    with open(log, "w") as err:
        proc = subprocess.Popen([*_command(), "watch", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=err, text=True, env=_env())
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and "watching " not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=30), log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _once(url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return trainguard("watch", "--prometheus", url, "--once", "--step", "30s", "--db", "none",
                      "--state-dir", str(tmp_path / "state"), *extra, cwd=tmp_path)


@pytest.mark.parametrize("case", ["404-html", "unreachable"])
def test_a_once_round_against_a_wrong_prometheus_exits_2_in_one_line(
        case: str, not_prometheus: str, tmp_path: Path) -> None:
    url = not_prometheus if case == "404-html" else f"http://127.0.0.1:{closed_port()}"
    phrase = ("does not look like a Prometheus server" if case == "404-html"
              else "cannot reach Prometheus")

    done = _once(url, tmp_path, "--listen", "off")

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: watch: {phrase}" if case == "unreachable"
                               else f"error: watch: {url} {phrase}"), lines[0]
    assert "requested URL" not in done.stderr  # a title at most, never the page
    assert len(lines[0]) < 400


def test_a_good_once_round_exits_0_and_says_what_it_scored(
        empty_prometheus: str, tmp_path: Path) -> None:
    done = _once(empty_prometheus, tmp_path, "--listen", "off")
    assert done.returncode == 0, done.stderr
    assert "error" not in done.stderr and "warning" not in done.stderr
    assert f"one round of {empty_prometheus}: scored " in done.stderr  # ISO times
    assert "(0 samples)" in done.stderr and "step 30s" in done.stderr


def test_once_serves_no_http_and_creates_no_default_store(
        empty_prometheus: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        # Hold the port the config file names: any HTTP server there fails to start.
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = tmp_path / "watch.toml"
        config.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
        once = trainguard("watch", "--prometheus", empty_prometheus, "--once", "--step", "30s",
                          "--config", str(config), "--state-dir", str(tmp_path / "state"),
                          cwd=tmp_path)
        # The control: a watch that keeps running does try to bind the port.
        served, served_err = watch_until_started(
            "--prometheus", empty_prometheus, "--step", "30s", "--config", str(config),
            "--db", "none", "--state-dir", str(tmp_path / "state"), cwd=tmp_path)

    assert once.returncode == 0, once.stderr
    assert "/metrics" not in once.stderr and str(port) not in once.stderr
    assert not (tmp_path / "trainguard.db").exists()
    assert served == 2 and f"127.0.0.1:{port}" in served_err, served_err


def test_listen_off_serves_nothing_even_over_the_config_files_listen(
        empty_prometheus: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = tmp_path / "watch.toml"
        config.write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
        common = ("--prometheus", empty_prometheus, "--step", "30s", "--db", "none",
                  "--state-dir", str(tmp_path / "state"))
        off = watch_until_started(*common, "--config", str(config), "--listen", "off",
                                  cwd=tmp_path)
        off_default = watch_until_started(*common, "--listen", "OFF", cwd=tmp_path)

    for status, stderr in (off, off_default):
        assert status == 0, stderr
        assert "watching " in stderr and "stopped; state saved" in stderr
        assert "/metrics" not in stderr and "9464" not in stderr


def test_detect_from_a_url_that_is_not_prometheus_is_one_short_line(
        not_prometheus: str) -> None:
    result = CliRunner().invoke(app, ["detect", "--prometheus", not_prometheus,
                                      "--start", "0", "--end", "3600"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {not_prometheus} does not look like a Prometheus "
                               "server: /api/v1/")
    assert "requested URL" not in result.stderr


def test_sigterm_right_after_the_start_line_stops_the_watch_cleanly(
        empty_prometheus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whoever waits for "watching ..." (a test, a service manager) may send SIGTERM at once: by
    # then the watch's own handler must be in place, or the signal kills it uncleanly (-15).
    import trainguard.cli.watch as watch_cli

    seen: list[object] = []
    real_print = watch_cli.err.print

    class Err:
        def print(self, *args: object, **kwargs: object) -> None:
            if str(args[0]).startswith("watching "):
                handler = signal.getsignal(signal.SIGTERM)
                seen.append(handler)
                assert callable(handler), f"SIGTERM is {handler} when the start line is out"
                handler(signal.SIGTERM, None)  # what the signal would do now
            real_print(*args, **kwargs)

    monkeypatch.setattr(watch_cli, "err", Err())
    result = CliRunner().invoke(app, ["watch", "--prometheus", empty_prometheus, "--step", "30s",
                                      "--db", "none", "--listen", "off", "--state-dir",
                                      str(tmp_path / "state")])
    assert result.exit_code == 0, (result.exception, result.output)
    assert len(seen) == 1 and signal.getsignal(signal.SIGTERM) is not seen[0]
