"""CPU probes: float32 matmul throughput and memory copy bandwidth, best of repeats.

Best of repeats, because a host is judged by what it can do: a momentary hiccup (another
process waking up for a few milliseconds) costs one repeat and not the figure, while a CPU hog
that holds the host's cores for the whole probe lowers every repeat and so the best one too.
Each figure carries the spread of its repeats (:func:`trainguard.check.spread.relative_spread`),
so that the judge needs a gap to the other hosts well beyond the host's own noise.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

import numpy as np

from trainguard.check.model import Figure, ProbeResult, Status
from trainguard.check.probe_base import Deadline, ProbeParams, figure, measure_budget
from trainguard.check.spread import relative_spread

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


def timed_repeats(run: Callable[[], object], deadline: Deadline) -> list[float]:
    """The seconds of at least MIN_REPEATS (and at most MAX_REPEATS) timed calls of ``run``;
    repeats past the minimum stop at ``deadline``."""
    times: list[float] = []
    while len(times) < MAX_REPEATS and (len(times) < MIN_REPEATS or not deadline.expired()):
        start = time.perf_counter()
        run()
        times.append(max(time.perf_counter() - start, 1e-9))
    return times


def best_time(run: Callable[[], object], deadline: Deadline) -> tuple[float, int]:
    """The shortest of :func:`timed_repeats`; returns (seconds, repeats)."""
    times = timed_repeats(run, deadline)
    return min(times), len(times)


def _rate_figure(name: str, work: float, times: list[float]) -> Figure:
    """``work / seconds`` at the best repeat, with the spread of the repeats' rates."""
    base = figure(name, work / min(times))
    return Figure(base.name, base.value, base.unit, base.higher_is_better,
                  relative_spread([work / t for t in times]))


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
        times = timed_repeats(lambda: np.matmul(a, b, out=out), measure_budget(params))
    return ProbeResult(
        "cpu_gemm", params.host, Status.OK,
        figures=(_rate_figure("gemm_gflops", 2.0 * n**3 / 1e9, times),),
        duration_s=time.monotonic() - started,
        facts=(("cores", str(cores)), ("blas_threads", threads), ("size", f"{n}x{n} float32"),
               ("repeats", str(len(times)))))


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
    times = timed_repeats(lambda: np.copyto(dst, src), measure_budget(params))
    return ProbeResult(
        "mem_bandwidth", params.host, Status.OK,
        figures=(_rate_figure("copy_gbps", 2.0 * src.nbytes / 1e9, times),),
        duration_s=time.monotonic() - started,
        facts=(("array_bytes", str(src.nbytes)), ("repeats", str(len(times))),
               ("cores", str(cores_available()))))


__all__ = ["available_memory_bytes", "best_time", "blas_threads", "cores_available", "cpu_gemm",
           "mem_bandwidth", "timed_repeats"]
