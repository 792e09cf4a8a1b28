"""Start a real Alertmanager (Debian's ``prometheus-alertmanager``) for a test, stop it by PID."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

BINARY = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
READY_TIMEOUT_S = 15.0


def require_binary() -> str:
    if BINARY is None:
        reason = ("prometheus-alertmanager is not installed "
                  "(scripts/sysdeps.sh installs Debian's prometheus-alertmanager)")
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{reason} (CI=true: integration servers are required)", pytrace=False)
        pytest.skip(reason)
    return BINARY


@contextlib.contextmanager
def alertmanager(tmp_path: Path, config: dict[str, Any]) -> Iterator[str]:
    """Run Alertmanager with `config` on a free loopback port; yields its URL."""
    binary = require_binary()
    port = free_port()
    cfg = tmp_path / "alertmanager.yml"
    cfg.write_text(json.dumps(config))  # JSON is YAML
    log_path = tmp_path / "alertmanager.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [binary, f"--config.file={cfg}", f"--storage.path={tmp_path / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"alertmanager did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.05)  # waiting for the server's own start-up
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def listed(url: str) -> list[dict[str, Any]]:
    """The alerts Alertmanager holds (``/api/v2/alerts``)."""
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as resp:
        data: list[dict[str, Any]] = json.loads(resp.read())
    return data
