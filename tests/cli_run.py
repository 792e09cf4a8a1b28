"""Running `trainguard` as an operator does, for CLI tests: the real CLI in a subprocess, and the
check that a user mistake gives one error line and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def tg(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess (``python -m trainguard.cli.main``), store from --db only."""
    env = {k: v for k, v in os.environ.items() if k != "TRAINGUARD_DB"}
    env["COLUMNS"] = "400"
    return subprocess.run([sys.executable, "-m", "trainguard.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
                          env=env)


def one_error_line(stderr: str, output: str = "") -> str:
    """The single ``error: ...`` line of ``stderr`` (asserting there is exactly one, and no
    traceback anywhere)."""
    assert "Traceback" not in stderr + output
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]
