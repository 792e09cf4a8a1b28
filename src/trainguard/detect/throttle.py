"""What a GPU's clock-event (throttle) reasons say about its clock.

DCGM's `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` (`CLOCKS_EVENT_REASONS` in newer releases) is a bit
mask of why the clock is below its maximum. Two groups matter to the early-warning rules:

* the hardware reasons (HW slowdown, SW and HW thermal, HW power brake): the board or its
  cooling forces the clock down. A recurrence of them is a precursor (`precursors.py`, rule 1)
  unless heat explains it: a sample that also reports a thermal reason (SW or HW thermal) is
  the GPU protecting itself from a hot inlet, a failing fan or blocked airflow, which the
  cooling's owner fixes and which does not foretell the GPU's failure (a node whose fan slows
  throttles the GPUs nearest it for hours). HW slowdown or the power brake alone is the
  board's doing.
* the software power cap: the power governor holds the GPU at its power limit by moving its
  clock from sample to sample. A GPU of a heavy job whose silicon draws more than its
  siblings' does so while they hold their top clock, so its clock jitters against theirs for
  as long as the job runs. That is the governor at work, not an unstable supply: the jitter
  rule does not read the SM clock of a GPU in a block where it reported the power cap and no
  hardware reason. The governor also holds that GPU's power reading just under the limit, so
  a sibling drawing below the limit moves its power far more than the capped GPUs do: the
  jitter rule compares power only among GPUs in the same state (`cap_blocks`).

The fused score reads a reasons gauge as the share of each block's samples with a hardware
reason that heat does not explain (`board_share`), not as the number the mask makes.
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
THERMAL_BITS = 0x20 | 0x40
"""SW thermal, HW thermal: heat forces the clock down."""
POWER_CAP_BIT = 0x4


def is_reasons(name: str) -> bool:
    """The series is a clock-event (throttle) reasons bit mask."""
    return bool(_REASONS.search(name.split("{", 1)[0]))


def bits_of(x: FloatArray) -> np.ndarray:
    """The bit masks of a gauge of reasons (a missing sample has no bit)."""
    return np.nan_to_num(x, nan=0.0).astype(np.int64)


def board_events(x: FloatArray) -> np.ndarray:
    """Samples of a reasons gauge where the board forces the clock down and heat does not
    explain it: a hardware reason, and no thermal one.

    >>> board_events(np.array([0.0, 0x8, 0x80, 0x8 | 0x40, 0x20, 0x4, np.nan])).tolist()
    [False, True, True, False, False, False, False]
    """
    bits = bits_of(x)
    return np.asarray(((bits & HW_BITS) != 0) & ((bits & THERMAL_BITS) == 0), dtype=bool)


def board_share(x: FloatArray, s: int) -> FloatArray:
    """What scoring reads of a reasons gauge [..., time], per block of ``s`` samples: the
    share of its samples with a :func:`board_events` event (NaN where none was reported).
    The mask as a number means nothing (the power cap is 4, HW thermal 64), and a GPU that
    touches its power limit or runs hot beside a slowing fan is not failing by it.

    >>> board_share(np.array([0.0, 0x8, 0x40, 0x4, np.nan, np.nan]), 2).tolist()
    [0.5, 0.0, nan]
    """
    nb = x.shape[-1] // s
    blocks = x[..., : nb * s].reshape(*x.shape[:-1], nb, s)
    seen = (~np.isnan(blocks)).sum(axis=-1)
    hits = board_events(blocks).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(seen > 0, hits / np.maximum(seen, 1), np.nan)


def _block_bits(gauges: Sequence[FloatArray], s: int, nb: int) -> np.ndarray:
    """[node, gpu, block, sample]: every gauge's bits OR-ed (an exporter upgrade renames the
    gauge partway through a history; each name then holds part of it)."""
    n, g, _t = gauges[0].shape
    flat = np.zeros((n, g, nb * s), dtype=np.int64)
    for x in gauges:
        flat |= bits_of(x[..., : nb * s])
    return flat.reshape(n, g, nb, s)


def cap_blocks(gauges: Sequence[FloatArray], s: int, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """[node, gpu, block] twice, of reasons gauges [node, gpu, time] read together: the GPU
    reported the software power cap in at least half of the block's samples (held: its
    governor holds its power at the limit; a GPU that draws about its limit touches it now
    and then); and in any sample, with no hardware reason (governed: the governor alone moved
    its clock)."""
    bits = _block_bits(gauges, s, nb)
    cap = (bits & POWER_CAP_BIT) != 0
    hardware = ((bits & HW_BITS) != 0).any(axis=-1)
    return (np.asarray(2 * cap.sum(axis=-1) >= s, dtype=bool),
            np.asarray(cap.any(axis=-1) & ~hardware, dtype=bool))

