"""examples/train_gpt.py as two real ranks (gloo on CPU): kill, resume, bitwise-equal losses.

Four launches of two ranks, a few seconds each (mostly `import torch`):

(a) an uninterrupted baseline, with TRAINGUARD_EVENTS set and a ``corrupt_checkpoint`` fault
    that damages its last checkpoint after saving it (the losses are unaffected);
(b) rank 1 raises at step 17 (``exception`` fault), the test kills rank 0; the relaunch resumes
    from step 10 and reproduces the baseline's losses bitwise;
(c) a relaunch over (a)'s checkpoints skips the damaged step-30 checkpoint, resumes from step 20
    and ends with the baseline's final loss.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

pytestmark = pytest.mark.integration

try:
    import torch  # noqa: F401 - only checks that the example can run
except ImportError:  # pragma: no cover - depends on the environment
    pytest.skip("torch is not installed (pip install 'trainguard[torch]')", allow_module_level=True)

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"
STEPS, CKPT_EVERY, WORLD = 30, 10, 2
LAUNCH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Launch:
    codes: tuple[int | None, ...]
    """Exit code per rank (negative: killed by that signal)."""
    logs: tuple[str, ...]
    """stdout + stderr per rank."""
    seconds: float


def _launch(
    workdir: Path,
    *,
    loss_log: Path,
    extra_env: dict[str, str] | None = None,
    events: Path | None = None,
    kill_after_rank_exit: int | None = None,
) -> Launch:
    """Run both ranks to completion (or, with `kill_after_rank_exit`, until that rank exits,
    then SIGKILL the others). Every process started here is killed by PID on the way out."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
    base.update(
        WORLD_SIZE=str(WORLD),
        LOCAL_WORLD_SIZE=str(WORLD),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TRAINGUARD_LAUNCH_TIME=repr(time.time()),
    )
    base.update(extra_env or {})
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--steps", str(STEPS),
        "--ckpt-every", str(CKPT_EVERY),
        "--ckpt-dir", str(workdir / "ckpt"),
        "--loss-log", str(loss_log),
    ]  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    outs: list[Path] = []
    started = time.monotonic()
    try:
        for rank in range(WORLD):
            env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
            if events is not None:
                env["TRAINGUARD_EVENTS"] = str(events.with_name(f"{events.stem}-rank{rank}.jsonl"))
            out = workdir / f"{loss_log.stem}-rank{rank}.out"
            outs.append(out)
            with out.open("wb") as f:
                procs.append(
                    subprocess.Popen(cmd, cwd=workdir, env=env, stdout=f, stderr=subprocess.STDOUT)
                )
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
    return Launch(
        codes=tuple(proc.returncode for proc in procs),
        logs=tuple(out.read_text(errors="replace") for out in outs),
        seconds=time.monotonic() - started,
    )


def _losses(path: Path) -> dict[int, float]:
    out: dict[int, float] = {}
    for line in path.read_text().splitlines():
        step, loss = line.split()
        out[int(step)] = float(loss)
    return out


def _final_loss(launch: Launch) -> float:
    lines = [line for line in launch.logs[0].splitlines() if line.startswith("final loss ")]
    assert lines, launch.logs[0][-2000:]
    return float(lines[-1].removeprefix("final loss "))


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ok(launch: Launch) -> None:
    assert launch.codes == (0,) * WORLD, "\n\n".join(log[-3000:] for log in launch.logs)


@dataclass(frozen=True)
class Baseline:
    workdir: Path
    losses: dict[int, float]
    final: float
    launch: Launch


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Baseline]:
    workdir = tmp_path_factory.mktemp("baseline")
    launch = _launch(
        workdir,
        loss_log=workdir / "loss.txt",
        events=workdir / "events.jsonl",
        extra_env={"TRAINGUARD_INJECT": f"corrupt_checkpoint:step={STEPS},rank=0"},
    )
    _ok(launch)
    print(f"\n(a) uninterrupted 2-rank run: {launch.seconds:.1f} s")
    yield Baseline(workdir, _losses(workdir / "loss.txt"), _final_loss(launch), launch)


def test_uninterrupted_run_reports_events(baseline: Baseline) -> None:
    assert sorted(baseline.losses) == list(range(STEPS))
    assert baseline.final == baseline.losses[STEPS - 1]
    assert baseline.losses[STEPS - 1] < baseline.losses[0]  # it learns something
    rank0 = _records(baseline.workdir / "events-rank0.jsonl")
    rank1 = _records(baseline.workdir / "events-rank1.jsonl")
    phases = [r["name"] for r in rank0 if r["kind"] == "phase"]
    assert phases == ["imports", "dist_init", "ckpt_load", "first_step"]
    assert [r["step"] for r in rank0 if r["kind"] == "resume"] == [None]
    steps = [r for r in rank0 if r["kind"] == "step"]
    assert steps[0]["step"] == 0 and steps[-1]["step"] == STEPS - 1
    assert steps[-1]["loss"] == baseline.losses[STEPS - 1]  # every rank reports the global loss
    assert [r["step"] for r in rank1 if r["kind"] == "step"][-1] == STEPS - 1
    saves = [r for r in rank0 if r["kind"] == "checkpoint"]
    assert [(r["step"], r["ok"]) for r in saves] == [(10, True), (20, True), (30, True)]
    assert not any(r["kind"] == "checkpoint" for r in rank1)
    faults = [r for r in rank0 if r["kind"] == "fault"]
    assert [(r["fault"], r["step"]) for r in faults] == [("corrupt_checkpoint:rank=0,step=30", 30)]
    assert rank0[-1]["kind"] == "finish" and rank1[-1]["kind"] == "finish"
    assert all(r["rank"] == 0 for r in rank0) and all(r["rank"] == 1 for r in rank1)


def test_resume_after_rank_failure_reproduces_losses(
    baseline: Baseline, tmp_path: Path
) -> None:
    crashed = _launch(
        tmp_path,
        loss_log=tmp_path / "loss-crashed.txt",
        extra_env={"TRAINGUARD_INJECT": "exception:step=17,rank=1"},
        kill_after_rank_exit=1,
    )
    # The uncaught exception ends rank 1 with status 1, or with SIGABRT when a gloo thread is
    # still joinable as the interpreter exits ("terminate called without an active exception",
    # libstdc++): either way the rank failed on the injected exception.
    assert crashed.codes[1] in (1, -signal.SIGABRT), crashed.logs[1][-3000:]
    assert "RuntimeError: trainguard injected exception at step 17" in crashed.logs[1]
    # Hidden entries (the attempt-epoch markers of the fencing) are not checkpoints.
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()
                  if not p.name.startswith(".")) == ["step-00000010"]
    partial = _losses(tmp_path / "loss-crashed.txt")
    assert partial == {step: baseline.losses[step] for step in partial}
    assert max(partial) >= 16

    resumed = _launch(tmp_path, loss_log=tmp_path / "loss-resumed.txt")
    _ok(resumed)
    print(f"\n(b) crash {crashed.seconds:.1f} s + resume {resumed.seconds:.1f} s")
    assert "resumed from step 10" in resumed.logs[0]
    after = _losses(tmp_path / "loss-resumed.txt")
    assert sorted(after) == list(range(CKPT_EVERY, STEPS))
    assert after == {step: baseline.losses[step] for step in after}  # bitwise equal floats
    assert _final_loss(resumed) == baseline.final


def test_resume_skips_corrupted_newest_checkpoint(baseline: Baseline) -> None:
    workdir = baseline.workdir
    relaunch = _launch(
        workdir, loss_log=workdir / "loss-relaunch.txt", events=workdir / "relaunch.jsonl"
    )
    _ok(relaunch)
    print(f"\n(c) resume over a corrupted checkpoint: {relaunch.seconds:.1f} s")
    assert "resumed from step 20" in relaunch.logs[0]
    for rank in range(WORLD):
        events = _records(workdir / f"relaunch-rank{rank}.jsonl")
        resume = [r for r in events if r["kind"] == "resume"]
        assert len(resume) == 1 and resume[0]["step"] == 20
        assert [(s["step"], s["reason"]) for s in resume[0]["skipped"]] == [
            (30, "crc32 mismatch for rank00000-data-000.bin: the file is corrupt")
        ]
    assert _losses(workdir / "loss-relaunch.txt") == {
        step: baseline.losses[step] for step in range(20, STEPS)
    }
    assert _final_loss(relaunch) == baseline.final
    # The re-save of step 30 took its place; the damaged one is moved aside, never deleted unread.
    ckpt = workdir / "ckpt"
    names = sorted(p.name for p in ckpt.iterdir() if not p.name.startswith("."))
    assert names[:3] == ["step-00000010", "step-00000020", "step-00000030"]
    assert len(names) == 4 and names[3].startswith("unreadable-step-00000030-")
