"""The gpu_perf probe: per GPU, bf16 GEMM TFLOP/s, HBM (device-to-device copy) bandwidth and
pinned host<->device copy bandwidth, timed with CUDA events, each the best of a few repeats
(about a second per GPU in all).

The figures are the slowest GPU's (a job runs at its slowest GPU's pace); every GPU's numbers
are facts, and the GEMM is also given as a fraction of the model's dense bf16 peak where the
model is in :data:`PEAK_BF16_TFLOPS`. torch is imported when the probe runs (the ``torch``
extra); without it, or without CUDA, the probe is SKIPPED.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from trainguard.check.model import ProbeResult, Status
from trainguard.check.probe_base import Deadline, ProbeParams, figure, measure_budget, skipped

# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, from NVIDIA's datasheets. The first
# name fragment found in the device name wins, so the more specific ones come first.
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756.0),   # NVIDIA H100 Tensor Core GPU datasheet, PCIe: 1,513 with sparsity
    ("H100", 989.0),        # H100 datasheet, SXM5: 1,979 with sparsity
    ("H200", 989.0),        # NVIDIA H200 datasheet, SXM: 1,979 with sparsity
    ("B200", 2250.0),       # NVIDIA HGX B200 datasheet: 4.5 PFLOPS with sparsity per GPU
    ("A100", 312.0),        # NVIDIA A100 datasheet: 624 with sparsity
    ("L40S", 362.05),       # NVIDIA L40S datasheet: 733 with sparsity
)
GEMM_N = 8192
HBM_BYTES = 1 << 30
HOST_BYTES = 256 << 20
REPEATS = 5


def peak_bf16_tflops(name: str) -> float | None:
    """The dense bf16 peak of the GPU model ``name`` (NVML/torch device name), if known."""
    upper = name.upper()
    return next((peak for frag, peak in PEAK_BF16_TFLOPS if frag.upper() in upper), None)


def import_torch_cuda() -> Any | None:
    """torch, when it is installed and sees a CUDA device; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _best_ms(torch: Any, run: Callable[[], object], deadline: Deadline) -> float:
    """The shortest CUDA-event time of ``run`` over up to REPEATS repeats (one at least)."""
    run()  # warm-up: allocator, kernels, cuBLAS handles
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        best = min(best, float(start.elapsed_time(end)))
        if deadline.expired():
            break
    return max(best, 1e-6)


GEMM_INNER = 10
"""GEMMs per timed repeat (one 8192^3 bf16 GEMM is ~1-2 ms on an H100)."""


def _gemm_tflops(torch: Any, dev: Any, deadline: Deadline) -> float:
    a = torch.randn(GEMM_N, GEMM_N, device=dev, dtype=torch.bfloat16)
    b = torch.randn(GEMM_N, GEMM_N, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(a)

    def run() -> None:
        for _ in range(GEMM_INNER):
            torch.mm(a, b, out=out)

    ms = _best_ms(torch, run, deadline)
    return GEMM_INNER * 2.0 * GEMM_N**3 / (ms / 1e3) / 1e12


def _hbm_gbps(torch: Any, dev: Any, deadline: Deadline) -> float:
    src = torch.empty(HBM_BYTES, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = _best_ms(torch, lambda: dst.copy_(src), deadline)
    return 2.0 * HBM_BYTES / (ms / 1e3) / 1e9  # a device copy reads and writes every byte


def _host_copy_gbps(torch: Any, dev: Any, deadline: Deadline) -> tuple[float, float]:
    host = torch.empty(HOST_BYTES, dtype=torch.uint8, pin_memory=True)
    on_dev = torch.empty(HOST_BYTES, dtype=torch.uint8, device=dev)
    h2d_ms = _best_ms(torch, lambda: on_dev.copy_(host, non_blocking=True), deadline)
    d2h_ms = _best_ms(torch, lambda: host.copy_(on_dev, non_blocking=True), deadline)
    return HOST_BYTES / (h2d_ms / 1e3) / 1e9, HOST_BYTES / (d2h_ms / 1e3) / 1e9


def measure_gpu(torch: Any, index: int, deadline: Deadline) -> dict[str, float]:
    """gemm_tflops, hbm_gbps, h2d_gbps, d2h_gbps of GPU ``index``."""
    dev = torch.device("cuda", index)
    with torch.cuda.device(dev):
        gemm = _gemm_tflops(torch, dev, deadline)
        hbm = _hbm_gbps(torch, dev, deadline)
        h2d, d2h = _host_copy_gbps(torch, dev, deadline)
        torch.cuda.empty_cache()
    return {"gemm_tflops": gemm, "hbm_gbps": hbm, "h2d_gbps": h2d, "d2h_gbps": d2h}


def gpu_perf(params: ProbeParams, torch: Any | None = None) -> ProbeResult:
    """Per-GPU compute and copy bandwidth; figures are the slowest GPU's."""
    started = time.monotonic()
    torch = torch if torch is not None else import_torch_cuda()
    if torch is None:
        return skipped("gpu_perf", params, "no CUDA (torch with a CUDA device not available)")
    count = int(torch.cuda.device_count())
    per_gpu: list[dict[str, float]] = []
    facts: list[tuple[str, str]] = []
    for i in range(count):
        name = str(torch.cuda.get_device_name(i))
        numbers = measure_gpu(torch, i, measure_budget(params))
        per_gpu.append(numbers)
        facts.append((f"gpu{i}.name", name))
        facts.extend((f"gpu{i}.{k}", f"{v:.1f}") for k, v in numbers.items())
        peak = peak_bf16_tflops(name)
        facts.append((f"gpu{i}.gemm_fraction_of_peak",
                      f"{numbers['gemm_tflops'] / peak:.2f} of {peak:g} TFLOP/s (dense bf16)"
                      if peak else "unknown model"))
    if not per_gpu:
        return skipped("gpu_perf", params, "no CUDA devices")
    figures = tuple(figure(key, min(g[key] for g in per_gpu)) for key in per_gpu[0])
    slowest = min(range(count), key=lambda i: per_gpu[i]["gemm_tflops"])
    facts.append(("slowest_gemm_gpu", str(slowest)))
    return ProbeResult("gpu_perf", params.host, Status.OK, figures=figures,
                       duration_s=time.monotonic() - started, facts=tuple(facts))


__all__ = ["PEAK_BF16_TFLOPS", "gpu_perf", "import_torch_cuda", "measure_gpu",
           "peak_bf16_tflops"]
