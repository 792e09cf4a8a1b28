"""Run every benchmark (`make bench`). For a quick look: BENCH_SIZES_GB=0.1
BENCH_OM_LINES=200000 BENCH_DETECT_SCALE=0.1 BENCH_CKPT_SIZE=512MiB (the full detector run takes
tens of minutes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import (
    bench_agents,
    bench_check,
    bench_checkpoint,
    bench_classify,
    bench_controller_scale,
    bench_detect,
    bench_fast_recovery,
    bench_fleet,
    bench_openmetrics,
    bench_recovery,
    bench_snapshot,
    bench_startup,
    bench_tracing,
)

if __name__ == "__main__":
    print("== CLI start-up: --help and a small classify (issue #28) ==")
    bench_startup.main([])
    print("\n== log classification (issue #2) ==")
    bench_classify.main()
    # bench_openmetrics pins this process to one core; give the later benchmarks all of them.
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    print("\n== OpenMetrics parsing ==")
    bench_openmetrics.main()
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    print("\n== node failure detection ==")
    bench_detect.main()
    print("\n== failure-to-resume (issue #4) ==")
    bench_recovery.main([])
    print("\n== checkpoint save/load (issue #7) ==")
    bench_checkpoint.main(["--size", os.environ.get("BENCH_CKPT_SIZE", "2GiB")])
    print("\n== tracing overhead and hang to culprit (issue #8) ==")
    bench_tracing.main([])
    print("\n== agents on a namespaced multi-host cluster (issue #17) ==")
    from trainguard.devcluster import missing_requirements

    why = "not root" if os.geteuid() != 0 else "; ".join(missing_requirements())
    if why:
        print(f"namespaced cluster skipped ({why}): controller load only")
        bench_agents.main(["--only", "controller"])
    else:
        bench_agents.main([])
    print("\n== memory snapshots vs the disk checkpoint engine (issue 27) ==")
    bench_snapshot.main(["--size", os.environ.get("BENCH_SNAPSHOT_SIZE", "1GiB")])
    print("\n== recovery in seconds vs torchrun on the namespaced cluster (issue 27) ==")
    bench_fast_recovery.main([])
    print("\n== the controller with 1,024 simulated agents, steady and flooded (issue #26) ==")
    bench_controller_scale.main([])
    print("\n== fleet history: import + analysis, planning model vs replay (issue 29) ==")
    bench_fleet.main([])
    print("\n== host checks on a namespaced 8-host cluster (issue #19) ==")
    bench_check.main([])
