"""Early warnings in the block's score: the precursor rules' hits folded into what the tracker
is handed.

The rules themselves (recurring error counts, jitter, stalls, host collapse) are
`precursors.PrecursorRules`, with their own state and the `precursor_*`, `stall_*`, `jitter_*`
and `host_collapse_*` settings; they scan each chunk's raw samples. A hit completed in a block
raises that node's score to at least `score_on`, makes `LEAD_PRECURSOR` lead it and puts the
rule's signal first, unless the node is quiet after hard evidence. The tracker (and `trainguard
tune`'s recording tracker) sees the folded block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.config import DetectorConfig
from trainguard.detect.episodes import LEAD_PRECURSOR
from trainguard.telemetry.frame import FloatArray

__all__ = ["PrecursorConfig", "Signals", "fold"]

Signals = dict[int, tuple[Signal, ...]]


@dataclass(frozen=True, slots=True)
class PrecursorConfig:
    """The slice of `DetectorConfig` the fold reads."""

    score_on: float
    top_signals: int

    @classmethod
    def of(cls, cfg: DetectorConfig) -> PrecursorConfig:
        return cls(cfg.score_on, cfg.top_signals)


def fold(cfg: PrecursorConfig, hits: list[tuple[int, Signal]] | None, score: FloatArray,
         signals: Signals, quiet: set[int], lead: np.ndarray
         ) -> tuple[FloatArray, Signals, np.ndarray]:
    """(score, signals, lead) with the block's precursor `hits` (node, signal) folded in; the
    inputs themselves when there are none (never modified)."""
    if not hits:
        return score, signals, lead
    score = score.copy()
    lead = np.array(lead, dtype=np.int8)
    signals = dict(signals)
    for i, sig in hits:
        if i in quiet or i >= score.shape[0]:
            continue
        lead[i] = LEAD_PRECURSOR
        score[i] = max(float(np.nan_to_num(score[i], nan=0.0)), cfg.score_on)
        signals[i] = (sig, *(x for x in signals.get(i, ()) if x != sig))[: cfg.top_signals]
    return score, signals, lead
