"""How often to snapshot: the adaptive interval K (pure).

Snapshot every K steps, K the smallest integer >= 1 with ``blocking_s / K <= budget * step_s``
(default budget 2 %), both times the median of the recent measurements: the snapshot's stall,
spread over the K steps between snapshots, costs at most 2 % of the step time. An explicit
integer K (``TRAINGUARD_SNAPSHOT_EVERY=5``) overrides the measurement.

K is also large enough that snapshots are at least ``min_interval_s`` plus the time to copy the
state to the buddy host (``payload_bytes / replicate_bytes_per_s``) apart: a rank keeps two
slots, and a snapshot overwritten before its replica is stored never becomes complete (on two
hosts). So the work lost per failure is one interval, about ``min_interval_s`` for small states.

Snapshots are taken at steps that are multiples of K, and the tier rounds a measured K up to
a power of two (`aligned`): every rank measures its own times, and a restore needs one step
that all ranks hold. Ranks whose K differ (8 and 16) still share every 16th step.

    >>> choose_every([0.1, 0.1, 0.3], [1.0, 1.0], IntervalConfig())   # 0.1 / 0.02 -> 5
    5
    >>> choose_every([0.001], [0.05], IntervalConfig())   # 0.5 s apart at 50 ms a step
    10
    >>> choose_every([0.1], [1.0], IntervalConfig(every=2))
    2
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["IntervalConfig", "aligned", "choose_every", "is_due"]


@dataclass(frozen=True, slots=True)
class IntervalConfig:
    """The snapshot interval policy."""

    every: int | None = None
    """A fixed K (``TRAINGUARD_SNAPSHOT_EVERY=<int>``); None: adaptive."""
    budget: float = 0.02
    """The largest share of step time the snapshots may stall training."""
    window: int = 16
    """How many recent blocking and step times the medians look at."""
    max_every: int = 100_000
    """Upper bound on an adaptive K (a state huge against its steps still gets snapshots)."""
    min_interval_s: float = 0.5
    """Adaptive snapshots are at least this far apart (seconds of training), plus the copy
    to the buddy: room for the replication of one before the next reuses its slot."""
    replicate_bytes_per_s: float = 1e9
    """The buddy copy's assumed speed (bytes/s) for that margin (about 10 Gb/s)."""

    def __post_init__(self) -> None:
        if self.every is not None and self.every < 1:
            raise ValueError("snapshot.every must be >= 1")
        if not 0 < self.budget <= 1:
            raise ValueError("snapshot.budget must be in (0, 1]")
        if self.window < 1:
            raise ValueError("snapshot.window must be >= 1")
        if self.max_every < 1:
            raise ValueError("snapshot.max_every must be >= 1")
        if self.min_interval_s < 0:
            raise ValueError("snapshot.min_interval_s must be >= 0")
        if self.replicate_bytes_per_s <= 0:
            raise ValueError("snapshot.replicate_bytes_per_s must be > 0")


def choose_every(blocking_s: Sequence[float], step_s: Sequence[float],
                 cfg: IntervalConfig, payload_bytes: int = 0) -> int:
    """K for the measurements so far (oldest first). With no measurement yet: 1 (snapshot now,
    which measures the stall)."""
    if cfg.every is not None:
        return cfg.every
    if not step_s:
        return 1
    # No snapshot measured yet (a restored rank's first ones): the minimum interval decides.
    blocking = statistics.median(blocking_s[-cfg.window:]) if blocking_s else 0.0
    step = statistics.median(step_s[-cfg.window:])
    if step <= 0:
        return 1 if blocking <= 0 else cfg.max_every
    # Smallest integer K with blocking / K <= budget * step; the epsilon keeps an exact
    # quotient (0.1 / 0.02 = 5.000000000000001 in floats) from rounding up.
    k = max(1, math.ceil(blocking / (cfg.budget * step) - 1e-9))
    apart_s = cfg.min_interval_s + payload_bytes / cfg.replicate_bytes_per_s
    k = max(k, math.ceil(apart_s / step - 1e-9))
    return max(1, min(cfg.max_every, k))


def aligned(every: int) -> int:
    """The smallest power of two >= `every` (so that ranks measuring slightly different
    intervals still snapshot common steps)."""
    return 1 << max(0, every - 1).bit_length()


def is_due(step: int, last_step: int | None, every: int) -> bool:
    """Whether a snapshot of `step` is due: a multiple of `every` not yet taken (the
    first call of a process takes one at once: it measures the stall)."""
    return last_step is None or (step != last_step and step % every == 0)
