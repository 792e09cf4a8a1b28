"""Benchmark: OpenMetrics text parsing speed (target >= 1 M lines/s on one core).

Generates dcgm-exporter-like files (one line per GPU per scrape, ~190 bytes a line) in two
layouts, plain and gzip, then times `read_openmetrics` in-process pinned to one core, and the
`TelemetryBuilder.build()` that follows. Set BENCH_OM_LINES (default 2,000,000) to resize.

    python -m benchmarks.bench_openmetrics
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_METRICS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")


def _series(n_nodes: int) -> list[str]:
    out = []
    for metric in _METRICS:
        for n in range(n_nodes):
            for g in range(8):
                out.append(
                    f'{metric}{{gpu="{g}",UUID="GPU-{n:05d}-{g:04d}-8c2e-1d4f",'
                    f'pci_bus_id="00000000:{g + 16:02X}:00.0",device="nvidia{g}",'
                    f'modelName="NVIDIA H100 80GB HBM3",Hostname="node-{n:05d}",'
                    f'DCGM_FI_DRIVER_VERSION="535.104.05",hpc_job="4711"}}')
    return out


def generate(path: Path, n_lines: int, *, by_series: bool, n_nodes: int = 64) -> None:
    """`by_series=False`: scrape order (every series at each timestamp, like saved scrapes);
    True: series-major like `promtool tsdb dump-openmetrics`. Timestamps in ms, every 30 s."""
    series = _series(n_nodes)
    n_t = max(1, n_lines // len(series))
    t0 = 1_700_000_000_000
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as f:
        for m in _METRICS:
            f.write(f"# TYPE {m} gauge\n")
        if by_series:
            for i, s in enumerate(series):
                f.writelines(f"{s} {_value(i, t)} {t0 + 30_000 * t}\n" for t in range(n_t))
        else:
            for t in range(n_t):
                ts = t0 + 30_000 * t
                f.writelines(f"{s} {_value(i, t)} {ts}\n" for i, s in enumerate(series))


def _value(i: int, t: int) -> str:
    """Like dcgm-exporter: integer temperatures and clocks, 3-decimal power, growing counters."""
    kind = i % 4
    if kind == 0:
        return str(35 + (i * 7 + t) % 40)
    if kind == 1:
        return f"{300 + ((i * 7919 + t * 104729) % 400000) / 1000:.3f}"
    if kind == 2:
        return str(1980 - 15 * ((i + t) % 5))
    return str(t // 50 + i % 3)


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"cpu{cpu}"
    return "unpinned"


def run(n_lines: int | None = None) -> list[dict[str, object]]:
    sys.path.insert(0, str(ROOT / "src"))
    from trainguard.telemetry import TelemetryBuilder, read_openmetrics

    n = n_lines or int(os.environ.get("BENCH_OM_LINES", "2000000"))
    pinned = _pin_one_core()
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="bench-om-") as tmp:
        for layout, by_series in (("scrape order", False), ("series order", True)):
            for suffix in (".om", ".om.gz"):
                path = Path(tmp) / f"{layout.split()[0]}{suffix}"
                generate(path, n, by_series=by_series)
                builder = TelemetryBuilder()
                t0, c0 = time.perf_counter(), time.process_time()
                stats = read_openmetrics([path], builder)
                parse_s = time.perf_counter() - t0
                cpu_s = time.process_time() - c0
                t1 = time.perf_counter()
                tel = builder.build()
                build_s = time.perf_counter() - t1
                rows.append({
                    "layout": layout, "file": suffix, "lines": stats.lines,
                    "samples": tel.n_samples, "malformed": stats.malformed,
                    "parse_s": round(parse_s, 3),
                    "lines_per_s": round(stats.lines / parse_s),
                    "cpu_s": round(cpu_s, 3),
                    "lines_per_cpu_s": round(stats.lines / cpu_s),
                    "file_mb_per_s": round(stats.bytes / parse_s / 1e6, 1),
                    "build_s": round(build_s, 3), "core": pinned,
                })
                path.unlink()
    return rows


def main() -> None:
    rows = run()
    cols = ["layout", "file", "lines", "malformed", "parse_s", "lines_per_s", "cpu_s",
            "lines_per_cpu_s", "file_mb_per_s", "build_s", "core"]
    print(" | ".join(f"{c:>12}" for c in cols))
    for r in rows:
        print(" | ".join(f"{r[c]!s:>12}" for c in cols))
    # CPU time of the one pinned core: on a busy machine wall time also counts waiting.
    worst = min(int(str(r["lines_per_cpu_s"])) for r in rows if r["file"] == ".om")
    print(f"target >= 1,000,000 lines per CPU-second on one core (plain files): "
          f"{'met' if worst >= 1_000_000 else 'NOT met'} (worst {worst:,})")


if __name__ == "__main__":
    main()
