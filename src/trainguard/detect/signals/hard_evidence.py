"""Hard evidence: hardware XIDs, uncorrectable-error counters, a GPU that stops reporting.

Found on the raw samples of each chunk, before any transformation (`hard.py` has the
vectorised finders), and carried across chunks per series (last valid value, missing-run
length, whether a GPU ever reported), so the hits do not depend on how the input was chunked.
Each hit goes to the episode tracker at the start of its block, with `HARD_SCORE`: it opens (or
joins) a hard episode and quiets predictive alerts on that node for a while. A hardware XID that
NVIDIA's catalog does not call fatal (excessive single-bit interrupts, XID 92) is not hard
evidence: it warns at once, as an early-warning rule does, or joins the node's open hard alert
(`warn`). One that records a repair (a row remapped, XID 63) joins an open hard alert too, and
otherwise waits for its GPU to confirm it (`repairs`, `confirm.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.episodes import EpisodeTracker
from trainguard.detect.hard import BoolArray, HardHit, counter_hits, vanished, xid_hits
from trainguard.detect.knowledge import is_hard_counter, is_xid_metric
from trainguard.detect.layout import DenseChunk, Layout
from trainguard.telemetry.frame import FloatArray, IntArray

__all__ = ["HARD_SCORE", "VANISH_AFTER_S", "HardConfig", "HardEvidence", "emit", "repairs",
           "warn"]

HARD_SCORE = 100.0
"""The score a hard hit hands the tracker."""
VANISH_AFTER_S = 90.0
"""A GPU missing this long (at least 2 samples) while a sibling reports has vanished."""


@dataclass(frozen=True, slots=True)
class HardConfig:
    """What hard evidence reads (no `DetectorConfig` field today: the defaults)."""

    vanish_after_s: float = VANISH_AFTER_S


@dataclass(eq=False)
class HardEvidence:
    """Per series, what the finders carry from one chunk to the next (by key: "xid:METRIC",
    "hard:METRIC", "vanish" missing-run lengths, "seen" GPUs that ever reported)."""

    cfg: HardConfig = field(default_factory=HardConfig)
    carry: dict[str, FloatArray] = field(default_factory=dict)

    def scan(self, d: DenseChunk, lay: Layout, present: BoolArray, step_s: int
             ) -> list[HardHit]:
        """The hits in chunk `d` (raw values; `present[node, gpu, t]`: a GPU reported),
        ordered by sample, then node."""
        _mg, _mn, n, g = lay.shape
        hits: list[HardHit] = []
        for mi, name in enumerate(lay.gpu_metrics):
            if _is_xid(name):
                key = f"xid:{name}"
                h, self.carry[key] = xid_hits(name, d.gpu[mi], self._carry_for(key, (n, g),
                                                                                 np.nan))
                hits += h
            elif _is_hard(name):
                key = f"hard:{name}"
                h, self.carry[key] = counter_hits(name, d.gpu[mi],
                                                  self._carry_for(key, (n, g), np.nan), True)
                hits += h
        for mi, name in enumerate(lay.node_metrics):
            if _is_hard(name):
                key = f"hard:{name}"
                h, self.carry[key] = counter_hits(name, d.node[mi],
                                                  self._carry_for(key, (n,), np.nan), False)
                hits += h
        seen = self._carry_for("seen", (n, g), 0.0) > 0
        min_steps = max(2, int(np.ceil(self.cfg.vanish_after_s / step_s)))
        h, self.carry["vanish"] = vanished(present, self._carry_for("vanish", (n, g), 0.0),
                                           seen, min_steps)
        hits += h
        self.carry["seen"] = (seen | present.any(axis=-1)).astype(np.float64)
        hits.sort(key=lambda x: (x.t_index, x.node))
        return hits

    def _carry_for(self, key: str, shape: tuple[int, ...], fill: float) -> FloatArray:
        c = self.carry.get(key)
        if c is None or c.shape != shape:
            new = np.full(shape, fill)
            if c is not None:
                new[tuple(slice(0, k) for k in c.shape)] = c
            self.carry[key] = c = new
        return c


_is_xid = lru_cache(maxsize=1 << 16)(is_xid_metric)
_is_hard = lru_cache(maxsize=1 << 16)(is_hard_counter)
"""The name tests, asked per metric and chunk (a live detector has hundreds every block)."""


def warn(tracker: EpisodeTracker, hits: list[HardHit], times: IntArray, lay: Layout
         ) -> list[tuple[int, Signal]]:
    """The non-fatal `hits` of one block as early warnings (node, signal), after `emit` handed
    the tracker the block's hard evidence: on a node whose hard episode is open (a failure
    seen, maybe in this very block), the hit joins that alert instead, so it names it. A repair
    that joins nothing is not returned: it waits for its confirmation (`repairs`)."""
    out = []
    for h in hits:
        sig = _signal(h, lay)
        if not tracker.join_hard(h.node, float(times[h.t_index]), sig) and not h.repair:
            out.append((h.node, sig))
    return out


def repairs(hits: list[HardHit], lay: Layout, s: int) -> dict[int, list[tuple[int, Signal]]]:
    """The repair XIDs among `hits`, per block of `s` samples, as (node, evidence): what the
    precursor rules watch until the GPU confirms them (`confirm.py`)."""
    out: dict[int, list[tuple[int, Signal]]] = {}
    for h in hits:
        if h.repair:
            out.setdefault(h.t_index // s, []).append((h.node, _signal(h, lay)))
    return out


def _signal(h: HardHit, lay: Layout) -> Signal:
    label = lay.gpu_label(h.node, h.gpu) if h.gpu is not None else None
    return Signal(h.metric, label, h.value, h.detail)


def emit(tracker: EpisodeTracker, hits: list[HardHit], times: IntArray, lay: Layout) -> None:
    """Hand `hits` (indexes into the chunk whose sample times are `times`) to the tracker."""
    for h in hits:
        tracker.hard_event(h.node, float(times[h.t_index]), _signal(h, lay), HARD_SCORE)
