"""CPU probes: float32 matmul throughput and memory copy bandwidth, best of repeats.

Best of repeats, because a host is judged by what it can do: a momentary hiccup (another
process waking up for a few milliseconds) costs one repeat and not the figure, while a CPU hog
that holds the host's cores for the whole probe lowers every repeat and so the best one too.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

import numpy as np

from trainguard.check.model import ProbeResult, Status
from trainguard.check.probe_base import Deadline, ProbeParams, figure, measure_budget

MIN_REPEATS = 3
MAX_REPEATS = 10


def cores_available() -> int:
    """The cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[str]:
    """Limit the BLAS/OpenMP thread pools to ``n`` threads while inside; yields how.

    threadpoolctl is optional (it comes with scikit-learn); without it BLAS keeps the thread
    count it chose at load time, which OpenBLAS takes from the affinity mask as well.
    """
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped, unused-ignore]
    except ImportError:
        yield "BLAS default (threadpoolctl not installed)"
        return
    with threadpool_limits(limits=n):
        yield f"{n} (threadpoolctl)"


def best_time(run: Callable[[], object], deadline: Deadline) -> tuple[float, int]:
    """The shortest of at least MIN_REPEATS (and at most MAX_REPEATS) timed calls of ``run``;
    repeats past the minimum stop at ``deadline``. Returns (seconds, repeats)."""
    best = float("inf")
    repeats = 0
    while repeats < MAX_REPEATS and (repeats < MIN_REPEATS or not deadline.expired()):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
        repeats += 1
    return max(best, 1e-9), repeats


def cpu_gemm(params: ProbeParams) -> ProbeResult:
    """float32 ``n x n`` matmul GFLOP/s (2 n^3 flops per product), the best of repeats."""
    started = time.monotonic()
    n = params.gemm_size
    cores = cores_available()
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    with blas_threads(cores) as threads:
        np.matmul(a, b, out=out)  # warm-up: page faults, thread pool start
        seconds, repeats = best_time(lambda: np.matmul(a, b, out=out), measure_budget(params))
    gflops = 2.0 * n**3 / seconds / 1e9
    return ProbeResult(
        "cpu_gemm", params.host, Status.OK, figures=(figure("gemm_gflops", gflops),),
        duration_s=time.monotonic() - started,
        facts=(("cores", str(cores)), ("blas_threads", threads), ("size", f"{n}x{n} float32"),
               ("repeats", str(repeats))))


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, or None where there is none."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def mem_bandwidth(params: ProbeParams) -> ProbeResult:
    """Copy bandwidth in GB/s (bytes read + bytes written per second), the best of repeats,
    of an array of ``copy_bytes`` bounded by an eighth of the available memory."""
    started = time.monotonic()
    avail = available_memory_bytes()
    size = params.copy_bytes if avail is None else min(params.copy_bytes, avail // 8)
    count = max(size // 8, 1024)
    src = np.ones(count, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # warm-up: fault the destination pages in
    seconds, repeats = best_time(lambda: np.copyto(dst, src), measure_budget(params))
    gbps = 2.0 * src.nbytes / seconds / 1e9
    return ProbeResult(
        "mem_bandwidth", params.host, Status.OK, figures=(figure("copy_gbps", gbps),),
        duration_s=time.monotonic() - started,
        facts=(("array_bytes", str(src.nbytes)), ("repeats", str(repeats)),
               ("cores", str(cores_available()))))


__all__ = ["available_memory_bytes", "best_time", "blas_threads", "cores_available", "cpu_gemm",
           "mem_bandwidth"]
