"""The multi-host tests compare a disturbed run's final loss with an undisturbed one's, so the
ordinary DDP script they run must end with the same loss however often it was resumed, even
from the checkpoint of its very last step (a retry after the last step's save has no step left
to recompute the loss from)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port

pytest.importorskip("torch")

SCRIPT = Path(__file__).parent / "scripts" / "plain_ddp.py"


def _run(ckpt: Path, loss: Path, steps: int) -> str:
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    r = subprocess.run([sys.executable, str(SCRIPT), "--steps", str(steps), "--ckpt-every", "5",
                        "--step-time", "0", "--ckpt-dir", str(ckpt), "--loss-log", str(loss)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_a_run_resumed_after_its_last_checkpoint_ends_with_the_same_loss(tmp_path: Path) -> None:
    whole = tmp_path / "whole.txt"
    _run(tmp_path / "a", whole, steps=10)
    # the same run in two parts: 5 steps, then a resume that finishes the other 5
    part = tmp_path / "part.txt"
    _run(tmp_path / "b", part, steps=5)
    out = _run(tmp_path / "b", part, steps=10)
    assert "resumed from step-5.pt at step 5" in out
    assert part.read_text() == whole.read_text()
    # a retry that finds the last step's checkpoint: nothing left to run, the same loss
    out = _run(tmp_path / "b", part, steps=10)
    assert "resumed from step-10.pt at step 10" in out and "step 10 loss" not in out
    assert part.read_text() == whole.read_text()
    assert 0.0 < float(whole.read_text()) < 1.0
