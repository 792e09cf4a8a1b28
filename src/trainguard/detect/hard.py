"""Hard evidence: XID gauge changes, uncorrectable-error counters, GPUs that stop reporting.

All functions are vectorised over a chunk of raw samples and carry what they need from the
previous chunk (last valid value, missing-run length), so the result does not depend on how the
input was chunked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from trainguard.detect.knowledge import is_fatal_hardware_xid, is_hardware_xid, is_repair_xid
from trainguard.detect.numeric import previous_valid
from trainguard.evidence.xid import xid_info
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["HardHit", "changes", "vanished"]

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class HardHit:
    """One piece of hard evidence: where (indexes into the chunk) and what."""

    t_index: int
    node: int
    gpu: int | None
    metric: str
    value: float
    detail: str
    fatal: bool = True
    """False: a hardware event that asks no action now (a non-fatal XID): an early warning."""
    repair: bool = False
    """A non-fatal XID that records a repair (a row remapped): a watch until its GPU confirms
    it (`knowledge.is_repair_xid`, `confirm.py`)."""


def changes(x: FloatArray, carry: FloatArray, *, increase_only: bool
            ) -> tuple[tuple[IntArray, ...], FloatArray, FloatArray]:
    """Positions where a valid value differs from the previous valid one (or exceeds it).

    Returns (index tuple from np.nonzero over x's shape, the new values, the new carry).
    A first-ever value (carry NaN) is not a change: it is what the series started at.
    """
    prev, new_carry = previous_valid(x, carry)
    valid = ~np.isnan(x) & ~np.isnan(prev)
    diff = np.where(valid, x - prev, 0.0)
    hit = diff > 0 if increase_only else diff != 0
    where = np.nonzero(hit)
    return where, x[where], new_carry


def xid_hits(metric: str, x: FloatArray, carry: FloatArray) -> tuple[list[HardHit], FloatArray]:
    """XID gauge [node, gpu, time]: a change to a hardware XID value on one GPU.

    Application XIDs (13, 31, 43, ...) are the job's fault, not the node's: never hard evidence.
    A hardware XID that NVIDIA's catalog does not call fatal is a hit with ``fatal`` False: an
    early warning, not hard evidence (`knowledge.is_fatal_hardware_xid`); one that records a
    repair is marked so (`HardHit.repair`).
    """
    where, values, new_carry = changes(x, carry, increase_only=False)
    hits = []
    for n, g, t, v in zip(*(w.tolist() for w in where), values.tolist(), strict=True):
        if v > 0 and v == int(v) and is_hardware_xid(int(v)):
            if is_fatal_hardware_xid(int(v)):
                hits.append(HardHit(t, n, g, metric, v, f"XID {int(v)}"))
            else:
                hits.append(HardHit(t, n, g, metric, v, f"XID {int(v)}, non-fatal "
                                    f"({xid_info(int(v)).name}): a warning", fatal=False,
                                    repair=is_repair_xid(int(v))))
    return hits, new_carry


def counter_hits(metric: str, x: FloatArray, carry: FloatArray, per_gpu: bool
                 ) -> tuple[list[HardHit], FloatArray]:
    """An uncorrectable-error field [node(, gpu), time] that increased."""
    where, values, new_carry = changes(x, carry, increase_only=True)
    hits = []
    cols = [w.tolist() for w in where]
    if per_gpu:
        for n, g, t, v in zip(*cols, values.tolist(), strict=True):
            hits.append(HardHit(t, n, g, metric, v, "uncorrectable error count increased"))
    else:
        for n, t, v in zip(*cols, values.tolist(), strict=True):
            hits.append(HardHit(t, n, None, metric, v, "uncorrectable error count increased"))
    return hits, new_carry


def vanished(present: BoolArray, run_carry: FloatArray, seen: BoolArray, min_steps: int
             ) -> tuple[list[HardHit], FloatArray]:
    """GPUs [node, gpu, time] that stop reporting while a sibling on the node still reports.

    A hit is emitted at the `min_steps`-th consecutive missing sample of a GPU that had reported
    before (`seen`), if at that moment another GPU of the same node reports. A whole node that goes
    quiet (scrape gap, reboot) is not evidence here.
    """
    _n, _g, t = present.shape
    missing = ~present
    steps = np.arange(1, t + 1, dtype=np.float64)
    last_ok = np.where(present, steps, 0.0)
    np.maximum.accumulate(last_ok, axis=-1, out=last_ok)
    run = np.where(last_ok > 0, steps - last_ok, steps + run_carry[..., None])
    run = np.where(missing, run, 0.0)
    siblings = present.sum(axis=1, keepdims=True) - present.astype(np.int64)
    ever = seen[..., None] | np.logical_or.accumulate(present, axis=-1)
    hit = (run == min_steps) & (siblings > 0) & ever
    hits = [HardHit(ti, ni, gi, "(all GPU series)", float(min_steps),
                    "GPU stopped reporting while its node's other GPUs continue")
            for ni, gi, ti in zip(*(w.tolist() for w in np.nonzero(hit)), strict=True)]
    return hits, run[..., -1] if t else run_carry
