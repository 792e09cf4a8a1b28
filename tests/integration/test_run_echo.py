"""What `trainguard run` echoes of a failure: the culprit's evidence, not its peers' tracebacks.

A plain DDP script (no SDK, gloo) on three virtual nodes; rank 1 is killed at step 20, and the
healthy peers raise "Connection reset/closed by peer" in their next collective. The terminal
shows one line per such rank; the per-rank logs keep every line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("torch")

SCRIPT = Path(__file__).parent / "scripts" / "plain_ddp.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]


def run(tmp_path: Path, *opts: str) -> tuple[int, str, str]:
    """The job, with rank 1 killed (`trainguard inject kill`) once training is under way."""
    cmd = [*TG, "run", "--run-dir", str(tmp_path / "run"), "--no-db", "--backoff", "0",
           "--nodes", "n1,n2,n3", "--max-retries", "1", *opts, "--", sys.executable,
           str(SCRIPT), "--steps", "300", "--ckpt-every", "50", "--step-time", "0.02",
           "--ckpt-dir", str(tmp_path / "ckpt")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        out = []
        for line in proc.stdout:
            out.append(line)
            if line.startswith("[n1 r0] step 20 "):
                subprocess.run([*TG, "inject", "kill", "--run-dir", str(tmp_path / "run"),
                                "--rank", "1"], check=True, timeout=60, capture_output=True)
                break
        rest, err = proc.communicate(timeout=240)
        return proc.returncode, "".join(out) + rest, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_peer_tracebacks_are_folded_on_the_terminal_and_kept_in_the_logs(tmp_path: Path) -> None:
    where, out, err, raised = run_until_a_peer_raises(tmp_path)
    assert "Traceback" not in out, out
    folded = [line for line in out.splitlines()
              if "traceback after rank 1 failed not shown" in line]
    # Every peer that raised before it was stopped (usually both: rank 0 and rank 2, in their
    # next collective) is one line, naming its log.
    assert {line.split("]")[0] for line in folded} == raised, out
    for line in folded:
        log = Path(where / line.rsplit("full text in ", 1)[1].rstrip(")"))
        assert "Traceback (most recent call last)" in log.read_text()
    # the supervisor knows the kill was the one `trainguard inject` asked for
    assert "attempt 0 failed: rank 1 on n2: injected kill of rank 1 (trainguard inject)" in err
    # (a peer may abort in teardown: the final line then carries that note before "excluded")
    assert "job succeeded after 2 attempts" in err and "excluded: none" in err


def test_all_output_echoes_every_line(tmp_path: Path) -> None:
    _, out, _, raised = run_until_a_peer_raises(tmp_path, "--all-output")
    assert out.count("Traceback (most recent call last)") >= len(raised)
    assert "not shown" not in out


def run_until_a_peer_raises(tmp_path: Path, *opts: str,
                            tries: int = 3) -> tuple[Path, str, str, set[str]]:
    """The scenario, run again in a fresh directory while no peer raised: where it ran, its
    stdout and stderr, the peers that raised. Every run must succeed.

    Whether a peer raises before it is stopped is a race: on a loaded machine the supervisor may
    stop both first (CI stop 54 saw it once). A run where none raised proves nothing about the
    echo, so it is repeated; after ``tries`` such runs the test fails.
    """
    for attempt in range(tries):
        where = tmp_path / f"try{attempt}"
        where.mkdir()
        code, out, err = run(where, *opts)
        assert code == 0, err[-3000:]
        raised = raised_peers(where)
        if raised:
            return where, out, err, raised
    raise AssertionError(f"no peer raised ({tries} runs): the test proves nothing")


def raised_peers(tmp_path: Path) -> set[str]:
    """The echo prefixes (``[n1 r0``) of the peers whose attempt-0 log holds a traceback."""
    found = set()
    for node, rank in (("n1", 0), ("n3", 2)):
        log = tmp_path / "run" / "attempts" / "0" / node / f"rank{rank}.log"
        if "Traceback (most recent call last)" in log.read_text(errors="replace"):
            found.add(f"[{node} r{rank}")
    return found
