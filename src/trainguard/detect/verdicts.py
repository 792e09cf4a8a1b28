"""Which metrics the detector scores by their rate (cumulative) and which by their level.

A metric's verdict comes from its name and from how its raw values behaved so far: increases,
resets, other decreases, negative values (`cumulative_verdict`). It is decided causally, never
from the whole input in hindsight, so the live service and a batch run over the same samples
score alike: the verdicts are taken again only at each multiple of `VERDICT_EVERY_S`
(epoch-aligned), from everything seen before it. The answer, and every score after it, then does
not depend on how the input was cut into chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainguard.detect.layout import DenseChunk, Layout
from trainguard.detect.numeric import carried, previous_valid
from trainguard.telemetry.frame import FloatArray
from trainguard.telemetry.rates import cumulative_verdict, monotone_counts

__all__ = ["SETTLED_DECREASES", "SETTLED_INCREASES", "VERDICT_EVERY_S", "CumulativeVerdicts"]

SETTLED_DECREASES = 100
SETTLED_INCREASES = 5000
VERDICT_EVERY_S = 3600
"""Which metrics are cumulative is decided again at every multiple of this (epoch-aligned, in
whole blocks) from everything seen before it."""


@dataclass
class CumulativeVerdicts:
    """Counts each metric's raw behaviour (`observe`) and decides its verdict (`decide`)."""

    always: frozenset[str] = frozenset()
    """Metric names always scored by their rate."""
    version: int = 0
    """Bumped whenever a verdict changes (what callers cache per-metric facts on)."""
    decided_once: bool = False
    _verdicts: dict[str, bool] = field(default_factory=dict)
    _counts: dict[str, list[int]] = field(default_factory=dict)
    """Per metric: increases, resets, other decreases, negative values seen (0/1)."""
    _settled: dict[str, bool] = field(default_factory=dict)
    """Metrics whose verdict can no longer change in practice (a gauge with many decreases,
    negative values; a counter with thousands of increases and no decrease): not counted."""
    _carry: dict[str, FloatArray] = field(default_factory=dict)

    def is_cumulative(self, name: str) -> bool:
        """A metric's current verdict; a metric seen for the first time is judged by its
        name (declared types are not used: a Prometheus without metadata, e.g. backfilled
        history, must score exactly like the files that declared them)."""
        v = self._verdicts.get(name)
        if v is None:
            v = self._verdicts[name] = name in self.always or cumulative_verdict(
                name, 0, 0, 0, False)
        return v

    def observe(self, d: DenseChunk, lay: Layout) -> None:
        """Count each metric's increases, resets and other decreases (raw values)."""
        for names, raw, key in ((lay.gpu_metrics, d.gpu, "gpu"),
                                (lay.node_metrics, d.node, "node")):
            idx = [i for i, name in enumerate(names) if name not in self._settled]
            if not idx or raw.shape[0] == 0:
                continue
            carry = carried(self._carry, key, raw.shape[:-1], float("nan"))
            if len(idx) == raw.shape[0]:
                prev, self._carry[key] = previous_valid(raw, carry)
            else:
                names = [names[i] for i in idx]
                raw = raw[idx]
                prev, last = previous_valid(raw, carry[idx])
                carry[idx] = last
            m = raw.shape[0]
            counts = monotone_counts(raw.reshape(m, -1), prev.reshape(m, -1))
            for name, row in zip(names, counts.tolist(), strict=True):
                seen = self._counts.setdefault(name, [0, 0, 0, 0])
                seen[0] += row[0]
                seen[1] += row[1]
                seen[2] += row[2]
                seen[3] |= row[3]

    def decide(self, names: list[str]) -> list[int]:
        """Decide every verdict again from what was observed; returns the indices (in `names`)
        of the metrics that changed side (their values changed meaning: learn them afresh)."""
        self.decided_once = True
        flipped: list[int] = []
        for i, name in enumerate(names):
            c = self._counts.get(name)
            if name in self.always or c is None:
                continue
            now = cumulative_verdict(name, c[0], c[1], c[2], bool(c[3]))
            if c[3] or (c[2] >= SETTLED_DECREASES and 10 * c[2] > c[0]) \
                    or (c[0] >= SETTLED_INCREASES and c[2] == 0):
                self._settled[name] = True  # decided for good: no need to keep counting
            if now != self.is_cumulative(name):
                self._verdicts[name] = now
                flipped.append(i)
        if flipped:
            self.version += 1
        return flipped
