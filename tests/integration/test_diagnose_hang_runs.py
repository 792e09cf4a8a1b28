"""Issue #18: `trainguard diagnose hang RUN` on real supervised runs of a script without the
SDK (plain DDP, gloo, 2 ranks on 2 virtual nodes): a hang (SIGSTOP) in attempt 0 that the
relaunch survives is what the command reports by default and with ``--attempt 0``; the attempt
that did not hang, and a run that never hung, say "no hang"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

PLAIN = Path(__file__).resolve().parent / "scripts" / "plain_ddp.py"


def _cli(*args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    """Run the CLI in its own session; on a timeout its whole process group is killed."""
    proc = subprocess.Popen([sys.executable, "-m", "trainguard.cli.main", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "TRAINGUARD_DB": ""})
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _run(tmp: Path, *opts: str, command: list[str]) -> Path:
    run_dir = tmp / "run"
    r = _cli("run", "--no-db", "--no-agents", "--run-dir", str(run_dir), "--nodes", "n1,n2",
             "-q", *opts, "--", *command)
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def hung_then_retried(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch", reason="the plain DDP script needs torch")
    tmp = tmp_path_factory.mktemp("hung")
    # Without the SDK the supervisor knows no steps: the fault fires 8 s after launch, most
    # likely after the first step's output (hang timeout), else before it (startup timeout).
    return _run(tmp, "--hang-timeout", "3", "--startup-timeout", "60", "--max-retries", "2",
                "--inject", "hang:rank=1,after=8",
                command=[sys.executable, str(PLAIN), "--steps", "60", "--ckpt-every", "5",
                         "--step-time", "0.2", "--ckpt-dir", str(tmp / "ckpt")])


def _diagnose(run_dir: Path, *args: str) -> tuple[int, dict[str, Any]]:
    r = _cli("diagnose", "hang", str(run_dir), "--json", *args, timeout=60)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def test_the_default_is_the_attempt_that_hung(hung_then_retried: Path) -> None:
    attempts = sorted(p.name for p in (hung_then_retried / "attempts").iterdir())
    assert attempts == ["0", "1"]
    # a script without the SDK writes no events or state files
    assert not list((hung_then_retried / "attempts" / "0").glob("*/*.events.jsonl"))
    for args in ((), ("--attempt", "0")):
        code, doc = _diagnose(hung_then_retried, *args)
        assert code == 1 and doc["hang"] is True and doc["attempt"] == 0, doc  # a finding
        assert doc["kind"] != "outside_collectives"
        root = doc["culprits"][0]
        assert (root["rank"], root["node"], root["process"]) == (1, "n2", "stopped")


def test_the_attempt_that_did_not_hang_says_no_hang(hung_then_retried: Path) -> None:
    code, doc = _diagnose(hung_then_retried, "--attempt", "1")
    assert code == 0 and doc["hang"] is False and "no hang" in doc["summary"]


def test_a_run_that_never_hung_says_no_hang(tmp_path: Path) -> None:
    script = "import os, time\nfor i in range(3):\n    print('step', i, flush=True)\n" \
             "    time.sleep(0.05)\n"
    run_dir = _run(tmp_path, command=[sys.executable, "-c", script])
    code, doc = _diagnose(run_dir)
    assert code == 0 and doc["hang"] is False and doc["attempt"] is None
    r = _cli("diagnose", "hang", str(run_dir), timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("no hang")
    assert "outside_collectives" not in r.stdout
