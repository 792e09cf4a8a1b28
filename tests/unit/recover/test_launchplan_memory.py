"""The memory tier's variables in each rank's environment (design doc, "Environment given to
each rank")."""

from __future__ import annotations

import json
from pathlib import Path

from trainguard.recover.launchplan import MemoryTier, PlanInputs, build_plan
from trainguard.recover.spec import JobSpec

SPEC = JobSpec(command=("python", "t.py"), nodes=("a", "b"), spares=("c",), nproc_per_node=1,
               run_dir=Path("/r"))


def _plan(memory: MemoryTier | None) -> dict[str, dict[str, str]]:
    inputs = PlanInputs(1, ("a", "c"), ("b",), "127.0.0.1", 1, "run1", 0.0, workdir=Path("/w"),
                        memory=memory)
    plan = build_plan(SPEC, inputs, {})
    return {"host_dirs": dict(plan.host_dirs), **{str(r.rank): dict(r.env) for r in plan.ranks}}


def test_snapshot_dir_interval_restore_and_warm_dir_per_rank() -> None:
    restore = {1: json.dumps({"step": 30, "attempt": 0, "digest": "0badcafe",
                              "path": "/shm/run1/c/fetched/rank00001.snap", "source": "buddy",
                              "holder": "a"})}
    got = _plan(MemoryTier(Path("/shm"), "7", True, restore))
    assert got["0"]["TRAINGUARD_SNAPSHOT_DIR"] == "/shm/run1/a"
    assert got["1"]["TRAINGUARD_SNAPSHOT_DIR"] == "/shm/run1/c"
    assert got["0"]["TRAINGUARD_SNAPSHOT_EVERY"] == got["1"]["TRAINGUARD_SNAPSHOT_EVERY"] == "7"
    assert "TRAINGUARD_RESTORE" not in got["0"]
    assert json.loads(got["1"]["TRAINGUARD_RESTORE"])["source"] == "buddy"
    assert got["1"]["TRAINGUARD_WARM_DIR"] == "/shm/run1/c/warm"
    assert got["host_dirs"] == {"a": "/shm/run1/a", "c": "/shm/run1/c", "b": "/shm/run1/b"}


def test_snapshots_off_keeps_the_warm_dir_only() -> None:
    got = _plan(MemoryTier(Path("/shm"), "off", True, {0: "{}"}))
    assert not any(k in got["0"] for k in ("TRAINGUARD_SNAPSHOT_DIR", "TRAINGUARD_RESTORE",
                                           "TRAINGUARD_SNAPSHOT_EVERY"))
    assert got["0"]["TRAINGUARD_WARM_DIR"] == "/shm/run1/a/warm"


def test_no_memory_tier_no_variables() -> None:
    got = _plan(None)
    assert got["host_dirs"] == {}
    assert not [k for k in got["0"] if "SNAPSHOT" in k or k in ("TRAINGUARD_RESTORE",
                                                                 "TRAINGUARD_WARM_DIR")]
    cold = _plan(MemoryTier(Path("/shm"), "auto", False))
    assert "TRAINGUARD_WARM_DIR" not in cold["0"]
    assert cold["0"]["TRAINGUARD_SNAPSHOT_EVERY"] == "auto"
