"""The ring-wide collective check: one rank per host, all-reduce latency and bandwidth.

Run by each host's agent as an ordinary rank (``python -m trainguard.check.allreduce``, with the
torch.distributed environment of a launch): gloo on CPUs, NCCL when every rank has a GPU
(``--backend auto``). Rank 0 prints one line ``TRAINGUARD_ALLREDUCE {json}``:

- ``latency_ms``: median of 4-byte all-reduces;
- ``busbw_mbps``: bus bandwidth of ``--mbytes`` MB all-reduces, ``2 (n - 1) / n * bytes / s``
  (the figure NCCL's tests report), best of ``--iters``.

It confirms the whole set after the pairwise link rounds (:mod:`trainguard.check.pairing`),
over the transport training will use. The controller's side is :func:`collective_finding`;
when the ring fails, :mod:`trainguard.check.ringsplit` runs it over subsets of the hosts to
name the host that breaks it (:mod:`trainguard.check.ringrun` runs them through the agents).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from trainguard.check.model import Finding, Level

MARKER = "TRAINGUARD_ALLREDUCE "


def bus_bandwidth_mbps(nbytes: int, seconds: float, world: int) -> float:
    """All-reduce bus bandwidth in MB/s: ``2 (n - 1) / n`` of the bytes per second."""
    if seconds <= 0 or world < 2:
        return 0.0
    return 2.0 * (world - 1) / world * nbytes / seconds / 1e6


def parse_result(text: str) -> Mapping[str, Any] | None:
    """The rank-0 result line in a rank's output, if any."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARKER):
            try:
                doc = json.loads(line[len(MARKER):])
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def collective_finding(result: Mapping[str, Any] | None, hosts: Sequence[str],
                       why_missing: str = "") -> Finding:
    """The ring-wide check as a finding on the whole set (it cannot name a host by itself:
    the ring split does, :func:`trainguard.check.ringrun.with_split`)."""
    names = ", ".join(hosts)
    if result is None:
        return Finding("cluster", "cluster", Level.FAIL, "allreduce",
                       f"ring-wide all-reduce over {names} did not complete"
                       + (f": {why_missing}" if why_missing else ""))
    lat, bw = result.get("latency_ms"), result.get("busbw_mbps")
    backend = result.get("backend", "?")
    return Finding("cluster", "cluster", Level.PASS, "allreduce",
                   f"ring-wide all-reduce ({backend}, {len(hosts)} hosts): latency "
                   f"{lat:.2f} ms, bus bandwidth {bw:,.0f} MB/s", "busbw_mbps",
                   float(bw) if isinstance(bw, (int, float)) else None)


def _run(backend: str, mbytes: float, iters: int) -> dict[str, Any]:  # pragma: no cover - torch
    import torch
    import torch.distributed as dist

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    try:
        device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" \
            else torch.device("cpu")
        world = dist.get_world_size()

        def timed(tensor: Any) -> float:
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(tensor)
            if device.type == "cuda":
                torch.cuda.synchronize()
            return time.perf_counter() - t0

        small = torch.ones(1, dtype=torch.float32, device=device)
        timed(small)  # connections up
        latency = statistics.median(timed(small) for _ in range(20))
        big = torch.ones(max(1, int(mbytes * 1e6 / 4)), dtype=torch.float32, device=device)
        timed(big)
        best = min(timed(big) for _ in range(max(1, iters)))
        return {"backend": backend, "world": world, "latency_ms": latency * 1000.0,
                "busbw_mbps": bus_bandwidth_mbps(big.numel() * 4, best, world),
                "bytes": big.numel() * 4, "iters": iters}
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:  # pragma: no cover - run as a rank
    ap = argparse.ArgumentParser(prog="python -m trainguard.check.allreduce")
    ap.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    ap.add_argument("--mbytes", type=float, default=16.0)
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args(argv)
    try:
        result = _run(args.backend, args.mbytes, args.iters)
    except ImportError:
        print("allreduce check: torch is not installed on this host", file=sys.stderr)
        return 3
    import os

    if os.environ.get("RANK", "0") == "0":
        print(MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())


__all__ = ["MARKER", "bus_bandwidth_mbps", "collective_finding", "main", "parse_result"]
