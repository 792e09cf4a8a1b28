"""One supervisor per run dir (a second `trainguard run` is refused, naming the first's pid, and
deletes nothing), and node names that cannot be a node are one clear error line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "plain_job.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]


def lines(stderr: str) -> list[str]:
    """stderr's lines, less the warning runpy prints for ``-m trainguard.cli.main``."""
    return [ln for ln in stderr.strip().splitlines() if not ln.startswith("<frozen runpy>")]


def tg_run(run_dir: Path, *opts: str, steps: int = 1) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TG, "run", "--run-dir", str(run_dir), "--no-db", "-q", *opts, "--",
                           sys.executable, str(SCRIPT), str(steps)],
                          capture_output=True, text=True, timeout=120, cwd=run_dir.parent)


@pytest.fixture
def running(tmp_path: Path) -> subprocess.Popen[str]:
    """A first `trainguard run` in tmp_path/run, with its ranks up; killed by pid at the end."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([*TG, "run", "--run-dir", str(run_dir), "--no-db", "-q", "--nodes",
                             "a", "--", sys.executable, str(SCRIPT), "100000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        state = run_dir / "state.json"
        while not (state.exists() and json.loads(state.read_text()).get("ranks")):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


@pytest.mark.parametrize("extra", [[], ["--overwrite"]])
def test_a_second_supervisor_on_a_run_dir_is_refused(
        tmp_path: Path, running: subprocess.Popen[str], extra: list[str]) -> None:
    run_dir = tmp_path / "run"
    before = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    second = tg_run(run_dir, "--nodes", "a", *extra)
    assert second.returncode == 2, second.stderr
    assert f"pid {running.pid}" in second.stderr and "in use" in second.stderr
    assert "Traceback" not in second.stderr and len(lines(second.stderr)) == 1
    assert running.poll() is None
    # Nothing deleted (the first run keeps writing: new files may appear, temp files come and go)
    lost = [p for p in before if not p.endswith(".tmp") and not (run_dir / p).exists()]
    assert not lost


def test_the_lock_dies_with_its_supervisor(tmp_path: Path,
                                           running: subprocess.Popen[str]) -> None:
    running.kill()
    running.wait()
    again = tg_run(tmp_path / "run", "--nodes", "a", "--overwrite")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize(("opts", "message"), [
    (["--nodes", "n" * 300], "at most 64 characters"),
    (["--nodes", "a", "--spares", "b" * 65], "--spares"),
    (["--nodes", "a/../../etc"], "use letters, digits"),
    (["--nodes", "-x"], "starting with a letter or digit"),
])
def test_a_node_name_that_cannot_be_a_node_is_one_clear_error(
        tmp_path: Path, opts: list[str], message: str) -> None:
    r = tg_run(tmp_path / "run", *opts)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(lines(r.stderr)) == 1
    assert not (tmp_path / "run").exists()
