"""`trainguard check` on a namespaced 8-host cluster (issue #19): how long a full check takes,
whether a healthy cluster stays unflagged, whether a throttled link is named, and when the
ETTR model says stop-time checks pay for themselves.

    python benchmarks/bench_check.py [--hosts 8] [--runs 5] [--throttled 2]

Needs root and iproute2 (namespaces, veth, tc tbf). Target: a full check of 8 hosts <= 60 s.
For comparison (quoted, not measured here): DLRover's pre-training node check takes about
20 s for a healthy round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainguard.analytics.model import stop_check_break_even  # noqa: E402
from trainguard.devcluster import HostCluster, missing_requirements  # noqa: E402

TARGET_S = 60.0


def run_check(cluster: HostCluster, hosts: list[str]) -> tuple[float, dict[str, object]]:
    argv = [sys.executable, "-m", "trainguard.cli.main", "check", "--nodes", ",".join(hosts),
            "--json", "--agent-exec", f"{cluster.enter_script} {{node}}",
            "--controller-addr", cluster.bridge_addr, "--time-limit", "10"]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT)
    wall = time.monotonic() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(f"trainguard check failed ({r.returncode}): {r.stderr[-2000:]}")
    report: dict[str, object] = json.loads(r.stdout)
    return wall, report


def named(report: dict[str, object]) -> set[str]:
    out: set[str] = set()
    for f in report["findings"]:  # type: ignore[attr-defined]
        if f["level"] in ("slow", "fail"):
            out |= set(f["subject"].split("<->"))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_CHECK_RUNS", "5")))
    ap.add_argument("--throttled", type=int, default=2, help="trials with one throttled host")
    args = ap.parse_args(argv)
    why = "not root" if os.geteuid() != 0 else "; ".join(missing_requirements())
    if why:
        print(f"bench_check skipped: {why}")
        return 0
    hosts = [f"host{i}" for i in range(1, args.hosts + 1)]
    with tempfile.TemporaryDirectory(prefix="tg-bench-check-") as tmp, \
            HostCluster(hosts, Path(tmp) / "cluster") as cluster:
        walls, false_flags, speeds = [], 0, []
        for i in range(args.runs):
            wall, report = run_check(cluster, hosts)
            walls.append(wall)
            false_flags += len(named(report))
            speeds += [ln["mbps"] for ln in report["links"] if ln["mbps"]]  # type: ignore[attr-defined]
            print(f"healthy run {i + 1}/{args.runs}: {wall:.1f} s, flagged "
                  f"{sorted(named(report)) or 'none'}", flush=True)
            for f in report["findings"]:  # type: ignore[attr-defined]
                if f["level"] in ("slow", "fail"):
                    print(f"  {f['subject']}: {f['reason'][:300]}", flush=True)
        tenth = statistics.median(speeds) * 8 / 10
        right = 0
        for i in range(args.throttled):
            victim = hosts[(3 + 2 * i) % len(hosts)]
            cluster.throttle(victim, tenth)
            try:
                wall, report = run_check(cluster, hosts)
            finally:
                cluster.unthrottle(victim)
            ok = named(report) == {victim}
            right += ok
            print(f"throttled {victim} to {tenth:.0f} Mbit/s: named "
                  f"{sorted(named(report))} in {wall:.1f} s", flush=True)
    median = statistics.median(walls)
    print()
    print(f"| {'measure':44} | {'value':>14} | {'target':>10} | {'ratio':>6} |")
    print(f"| {'-' * 44} | {'-' * 14}:| {'-' * 10}:| {'-' * 6}:|")
    print(f"| {'full check of ' + str(args.hosts) + ' hosts, median wall':44} | "
          f"{median:>12.1f} s | {TARGET_S:>8.0f} s | {median / TARGET_S:>6.2f} |")
    print(f"| {'healthy runs with a host flagged':44} | {false_flags:>8} of {args.runs:<3} | "
          f"{0:>10} | {'':>6} |")
    print(f"| {'throttled host named (and only it)':44} | {right:>8} of {args.throttled:<3} | "
          f"{args.throttled:>10} | {'':>6} |")
    # When does a stop-time check of this length pay (ETTR model)?
    for detect_s, interval_s in ((600.0, 1800.0), (120.0, 600.0)):
        p = stop_check_break_even(check_s=median, restart_s=60.0, interval_s=interval_s,
                                  write_s=20.0, detect_s=detect_s)
        print(f"stop-time check of {median:.0f} s pays when >= {p:.1%} of ambiguous failures "
              f"are caused by a host it finds (hang timeout {detect_s:.0f} s, checkpoint every "
              f"{interval_s:.0f} s, restart 60 s, save 20 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
