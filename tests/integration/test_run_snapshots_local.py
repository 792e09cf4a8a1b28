"""Memory snapshots end to end on the local backend: the example GPT (real PyTorch, gloo,
2 virtual nodes x 1 rank, 1 spare) under `trainguard run`; a rank SIGKILLed restores every
rank's state from memory, loses at most one snapshot interval, and ends with exactly the loss
of the fault-free run. The run's snapshot directory is gone afterwards."""

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
STEPS = 40
EVERY = 5


def run_gpt(tmp: Path, *opts: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    run_dir = tmp / "run"
    cmd = [sys.executable, "-m", "trainguard.cli.main", "run", "-q", "--no-agents", "--no-db",
           "--run-dir", str(run_dir), "--backoff", "0.2", "--nodes", "node1,node2",
           "--spares", "node3", "--nproc-per-node", "1",
           "--snapshot-root", str(tmp / "shm"), "--snapshot-every", str(EVERY), *opts, "--",
           sys.executable, str(EXAMPLE), "--steps", str(STEPS), "--ckpt-every", "20",
           "--ckpt-dir", str(tmp / "ckpt"), "--loss-log", str(tmp / "loss.txt")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp,
                       env={**os.environ, "TRAINGUARD_DB": ""})
    return r, json.loads((run_dir / "summary.json").read_text())


def final_loss(tmp: Path) -> str:
    last = (tmp / "loss.txt").read_text().splitlines()[-1].split()
    assert int(last[0]) == STEPS - 1
    return last[1]


def no_snapshots_left(tmp: Path) -> bool:
    root = tmp / "shm"
    return not root.exists() or not any(root.iterdir())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    tmp = tmp_path_factory.mktemp("fault-free")
    r, s = run_gpt(tmp)
    assert r.returncode == 0, r.stderr
    assert s["status"] == "succeeded" and len(s["attempts"]) == 1
    assert s["attempts"][0]["restore"]["source"] == "none"
    assert no_snapshots_left(tmp)
    return final_loss(tmp)


def test_a_killed_rank_restores_from_memory_to_the_same_loss(tmp_path: Path,
                                                             reference: str) -> None:
    # Slow steps from 26 on: the kill the supervisor fires on seeing step 28 lands before
    # the next snapshot (step 30) even on a loaded machine.
    r, s = run_gpt(tmp_path, "--inject", "kill:rank=1,step=28",
                   "--inject", "slow:step=26,delay=0.4")
    assert r.returncode == 0, r.stderr
    first, last = s["attempts"]
    assert first["exit_codes"]["1"] == -9 and first["decision"] == "retry"
    restore = last["restore"]
    assert restore["source"] == "memory", restore
    assert restore["step"] > 20  # newer than the disk checkpoint of step 20
    assert 0 <= restore["steps_lost"] <= EVERY
    assert {v["source"] for v in restore["per_rank"].values()} == {"local"}
    assert last["resumed_from_step"] == restore["step"]
    assert final_loss(tmp_path) == reference
    manifest = json.loads((tmp_path / "run" / "snapshots.json").read_text())
    assert manifest["manifest"]
    assert no_snapshots_left(tmp_path)


def test_a_lost_node_is_replaced_by_the_spare_with_its_shards_from_memory(
        tmp_path: Path, reference: str) -> None:
    """node2 excluded (XID 79): the spare takes its slot, rank 1's shard comes from the
    memory of another host (the buddy's replica, fetched, or the spare's own replica), never
    from node2 and never from disk."""
    r, s = run_gpt(tmp_path, "--inject", "xid:node=node2,xid=79,step=28",
                   "--inject", "slow:step=26,delay=0.4")
    assert r.returncode == 0, r.stderr
    first, last = s["attempts"][0], s["attempts"][-1]
    assert first["excluded_nodes"] == ["node2"] and last["nodes"] == ["node1", "node3"]
    restore = last["restore"]
    assert restore["source"] in ("memory", "buddy", "mixed"), restore
    assert restore["per_rank"]["1"]["holder"] != "node2"
    assert "/node3/" in restore["per_rank"]["1"]["path"]
    assert 0 <= restore["steps_lost"] <= EVERY
    assert final_loss(tmp_path) == reference
    assert json.loads((tmp_path / "run" / "snapshots.json").read_text())["fenced"] == ["node2"]
    assert no_snapshots_left(tmp_path)
