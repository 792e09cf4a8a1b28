"""Run every benchmark (`make bench`). Set BENCH_SIZES_GB=0.1 for a quick look."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_classify

if __name__ == "__main__":
    print("== log classification (issue #2) ==")
    bench_classify.main()
