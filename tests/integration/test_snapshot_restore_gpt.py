"""examples/train_gpt.py as two real ranks (gloo on CPU), restored from memory snapshots.

(a) an uninterrupted baseline, memory tier off;
(b) with TRAINGUARD_SNAPSHOT_DIR set (K = 2), rank 1 raises at step 17 and the test kills
    rank 0; each rank's slots hold its last two snapshots;
(c) a relaunch with TRAINGUARD_RESTORE pointing each rank at its slot of the newest step both
    ranks hold (what the supervisor's plan does) resumes there, not at the disk checkpoint of
    step 10, and reproduces the baseline's losses bitwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from ports import free_port

from trainguard.snapshot.slot import read_header, slot_paths

pytestmark = pytest.mark.integration

try:
    import torch  # noqa: F401 - only checks that the example can run
except ImportError:  # pragma: no cover - depends on the environment
    pytest.skip("torch is not installed (pip install 'trainguard[torch]')", allow_module_level=True)

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"
STEPS, CKPT_EVERY, WORLD, CRASH_STEP = 24, 10, 2, 17
LAUNCH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Launch:
    codes: tuple[int | None, ...]
    logs: tuple[str, ...]


def _launch(workdir: Path, name: str, rank_env: list[dict[str, str]],
            kill_after_rank_exit: int | None = None) -> Launch:
    """Run both ranks (rank r gets ``rank_env[r]``) to completion, or until
    `kill_after_rank_exit` exits, then SIGKILL the others. Every process started here is
    killed by PID on the way out."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
    base.update(WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(free_port()))
    cmd = [sys.executable, str(SCRIPT), "--steps", str(STEPS), "--ckpt-every", str(CKPT_EVERY),
           "--ckpt-dir", str(workdir / "ckpt"), "--loss-log", str(workdir / f"{name}.loss")]
    procs: list[subprocess.Popen[bytes]] = []
    outs = [workdir / f"{name}-rank{rank}.out" for rank in range(WORLD)]
    try:
        for rank in range(WORLD):
            env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank), **rank_env[rank])
            with outs[rank].open("wb") as f:
                procs.append(subprocess.Popen(cmd, cwd=workdir, env=env, stdout=f,
                                              stderr=subprocess.STDOUT))
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        if kill_after_rank_exit is not None:
            procs[kill_after_rank_exit].wait(timeout=LAUNCH_TIMEOUT_S)
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    return Launch(tuple(p.returncode for p in procs),
                  tuple(out.read_text(errors="replace") for out in outs))


def _losses(path: Path) -> dict[int, float]:
    return {int(s): float(v) for s, v in (line.split() for line in path.read_text().splitlines())}


def _ok(launch: Launch) -> None:
    assert launch.codes == (0,) * WORLD, "\n\n".join(log[-3000:] for log in launch.logs)


def test_restore_from_memory_snapshots_reproduces_losses(tmp_path: Path) -> None:
    base_dir, run_dir = tmp_path / "baseline", tmp_path / "run"
    base_dir.mkdir()
    run_dir.mkdir()
    _ok(_launch(base_dir, "baseline", [{}, {}]))
    baseline = _losses(base_dir / "baseline.loss")
    assert sorted(baseline) == list(range(STEPS))

    host = tmp_path / "snap" / "run1" / "n1"  # both ranks on one virtual host
    tier = {"TRAINGUARD_SNAPSHOT_DIR": str(host), "TRAINGUARD_SNAPSHOT_EVERY": "2",
            "TRAINGUARD_NODE": "n1", "TRAINGUARD_ATTEMPT": "0"}
    crash = dict(tier, TRAINGUARD_INJECT=f"exception:step={CRASH_STEP},rank=1")
    crashed = _launch(run_dir, "crashed", [crash, crash], kill_after_rank_exit=1)
    assert crashed.codes[1] in (1, -signal.SIGABRT), crashed.logs[1][-3000:]
    assert f"injected exception at step {CRASH_STEP}" in crashed.logs[1]

    # The newest step every rank holds a committed slot of (the supervisor's plan).
    held = [{h.step: (p, h) for p in slot_paths(host / "own", rank)
             if (h := read_header(p)) is not None} for rank in range(WORLD)]
    common = set(held[0]) & set(held[1])
    assert common, held
    step = max(common)
    assert CKPT_EVERY < step <= CRASH_STEP and step % 2 == 0

    relaunch = []
    for rank in range(WORLD):
        path, header = held[rank][step]
        restore = {"step": header.step, "attempt": header.attempt, "digest": header.digest,
                   "path": str(path), "source": "local", "holder": "n1"}
        relaunch.append(dict(tier, TRAINGUARD_ATTEMPT="1", TRAINGUARD_RESTORE=json.dumps(restore),
                             TRAINGUARD_EVENTS=str(run_dir / f"events-rank{rank}.jsonl")))
    resumed = _launch(run_dir, "resumed", relaunch)
    _ok(resumed)
    assert f"resumed from step {step}" in resumed.logs[0]
    after = _losses(run_dir / "resumed.loss")
    assert sorted(after) == list(range(step, STEPS))
    assert after == {s: baseline[s] for s in after}  # bitwise equal floats
    for rank in range(WORLD):
        records = [json.loads(line) for line in
                   (run_dir / f"events-rank{rank}.jsonl").read_text().splitlines()]
        resumes = [r for r in records if r["kind"] == "resume"]
        assert [(r["step"], r["source"]) for r in resumes] == [(step, "memory")]
