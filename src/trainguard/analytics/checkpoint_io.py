"""Checkpoint I/O: how fast saves ran and how much of the network they used.

Per checkpoint with a size and a save time (``size_bytes`` and ``save_s > 0``):

1. throughput = ``size_bytes / save_s`` in bytes per second (the whole save's wall time,
   background upload included, as the SDK recorded it);
2. utilization = ``8 * throughput / bandwidth_bps``: the share of the configured link bandwidth,
   given in bits per second (200 Gbit/s RoCE: ``200e9``). Above 1 means the save did not cross
   that link (page cache, local disk) or the bandwidth given is too low;
3. the summary gives the median and 90th percentile of throughput and utilization (numpy's linear
   method), and the median stall (``blocking_s``, else ``save_s``) over every checkpoint.

Failed saves (``ok`` False) are left out: their size is not what was written.

    >>> s = checkpoint_io(run.checkpoints for run in runs)   # doctest: +SKIP
    >>> f"{s.median_utilization:.0%} of 200 Gbit/s"         # doctest: +SKIP
    '31% of 200 Gbit/s'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from trainguard.analytics.runs import median, quantile, stall_s
from trainguard.errors import ConfigError
from trainguard.store import CheckpointRecord

DEFAULT_BANDWIDTH_BPS = 200e9
"""200 Gbit/s, one RoCE / InfiniBand NDR200 link."""


@dataclass(frozen=True, slots=True)
class CheckpointThroughput:
    """One save's throughput (definitions 1 and 2)."""

    checkpoint_id: int
    session_id: int | None
    step: int
    size_bytes: int
    save_s: float
    bytes_per_s: float
    utilization: float


@dataclass(frozen=True, slots=True)
class CheckpointIOSummary:
    """Checkpoint save throughput against a link's bandwidth.

        >>> CheckpointIOSummary(0, 0, 200e9, None, None, None, None, None, ()).measured
        0
    """

    checkpoints: int
    """Good checkpoints considered."""
    measured: int
    """Those with both a size and a save time."""
    bandwidth_bps: float
    median_bytes_per_s: float | None
    p90_bytes_per_s: float | None
    median_utilization: float | None
    p90_utilization: float | None
    median_stall_s: float | None
    saves: tuple[CheckpointThroughput, ...]

    def to_dict(self) -> dict[str, object]:
        return {"checkpoints": self.checkpoints, "measured": self.measured,
                "bandwidth_bps": self.bandwidth_bps,
                "median_bytes_per_s": self.median_bytes_per_s,
                "p90_bytes_per_s": self.p90_bytes_per_s,
                "median_utilization": self.median_utilization,
                "p90_utilization": self.p90_utilization, "median_stall_s": self.median_stall_s}


def throughput(ckpt: CheckpointRecord,
               bandwidth_bps: float = DEFAULT_BANDWIDTH_BPS) -> CheckpointThroughput | None:
    """Definitions 1-2 for one checkpoint; None without a size or a positive save time."""
    if ckpt.size_bytes is None or ckpt.save_s is None or ckpt.save_s <= 0:
        return None
    rate = ckpt.size_bytes / ckpt.save_s
    return CheckpointThroughput(ckpt.id, ckpt.session_id, ckpt.step, ckpt.size_bytes,
                                ckpt.save_s, rate, 8.0 * rate / bandwidth_bps)


def checkpoint_io(checkpoints: Iterable[CheckpointRecord],
                  bandwidth_bps: float = DEFAULT_BANDWIDTH_BPS) -> CheckpointIOSummary:
    """Throughput and link utilization of the good saves in ``checkpoints``."""
    if not bandwidth_bps > 0:
        raise ConfigError(f"bandwidth_bps must be > 0, got {bandwidth_bps}")
    good = [c for c in checkpoints if c.ok]
    saves = tuple(t for t in (throughput(c, bandwidth_bps) for c in good) if t is not None)
    rates = [t.bytes_per_s for t in saves]
    shares = [t.utilization for t in saves]
    return CheckpointIOSummary(
        checkpoints=len(good),
        measured=len(saves),
        bandwidth_bps=bandwidth_bps,
        median_bytes_per_s=median(rates),
        p90_bytes_per_s=quantile(rates, 0.9),
        median_utilization=median(shares),
        p90_utilization=quantile(shares, 0.9),
        median_stall_s=median([stall_s(c) for c in good
                               if c.blocking_s is not None or c.save_s is not None]),
        saves=saves,
    )


__all__ = ["DEFAULT_BANDWIDTH_BPS", "CheckpointIOSummary", "CheckpointThroughput",
           "checkpoint_io", "throughput"]
