"""A real Prometheus for tests, filled by backfilling OpenMetrics files.

``start_prometheus(workdir, files)`` turns each OpenMetrics file into TSDB blocks with
``promtool tsdb create-blocks-from openmetrics``, starts ``prometheus`` on a free 127.0.0.1 port
with its own data directory holding those blocks, and waits until ``/-/ready`` answers. Use one
file per aligned 2-hour window: promtool re-reads the whole input once per 2-h block, so one
large file costs time quadratic in its span. OpenMetrics timestamps are in seconds and the
file must end with ``# EOF``.

The ``prometheus_factory`` fixture wraps it and stops every server it started (by PID) at
teardown. Import it into a test module under any name (the fixture is registered by its
``name=``)::

    from prometheus_server import prometheus_factory_fixture  # noqa: F401

Without the binaries (Debian: ``scripts/sysdeps.sh`` installs the ``prometheus`` package) the
fixture skips, except under ``CI=true`` where it fails, as the PostgreSQL fixture does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest
from ports import free_port

READY_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 10.0


class PrometheusUnavailable(RuntimeError):
    """The prometheus / promtool binaries are not installed."""


class PrometheusStartError(RuntimeError):
    """Backfilling or starting the server failed (the message carries the tool's output)."""


@dataclass
class PromServer:
    """A running throwaway Prometheus: ``url`` is ``http://127.0.0.1:<port>``."""

    url: str
    pid: int
    data_dir: Path
    log_path: Path
    _proc: subprocess.Popen[bytes] = field(repr=False)

    def stop(self) -> None:
        """Terminate (SIGTERM), wait up to 10 s, then SIGKILL. Safe to call twice."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=_STOP_TIMEOUT_S)

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def api(self, path: str, params: dict[str, str] | None = None) -> object:
        """GET ``/api/v1/<path>`` and return the decoded ``data`` (raises on a non-success)."""
        query = "?" + urllib.parse.urlencode(params) if params else ""
        req = urllib.request.Request(f"{self.url}/api/v1/{path}{query}",
                                     headers={"Accept-Encoding": "identity"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise PrometheusStartError(f"{path}: {body}")
        return body["data"]


def binaries() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``; raises PrometheusUnavailable when missing."""
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if prom is None or tool is None:
        missing = " and ".join(n for n, p in (("prometheus", prom), ("promtool", tool)) if not p)
        raise PrometheusUnavailable(f"{missing} not found: run scripts/sysdeps.sh")
    return prom, tool


def backfill(openmetrics_files: Sequence[Path], data_dir: Path, promtool: str) -> None:
    """Write TSDB blocks for each file into ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    for f in openmetrics_files:
        proc = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(f), str(data_dir)],
            capture_output=True, text=True, timeout=300, check=False)
        if proc.returncode != 0:
            raise PrometheusStartError(
                f"promtool backfill of {f} failed ({proc.returncode}):\n"
                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Poll ``/-/ready`` until 200, the process exits, or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with (contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError),
              urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp):
            if resp.status == 200:
                return True
        time.sleep(0.05)  # bounded readiness poll, not a wait for data
    return False


def start_prometheus(workdir: Path, openmetrics_files: Sequence[Path], *,
                     extra_args: Sequence[str] = (),
                     ready_timeout_s: float = READY_TIMEOUT_S) -> PromServer:
    """Backfill ``openmetrics_files`` into ``workdir/data`` and serve them on 127.0.0.1.

    ``extra_args`` are added to the command line (e.g. ``--web.enable-remote-write-receiver``);
    do not repeat a flag set here: Prometheus exits with code 2 on a duplicate.
    """
    prom, promtool = binaries()
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    backfill(openmetrics_files, data_dir, promtool)
    config = workdir / "prometheus.yml"
    # JSON is valid YAML; no targets: everything comes from the backfilled blocks.
    config.write_text(json.dumps({"global": {"scrape_interval": "15s"}, "scrape_configs": []}))
    log_path = workdir / "prometheus.log"
    last_error = ""
    for _attempt in range(3):  # a port taken between probing and binding is worth a retry
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [prom, f"--config.file={config}", f"--storage.tsdb.path={data_dir}",
               f"--web.listen-address=127.0.0.1:{port}",
               "--storage.tsdb.retention.time=100y", *extra_args]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        server = PromServer(url, proc.pid, data_dir, log_path, proc)
        if _wait_ready(url, proc, ready_timeout_s):
            return server
        server.stop()
        last_error = log_path.read_text(errors="replace")[-3000:]
        if "address already in use" not in last_error:
            break
    raise PrometheusStartError(f"prometheus did not become ready:\n{last_error}")


@contextlib.contextmanager
def scraping_prometheus(workdir: Path, targets: Sequence[str], *, scrape_interval: str = "1s",
                        ready_timeout_s: float = 10.0) -> Iterator[PromServer]:
    """A real Prometheus scraping ``targets`` (HOST:PORT) live, stopped by PID on exit.

    ``honor_labels``: the simulator's node-exporter series carry their own job/instance
    ("node01:9100"), as its files do; without it Prometheus renames them exported_job/_instance.
    Skips (fails under CI=true) when Prometheus is not installed.
    """
    try:
        prom, _ = binaries()
    except PrometheusUnavailable as exc:
        _unavailable(str(exc))
    config = {"global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
              "scrape_configs": [{"job_name": "dcgm", "honor_labels": True,
                                  "static_configs": [{"targets": list(targets)}]}]}
    (workdir / "prometheus.yml").write_text(json.dumps(config))
    url = f"http://127.0.0.1:{free_port()}"
    log_path = workdir / "prometheus.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [prom, f"--config.file={workdir / 'prometheus.yml'}",
             f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address={url[7:]}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = PromServer(url, proc.pid, workdir / "data", log_path, proc)
    try:
        if not _wait_ready(url, proc, ready_timeout_s):
            pytest.fail(f"prometheus did not start:\n{log_path.read_text()[-2000:]}",
                        pytrace=False)
        yield server
    finally:
        server.stop()


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} (CI=true: integration servers are required)", pytrace=False)
    pytest.skip(reason)


StartPrometheus = Callable[[Sequence[Path]], PromServer]


@pytest.fixture(name="prometheus_factory")
def prometheus_factory_fixture(tmp_path_factory: pytest.TempPathFactory
                               ) -> Iterator[StartPrometheus]:
    """A function ``start(openmetrics_files) -> PromServer``; every server is stopped after
    the test."""
    try:
        binaries()
    except PrometheusUnavailable as exc:
        _unavailable(str(exc))
    servers: list[PromServer] = []

    def start(openmetrics_files: Sequence[Path]) -> PromServer:
        try:
            server = start_prometheus(tmp_path_factory.mktemp("prometheus"), openmetrics_files)
        except PrometheusStartError as exc:
            pytest.fail(str(exc), pytrace=False)
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for s in servers:
            s.stop()
