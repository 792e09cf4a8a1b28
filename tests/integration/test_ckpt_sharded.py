"""Sharded checkpoints with real torch.distributed (two gloo ranks on CPU): each rank writes its
shard into one checkpoint with one manifest; a corrupt shard makes every rank fall back to the
same older step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

SCRIPT = Path(__file__).parent / "scripts" / "sharded_ckpt.py"
WORLD = 2


def _run(*args: str) -> list[dict[str, Any]]:
    port = free_port()
    procs = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(SCRIPT), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return sorted(results, key=lambda r: r["rank"])


def test_sharded_save_one_manifest_and_agreed_fallback(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    saved = _run("save", str(root), "10", "20")
    assert [r["saved"] for r in saved] == [[10, 20], [10, 20]]
    step20 = root / "step-00000020"
    names = sorted(p.name for p in step20.iterdir())
    assert names == ["manifest.json",
                     "rank00000-data-000.bin", "rank00000-data-001.bin",
                     "rank00000-state.pkl", "rank00000-tensors.json",
                     "rank00001-data-000.bin", "rank00001-data-001.bin",
                     "rank00001-state.pkl", "rank00001-tensors.json"]
    manifest = json.loads((step20 / "manifest.json").read_text())
    assert manifest["meta"]["world_size"] == WORLD
    assert sorted(manifest["files"]) == names[1:]
    assert not [p for p in root.iterdir() if p.name.startswith(".")]

    loaded = _run("load", str(root))
    assert [(r["step"], r["equal"], r["skipped"]) for r in loaded] == [(20, True, [])] * WORLD

    # Rank 1's newest shard is damaged: both ranks must resume from step 10, not only rank 1.
    bad = step20 / "rank00001-data-001.bin"
    data = bytearray(bad.read_bytes())
    data[123] ^= 1
    bad.write_bytes(bytes(data))
    loaded = _run("load", str(root))
    for result in loaded:
        assert result["step"] == 10 and result["equal"]
        [[step, reason]] = result["skipped"]
        assert step == 20 and "rank 1: crc32 mismatch for rank00001-data-001.bin" in reason
