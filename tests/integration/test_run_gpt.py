"""The issue's acceptance runs: the example GPT (real PyTorch, gloo, 3 ranks) under
`trainguard run`, with real faults. Every recovered run ends with exactly the loss of the
fault-free run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the example needs torch (pip install torch==2.13.0)")
pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_gpt.py"
NODES = ["--nodes", "node1,node2,node3", "--spares", "node4", "--nproc-per-node", "1"]
STEPS = 40


def slow_from(step: int) -> tuple[str, str]:
    """Slow every rank from ``step`` on, so a fault the supervisor fires on seeing that step
    (heartbeats come every 0.5 s) lands before the next checkpoint even on a loaded machine."""
    return ("--inject", f"slow:step={step},delay=0.4")


def run_gpt(tmp: Path, *opts: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    run_dir = tmp / "run"
    cmd = [sys.executable, "-m", "trainguard.cli.main", "run", "-q", "--run-dir", str(run_dir),
           "--db", str(tmp / "tg.db"), "--backoff", "0.2", *NODES, *opts, "--",
           sys.executable, str(EXAMPLE), "--steps", str(STEPS), "--ckpt-every", "10",
           "--ckpt-dir", str(tmp / "ckpt"), "--loss-log", str(tmp / "loss.txt")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp,
                       env={**os.environ, "TRAINGUARD_DB": ""})
    return r, json.loads((run_dir / "summary.json").read_text())


def final_loss(tmp: Path) -> str:
    last = (tmp / "loss.txt").read_text().splitlines()[-1].split()
    assert int(last[0]) == STEPS - 1
    return last[1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("fault-free")
    r, s = run_gpt(tmp)
    assert r.returncode == 0, r.stderr
    assert s["status"] == "succeeded" and len(s["attempts"]) == 1
    phases = s["attempts"][0]["startup_phases"]
    assert {"launch", "imports", "dist_init", "ckpt_load", "first_step"} <= set(phases)
    return final_loss(tmp)


def test_sigkill_of_a_rank_resumes_to_the_same_loss(tmp_path: Path, reference: str) -> None:
    # A fixed interval: the adaptive one rounds up to a power of two and can reach 8 on a
    # loaded machine, putting the newest snapshot before the kill (step 8) below the step-10
    # disk checkpoint. At 4 the snapshot at step 12 has three steps to reach its buddy.
    r, s = run_gpt(tmp_path, "--snapshot-every", "4", "--inject", "kill:rank=1,step=15",
                   *slow_from(15))
    assert r.returncode == 0, r.stderr
    first, last = s["attempts"]
    assert first["exit_codes"]["1"] == -9 and first["decision"] == "retry"
    # Every rank restores the newest memory snapshot complete on two hosts, not the step-10
    # disk checkpoint: at most a snapshot interval of work is lost.
    assert last["restore"]["source"] == "memory", last["restore"]
    assert last["resumed_from_step"] == last["restore"]["step"] > 10
    assert 0 <= last["restore"]["steps_lost"] <= 15 - 10
    assert final_loss(tmp_path) == reference


def test_xid79_excludes_node2_and_finishes_on_the_spare(tmp_path: Path, reference: str) -> None:
    r, s = run_gpt(tmp_path, "--inject", "xid:node=node2,xid=79,step=25", *slow_from(25))
    assert r.returncode == 0, r.stderr
    first, last = s["attempts"][0], s["attempts"][-1]
    assert first["failure_category"] == "gpu_hardware"
    assert first["excluded_nodes"] == ["node2"] and first["decision"] == "exclude_and_retry"
    assert last["nodes"] == ["node1", "node4", "node3"]
    # The newest of the complete memory snapshot and the step-20 disk checkpoint: from memory,
    # node2's shard comes from its buddy's memory to the spare, the others are local.
    restore, resumed = last["restore"], last["resumed_from_step"]
    assert resumed >= 20, restore
    if restore["source"] != "disk":
        assert restore["source"] == "mixed" and resumed == restore["step"] > 20, restore
        assert restore["per_rank"]["1"]["source"] == "buddy"
    assert final_loss(tmp_path) == reference
    from trainguard.store import Store

    with Store.open(str(tmp_path / "tg.db")) as store:
        (ex,) = store.exclusions()
        assert ex.node == "node2" and "Xid" in " ".join(ex.evidence)
        assert [a.resumed_from_step for a in store.attempts()] == [None, resumed]
        assert any(e.xid == 79 and e.host == "node2" for e in store.events())
        assert {c.step for c in store.checkpoints()} >= {10, 20, 30, 40}


def test_a_corrupt_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path,
                                                                reference: str) -> None:
    # The disk path alone: without memory snapshots the relaunch reads the checkpoints.
    r, s = run_gpt(tmp_path, "--snapshot-every", "off", "--inject", "corrupt_checkpoint:step=20",
                   "--inject", "kill:rank=0,step=25", *slow_from(25))
    assert r.returncode == 0, r.stderr
    last = s["attempts"][-1]
    assert last["resumed_from_step"] == 10
    (skipped,) = last["skipped_checkpoints"]
    assert skipped["step"] == 20 and "crc32 mismatch for rank00000-data-" in skipped["reason"]
    assert final_loss(tmp_path) == reference


def test_nan_loss_rolls_back_to_an_earlier_checkpoint(tmp_path: Path, reference: str) -> None:
    r, s = run_gpt(tmp_path, "--inject", "nan:step=25")
    assert r.returncode == 0, r.stderr
    first, last = s["attempts"]
    assert first["failure_category"] == "numerical_nan"
    assert first["decision"] == "rollback_and_retry"
    assert last["resumed_from_step"] == 10  # not 20: the newest checkpoint before the NaN
    assert final_loss(tmp_path) == reference


def test_cuda_error_on_one_rank_is_retried(tmp_path: Path, reference: str) -> None:
    r, s = run_gpt(tmp_path, "--inject", "cuda_error:rank=2,step=15")
    assert r.returncode == 0, r.stderr
    first = s["attempts"][0]
    assert first["failure_category"] == "cuda_software_bug"
    assert first["failure"]["culprit_rank"] == 2 and first["failure"]["culprit_nodes"] == ["node3"]
    assert "CUDA kernel fault" in first["failure"]["summary"]
    assert final_loss(tmp_path) == reference
