"""The detector's memory budget, checked before any large array is allocated."""

from __future__ import annotations

from trainguard.detect.config import DetectorConfig
from trainguard.telemetry.frame import Telemetry
from trainguard.telemetry.limits import check_memory

__all__ = ["check_detector_memory"]

_DENSE_COPIES = 6
"""Live copies of a chunk's dense tensor while it is scored (densify, align, rates, blocks...)."""
_PEER_BYTES_PER_PAIR = 40
"""Peer-group inference holds node x node matrices: correlation, distances, adjacency, labels."""


def check_detector_memory(tel: Telemetry, cfg: DetectorConfig, chunk_s: int) -> None:
    """Estimate the detector's largest arrays for `tel` and raise `MemoryLimitError` (before any
    is allocated) when they exceed `cfg.max_memory_bytes`."""
    limit = cfg.max_memory_bytes or None
    gpus: dict[str, set[str]] = {}
    n_gpu_metrics = 0
    for m in tel.metrics:
        if m.per_gpu:
            n_gpu_metrics += 1
            for e in m.entities:
                if e.gpu is not None:
                    gpus.setdefault(e.node, set()).add(e.gpu)
    n = len(tel.nodes)
    slots = max((len(v) for v in gpus.values()), default=1)
    steps = chunk_s // tel.step_s + max(1, round(cfg.block_s / tel.step_s))
    cells = n_gpu_metrics * n * slots + (len(tel.metrics) - n_gpu_metrics) * n
    check_memory(8.0 * _DENSE_COPIES * cells * steps, limit,
                 f"scoring {len(tel.metrics)} metrics x {n:,} nodes x {slots} GPUs",
                 "detect on fewer nodes or metrics at a time; ")
    check_memory(float(_PEER_BYTES_PER_PAIR) * n * n, limit,
                 f"comparing {n:,} nodes with each other (peer groups)",
                 "detect on fewer nodes at a time (e.g. one partition or rack per run); ")
    check_memory(cfg.peer_history_bytes(n), limit,
                 f"{n:,} nodes x detect.peer_window_blocks = {cfg.peer_window_blocks:,} blocks "
                 "of activity history", "lower detect.peer_window_blocks or detect on fewer "
                 "nodes at a time; ")
