"""The pure parts of benchmarks/bench_fast_recovery.py: the interval read from snapshots.json and
the table's verdicts. No processes are started (the benchmark itself needs root namespaces)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from script_module import load_script

bf = load_script("benchmarks/bench_fast_recovery.py", "bench_fast_recovery")
br = load_script("benchmarks/bench_recovery.py", "bench_recovery")

CFG = bf.Config(steps=350, kill_step=250, ckpt_every=100, n_embd=128, n_layer=2, batch_size=8,
                node_timeout=6.0, host_wait=45.0)


def _run(step_s: float, *, lost: int = 4, k: int | None = 8, total: float = 1.2) -> Any:
    split = br.Split(0.06, 0.1, None, 0.8, 0.05, 0.16, total, 1)
    restore = {"steps_lost": lost, "source": "local", "per_rank": {"1": {"source": "buddy"}}}
    return bf.TgRun(split, restore, 2.5, step_s, 5.9, 2.4, 0, 2, k)


def _by_name(table: list[Any]) -> dict[str, Any]:
    return {r.measurement: r for r in table}


def _torchrun(first: float | None) -> Any:
    return bf.TorchrunResult("rank", None, first, (350, "2.5"), 1, "")


def test_the_overhead_compares_median_step_times_of_alternated_runs() -> None:
    frees = [_run(0.104), _run(0.2), _run(0.101)]   # one noisy run does not decide
    offs = [_run(0.100), _run(0.1), _run(0.099)]
    table = _by_name(bf.rows(CFG, frees, offs, _run(0.1), _run(0.1), _torchrun(5.0),
                             _torchrun(None)))
    over = table["step-time overhead, snapshots auto vs off"]
    assert over.measured.startswith("+4.0%") and "median of 3" in over.measured
    assert over.ok is False
    frees = [_run(0.101), _run(0.2), _run(0.101)]
    table = _by_name(bf.rows(CFG, frees, offs, _run(0.1), _run(0.1), _torchrun(5.0),
                             _torchrun(None)))
    assert table["step-time overhead, snapshots auto vs off"].ok is True


def test_work_lost_is_judged_against_the_runs_own_interval() -> None:
    free = [_run(0.1)]
    table = _by_name(bf.rows(CFG, free, free, _run(0.1, lost=4, k=8), _run(0.1, lost=9, k=8),
                             _torchrun(5.0), _torchrun(None)))
    assert table["work lost, rank fault (steps)"].ok is True
    assert table["work lost, host fault (steps)"].ok is False
    table = _by_name(bf.rows(CFG, free, free, _run(0.1, k=None), _run(0.1, k=None),
                             _torchrun(5.0), _torchrun(None)))
    assert table["work lost, rank fault (steps)"].ok is None   # unknown, not a pass
    assert table["rank SIGKILLed: fault -> first step"].ok is True   # 1.2 / 5.0 = 0.24


def test_the_interval_is_the_gap_between_the_two_newest_snapshots(tmp_path: Path) -> None:
    copies = [{"step": s, "rank": r} for s in (8, 16, 24) for r in (0, 1)]
    (tmp_path / "snapshots.json").write_text(json.dumps({"manifest": {"copies": copies}}))
    assert bf._interval(tmp_path) == 8
    (tmp_path / "snapshots.json").write_text("{not json")
    assert bf._interval(tmp_path) is None
    assert bf._interval(tmp_path / "missing") is None
