"""Check that a speed change left the detector's results unchanged, to the bit.

Runs the detector over one telemetry directory three ways (in memory with `detect()`, streamed
from a Parquet copy with `iter_parquet_chunks`, and loaded from that file as `trainguard detect
FILE.parquet` does) and records everything it hands the episode tracker (node scores, signals,
quiet flags and leads per block, hard events) plus the final alerts. Run it once per source
tree, then compare:

    trainguard simulate --out /tmp/sim --nodes 16 --gpus-per-node 8 --days 2 --seed 11
    git worktree add /tmp/base HEAD                       # the tree before the change
    python benchmarks/detect_same.py record /tmp/base/src /tmp/sim /tmp/before.pkl
    python benchmarks/detect_same.py record src /tmp/sim /tmp/after.pkl
    python benchmarks/detect_same.py compare /tmp/before.pkl /tmp/after.pkl   # exit 1 if not

Each `record` runs in its own process so that the tree it names is the one imported.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def record(src: str, sim_dir: str, out: str) -> None:
    sys.path.insert(0, str(Path(src).resolve()))
    from trainguard.detect import Detector, DetectorConfig, detect
    from trainguard.detect.episodes import EpisodeTracker
    from trainguard.telemetry import (
        MetricKind,
        detect_monotonic,
        iter_parquet_chunks,
        load_sources,
        write_parquet,
    )

    rec: list[Any] = []
    soft, hard = EpisodeTracker.soft_block, EpisodeTracker.hard_event

    def soft_spy(self: Any, t: float, score: Any, signals: Any, *rest: Any) -> Any:
        rec.append(("soft", t, np.array(score), dict(signals),
                    *(None if r is None else np.array(r) for r in rest)))
        return soft(self, t, score, signals, *rest)

    def hard_spy(self: Any, *args: Any) -> Any:
        rec.append(("hard", *args))
        return hard(self, *args)

    EpisodeTracker.soft_block = soft_spy  # type: ignore[method-assign]
    EpisodeTracker.hard_event = hard_spy  # type: ignore[method-assign]
    runs: dict[str, Any] = {}
    tel, _ = load_sources([sim_dir])
    alerts = [repr(a) for a in detect(tel)]
    runs["memory"] = (list(rec), alerts)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.parquet"
        write_parquet(tel, path)
        rec.clear()
        det = Detector(DetectorConfig(), frozenset(
            m.name for m in tel.metrics if m.kind is MetricKind.COUNTER or detect_monotonic(m)))
        for chunk in iter_parquet_chunks([path], 7200, step_s=tel.step_s):
            det.feed(chunk)
        alerts = [repr(a) for a in det.finish()]
        runs["parquet stream"] = (list(rec), alerts)
        rec.clear()
        alerts = [repr(a) for a in detect(load_sources([path])[0])]
        runs["parquet file"] = (list(rec), alerts)
    with open(out, "wb") as f:
        pickle.dump(runs, f)
    print(f"{out}: " + ", ".join(f"{k}: {len(v[0])} tracker calls, {len(v[1])} alerts"
                                 for k, v in runs.items()))


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, np.ndarray):
        return (isinstance(y, np.ndarray) and x.shape == y.shape
                and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
    if isinstance(x, list | tuple):
        return type(x) is type(y) and len(x) == len(y) and all(map(_same, x, y))
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return bool(x == y)


def compare(before: str, after: str) -> int:
    with open(before, "rb") as f:
        a = pickle.load(f)
    with open(after, "rb") as f:
        b = pickle.load(f)
    bad = 0
    for key in a:
        calls = [i for i, (x, y) in enumerate(zip(a[key][0], b[key][0], strict=False))
                 if not _same(x, y)]
        differs = len(a[key][0]) != len(b[key][0]) or calls or a[key][1] != b[key][1]
        bad += bool(differs)
        print(f"{key}: {'DIFFERENT' if differs else 'identical'} ({len(a[key][0])} tracker "
              f"calls, {len(a[key][1])} alerts" + (f"; first difference at call {calls[0]})"
                                                  if calls else ")"))
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "record":
        # A fresh interpreter per tree: nothing of another tree is imported already.
        sys.exit(subprocess.call([sys.executable, "-c",
                                  "import sys; sys.argv = sys.argv[1:]; "
                                  "from benchmarks.detect_same import record; record(*sys.argv)",
                                  *sys.argv[2:]], cwd=Path(__file__).resolve().parents[1]))
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    print(__doc__)
    sys.exit(2)
