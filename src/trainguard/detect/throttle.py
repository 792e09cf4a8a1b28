"""What a GPU's clock-event (throttle) reasons say about its clock.

DCGM's `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` (`CLOCKS_EVENT_REASONS` in newer releases) is a bit
mask of why the clock is below its maximum. Two groups matter to the early-warning rules:

* the hardware reasons (HW slowdown, SW and HW thermal, HW power brake): the board or its
  cooling forces the clock down. A recurrence of them is a precursor (`precursors.py`, rule 1).
* the software power cap alone: the power governor holds the GPU at its power limit by moving
  its clock from sample to sample. A GPU of a heavy job whose silicon draws more than its
  siblings' does so while they hold their top clock, so its clock jitters against theirs
  for as long as the job runs. That is the governor at work, not an unstable supply: the jitter
  rule does not read the SM clock of a GPU in a block where it reported the power cap and no
  hardware reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from trainguard.telemetry.frame import FloatArray

_REASONS = re.compile(r"THROTTLE_REASONS|CLOCKS_EVENT_REASONS|CLOCK_EVENT_REASONS",
                      re.IGNORECASE)
HW_BITS = 0x8 | 0x20 | 0x40 | 0x80
"""HW slowdown, SW thermal, HW thermal, HW power brake (not power cap, idle or app clocks)."""
POWER_CAP_BIT = 0x4


def is_reasons(name: str) -> bool:
    """The series is a clock-event (throttle) reasons bit mask."""
    return bool(_REASONS.search(name.split("{", 1)[0]))


def bits_of(x: FloatArray) -> np.ndarray:
    """The bit masks of a gauge of reasons (a missing sample has no bit)."""
    return np.nan_to_num(x, nan=0.0).astype(np.int64)


def governed_blocks(gauges: Sequence[FloatArray], s: int, nb: int) -> np.ndarray:
    """[node, gpu, block] of reasons gauges [node, gpu, time]: the GPU reported the software
    power cap in the block and no hardware reason, in any of them (an exporter upgrade renames
    the gauge partway through a history; each name then holds part of it)."""
    n, g, _t = gauges[0].shape
    flat = np.zeros((n, g, nb * s), dtype=np.int64)
    for x in gauges:
        flat |= bits_of(x[..., : nb * s])
    bits = flat.reshape(n, g, nb, s)
    capped = ((bits & POWER_CAP_BIT) != 0).any(axis=-1)
    hardware = ((bits & HW_BITS) != 0).any(axis=-1)
    return np.asarray(capped & ~hardware, dtype=bool)
