"""`trainguard run` verdicts on real PyTorch jobs (CPU, gloo) that do not import trainguard.

A job whose rank aborts in teardown after the work is done has succeeded; a crash without
evidence is retried on the same nodes; a full checkpoint filesystem stops the chain and never
excludes a healthy host; a signal stops the supervisor promptly.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

pytest.importorskip("torch")

SCRIPTS = Path(__file__).parent / "scripts"
DDP = SCRIPTS / "ddp_teardown.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]
NODES = ("--nodes", "node1,node2", "--spares", "node3", "--nproc-per-node", "1")


def tg_run(tmp_path: Path, mode: str, *opts: str, ckpt: Path | None = None,
           steps: int = 12) -> subprocess.CompletedProcess[str]:
    ckpt = ckpt or tmp_path / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    cmd = [*TG, "run", "--run-dir", str(tmp_path / "run"), "--db", str(tmp_path / "tg.db"),
           "--backoff", "0.2", "-q", *NODES, *opts, "--", sys.executable, str(DDP), str(steps)]
    env = {**os.environ, "DDP_MODE": mode, "DDP_CKPT": str(ckpt)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env,
                          cwd=tmp_path)


def summary(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "run" / "summary.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("repeat", range(3))
@pytest.mark.parametrize("mode", ["abort_after_result", "abort_in_teardown"])
def test_an_abort_in_teardown_after_the_work_is_done_succeeds(
        tmp_path: Path, mode: str, repeat: int) -> None:
    r = tg_run(tmp_path, mode)
    assert r.returncode == 0, r.stderr
    s = summary(tmp_path)
    assert s["status"] == "succeeded" and len(s["attempts"]) == 1, s["message"]
    assert s["exclusions"] == []
    assert s["message"].startswith("completed; teardown crash of rank 1 on node2 (SIGABRT)")
    (attempt,) = s["attempts"]
    assert attempt["exit_codes"] == {"0": 0, "1": -signal.SIGABRT}
    assert attempt["failure"] is None and attempt["decision"] is None
    assert attempt["teardown_crashes"][0]["why_done"] == "every other rank exited 0"
    assert "teardown crash of rank 1 on node2" in r.stderr


def test_a_sigkill_mid_training_is_retried_on_the_same_nodes(tmp_path: Path) -> None:
    r = tg_run(tmp_path, "kill_mid", steps=16)
    assert r.returncode == 0, r.stderr
    s = summary(tmp_path)
    first, last = s["attempts"]
    assert first["exit_codes"]["1"] == -signal.SIGKILL and first["teardown_crashes"] == []
    assert first["failure"]["culprit_rank"] == 1 and first["failure_category"] == "unknown"
    assert first["decision"] == "retry" and first["excluded_nodes"] == []
    assert last["nodes"] == ["node1", "node2"] and last["status"] == "succeeded"
    assert last["resumed_from_step"] is None  # no SDK; the script resumed by itself:
    # (Once, in a loaded full suite, both of attempt 1's rank logs were empty though its ranks
    # exited 0: the run's own lines and the agents' logs say more if it happens again.)
    agents = "".join(p.read_text() for p in sorted((tmp_path / "run/attempts").glob("*/agents/*")))
    assert "rank 0 resumed at step" in \
        (tmp_path / "run/attempts/1/node1/rank0.log").read_text(), r.stderr + agents
    assert s["exclusions"] == []


def test_enospc_on_the_checkpoint_stops_the_chain_and_excludes_no_host(tmp_path: Path) -> None:
    r = tg_run(tmp_path, "enospc_raise")
    assert r.returncode == 1
    assert "storage is full or read-only" in r.stderr.splitlines()[-1]
    assert "Traceback" not in r.stderr.splitlines()[-1]
    s = summary(tmp_path)
    (attempt,) = s["attempts"]  # retrying cannot free the disk
    assert attempt["failure_category"] == "storage_io"
    assert attempt["failure"]["storage_exhausted"] is True
    assert attempt["failure"]["culprit_rank"] == 0
    assert attempt["decision"] == "stop" and s["exclusions"] == []


@contextlib.contextmanager
def tiny_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs",
                              str(where)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_really_full_checkpoint_filesystem_excludes_no_host(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "full", "8k") as ckpt:
        r = tg_run(tmp_path, "", ckpt=ckpt)
    assert r.returncode == 1
    last_line = r.stderr.splitlines()[-1]
    assert "storage" in last_line and "no node excluded" in last_line, r.stderr
    s = summary(tmp_path)
    assert s["exclusions"] == [] and s["status"] == "failed"
    # a torch.save that cannot write is a checkpoint failure caused by the storage
    assert all(a["failure_category"] in ("checkpoint", "storage_io") for a in s["attempts"]), \
        ([(a["failure_category"], (a["failure"] or {}).get("summary"),
           {str(p.relative_to(tmp_path)): p.stat().st_size
            for p in (tmp_path / "run" / "attempts" / str(a["index"])).glob("node*/rank*.log")})
          for a in s["attempts"]],  # what each attempt's evidence was, what output arrived,
         r.stderr[-4000:],  # and what the controller and the agents said
         {p.name: p.read_text()[-2000:]
          for p in (tmp_path / "run" / "attempts").glob("*/agents/*.log")})
    assert all(a["nodes"] == ["node1", "node2"] for a in s["attempts"])
    assert [a["decision"] for a in s["attempts"]][-1] == "stop"


def test_sigterm_stops_the_ranks_and_the_supervisor_promptly(tmp_path: Path) -> None:
    flood = SCRIPTS / "plain_job.py"
    cmd = [*TG, "run", "--run-dir", str(tmp_path / "run"), "--no-db", "-q", "--nodes",
           "node1,node2", "--", sys.executable, str(flood), "10000000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env={**os.environ, "PLAIN_SLEEP": "0"})
    pids: list[int] = []
    try:
        state = tmp_path / "run" / "state.json"
        deadline = time.monotonic() + 30
        while not pids:
            assert time.monotonic() < deadline and proc.poll() is None, "run did not start"
            time.sleep(0.05)
            with contextlib.suppress(OSError, ValueError):
                pids = [r["pid"] for r in json.loads(state.read_text()).get("ranks", [])]
        time.sleep(1.0)  # the ranks are printing as fast as they can
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 5.0
        assert proc.returncode == 130
        assert summary(tmp_path)["status"] == "cancelled"
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
