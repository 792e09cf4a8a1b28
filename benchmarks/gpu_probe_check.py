"""Run the GPU probes of ``trainguard check`` on this machine and print their results as JSON.

For a machine with NVIDIA GPUs (issue #19): ``gpu`` (NVML health: ECC, remapped rows, clocks,
throttle reasons; needs ``nvidia-ml-py``), ``gpu_perf`` (bf16 GEMM, HBM, pinned H2D/D2H per
GPU; needs torch with CUDA) and ``dcgm`` (``dcgmi diag -r 1`` when installed), then the judge's
findings for this one host (floors only: one host has no others to compare with).

    python benchmarks/gpu_probe_check.py                       # JSON on stdout
    python benchmarks/gpu_probe_check.py --expected-gpus 8 --time-limit 120

What to look for on an H100: ``gpu`` OK with ``gpu_count`` = the GPUs present and no
``hard_fail`` fact; ``gpu_perf`` gemm_tflops roughly 0.6-0.8 of the 989 TFLOP/s dense bf16
peak (the ``gpuN.gemm_fraction_of_peak`` facts), hbm_gbps of a few thousand (copy: read +
write), h2d/d2h around 25-55 GB/s depending on PCIe generation; ``dcgm`` SKIPPED unless DCGM
is installed. Exit status 0 when every finding is PASS or SKIPPED, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys

from trainguard.check.judge import judge, summarize
from trainguard.check.model import Level
from trainguard.check.probe_base import ProbeParams
from trainguard.check.probes import run_probes

GPU_PROBES = ("gpu", "gpu_perf", "dcgm")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expected-gpus", type=int, default=None)
    parser.add_argument("--time-limit", type=float, default=120.0,
                        help="seconds per probe (default 120)")
    parser.add_argument("--no-require-ecc", action="store_true")
    args = parser.parse_args(argv)
    params = ProbeParams(socket.gethostname() or "localhost", time_limit_s=args.time_limit,
                         expected_gpus=args.expected_gpus,
                         require_ecc=not args.no_require_ecc)
    results = run_probes(GPU_PROBES, params)
    findings = judge(results)
    summary = summarize(findings)
    json.dump({"results": [r.to_dict() for r in results],
               "findings": [f.to_dict() for f in findings],
               "summary": {h: level.value for h, level in summary.items()}},
              sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if all(lv in (Level.PASS, Level.SKIPPED) for lv in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
