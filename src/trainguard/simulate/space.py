"""How much disk a simulation will write, and whether the target filesystem has room for it.

The estimate is the workload model's sample count times a calibrated size per sample:

    samples = nodes x (gpus x per-GPU families + node-level series) x scrapes in the span

Calibration (trainguard 2026-11, `OpenMetricsWriter`, seeds 1-2): each family's text was
measured over every window of small real runs (4 x 8 GPUs x 1 day, 120 x 1 x 0.25 day,
16 x 16 x 0.25 day, 30 s scrapes). A per-GPU sample line (dcgm-exporter's six labels) is 206-208
bytes, a node-exporter line 105-107 bytes; compressed at the writer's gzip level 1 they take
6.1-6.8 and 10.0-10.7 bytes. The constants below round those up, so the estimate errs high by a
few percent (the default 63 x 8 x 7 days: ~295 M samples, ~60 GB plain, ~2.3 GB gzip; a real
run writes ~59 GB / ~2 GB). Kernel logs, labels and the manifest are tens of KB per node-day.

    >>> estimate_bytes(SimConfig(nodes=63, gpus_per_node=8, days=7), compress=False) // 10**9
    59
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainguard.simulate.config import SimConfig
from trainguard.simulate.metrics import GPU_METRICS, NODE_METRICS
from trainguard.valueorigin import InvalidValue

__all__ = [
    "SPACE_MARGIN",
    "NotEnoughSpace",
    "SpaceCheck",
    "check_space",
    "estimate_bytes",
    "estimate_samples",
    "free_bytes",
]

_GPU_SAMPLE_BYTES = {False: 210.0, True: 7.5}
_NODE_SAMPLE_BYTES = {False: 110.0, True: 11.5}
_OTHER_BYTES_PER_NODE_DAY = 20_000
"""Kernel log lines, labels and the manifest's share (measured: 1-4 KB per node-day)."""
_OTHER_BYTES_FIXED = 256 * 1024

SPACE_MARGIN = 0.10
"""Free space must exceed the estimate by this share plus `_HEADROOM_BYTES`: the estimate is
rounded up already, but a filesystem filled to the last byte breaks whatever else writes there."""
_HEADROOM_BYTES = 64 * 1024 * 1024


def _scrapes(cfg: SimConfig) -> int:
    """Scrape instants in [start, end): the multiples of the interval (as the model draws)."""
    iv = cfg.interval_s
    return -(-cfg.end_s // iv) - -(-cfg.start_s // iv)


def estimate_samples(cfg: SimConfig) -> tuple[int, int]:
    """(per-GPU samples, node-level samples) the run writes, before random missing samples."""
    node_series = sum(len(m.variants) for m in NODE_METRICS)
    scrapes = _scrapes(cfg)
    gpu = cfg.nodes * cfg.gpus_per_node * len(GPU_METRICS) * scrapes
    return gpu, cfg.nodes * node_series * scrapes


def estimate_bytes(cfg: SimConfig, *, compress: bool) -> int:
    """Bytes the run will write under its output directory (rounded up; see the module doc)."""
    gpu, node = estimate_samples(cfg)
    metrics = gpu * _GPU_SAMPLE_BYTES[compress] + node * _NODE_SAMPLE_BYTES[compress]
    other = _OTHER_BYTES_FIXED + _OTHER_BYTES_PER_NODE_DAY * cfg.nodes * max(cfg.days, 1.0)
    return math.ceil(metrics + other)


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (where a new directory would be made)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p.parent != p:
        p = p.parent
    return p


def _mount_point(path: Path) -> Path:
    """The mount point of the filesystem holding existing `path`, for the message."""
    p = path.resolve()
    dev = p.stat().st_dev
    while p.parent != p and p.parent.stat().st_dev == dev:
        p = p.parent
    return p


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    return shutil.disk_usage(path).free


@dataclass(frozen=True, slots=True)
class SpaceCheck:
    """The estimate against the free space where the output goes."""

    needed_bytes: int
    free_bytes: int
    reclaimed_bytes: int
    """Bytes of a previous simulation in the output directory that ``overwrite`` replaces."""
    filesystem: str
    """Mount point of the filesystem the output goes to."""
    compress: bool

    @property
    def fits(self) -> bool:
        room = self.free_bytes + self.reclaimed_bytes
        return room >= self.needed_bytes * (1 + SPACE_MARGIN) + _HEADROOM_BYTES


class NotEnoughSpace(InvalidValue):
    """The simulation will not fit where it was asked to go; nothing was written."""

    def __init__(self, check: SpaceCheck) -> None:
        super().__init__(
            "simulate.out",
            f"needs ~{_gb(check.needed_bytes)} (plus a {SPACE_MARGIN:.0%} margin), "
            f"{_gb(check.free_bytes + check.reclaimed_bytes)} free on {check.filesystem}: "
            + ("" if check.compress else "write it compressed, or ")
            + "simulate fewer days, nodes or GPUs")
        self.check = check


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _size_of(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        if p.is_file():
            total += p.stat().st_size
        elif p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return total


def check_space(cfg: SimConfig, out: Path, *, compress: bool, replaced: list[Path] | None = None,
                free: Callable[[Path], int] | None = None) -> SpaceCheck:
    """The estimate for `cfg` against the free space at `out` (which may not exist yet).

    `replaced`: files and directories an ``overwrite`` run deletes first (their space is
    reclaimed). `free`: a function path -> free bytes (tests); default `free_bytes`.
    """
    where = _existing(out)
    available = (free or free_bytes)(where)
    return SpaceCheck(needed_bytes=estimate_bytes(cfg, compress=compress),
                      free_bytes=available, reclaimed_bytes=_size_of(replaced or []),
                      filesystem=str(_mount_point(where)), compress=compress)
