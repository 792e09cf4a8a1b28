"""A second look before a jitter precursor warns.

The jitter rule (`precursors.py`) reads gauges a job moves on its own (power, SM clock), and one
run of it is enough to fire: one GPU of a healthy job can jitter for a while (the rank that
logs, evaluates or loads data; a shard with more work). So a jitter hit alone is a *watch*, not
a warning. It becomes a warning when the same GPU confirms it:

* another precursor hit on that GPU within the last `precursor_confirm_s` (the jitter again
  after a pause or after another `jitter_blocks` in a row, the other jitter series, or any other
  rule: recurring error counts, stalls, a slow remap trend);
* or another series of that GPU hits in the same block (power and clock jitter together).

The other rules warn at once: they already ask for recurrence within their window (4 of 15
blocks with errors, 3 stalls with the GPU back in between twice, a trend over hours).
Confirmation delays a real warning by the time to the second hit and drops a lone one;
`precursor_confirm_s = 0` turns it off (every hit warns, as before).

    >>> from trainguard.detect.alerts import Signal
    >>> from trainguard.detect.config import DetectorConfig
    >>> c = PrecursorConfirm(DetectorConfig(block_s=120.0, precursor_confirm_s=6 * 3600.0))
    >>> jit = Signal("DCGM_FI_DEV_POWER_USAGE", "3", 4.2, "jitter 4.2x")
    >>> c.merge({}, {0: [(1, jit)]}, clock=0.0, nb=1)     # alone: a watch
    {}
    >>> [s.detail for _, s in c.merge({}, {0: [(1, jit)]}, clock=60.0, nb=1)[0]]
    ['jitter 4.2x; confirmed: another precursor on this GPU 2.0 h earlier']
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainguard.detect.alerts import Signal
from trainguard.detect.config import DetectorConfig

__all__ = ["PrecursorConfirm"]

Hits = dict[int, list[tuple[int, Signal]]]
"""Block index (in the chunk) -> (node index, evidence), as `precursors.PrecursorHits`."""


@dataclass
class PrecursorConfirm:
    """Per GPU: the clock (in blocks) of its last precursor hit, watched or warned."""

    cfg: DetectorConfig
    seen: dict[tuple[int, str | None], float] = field(default_factory=dict)

    @property
    def window_blocks(self) -> float:
        """`precursor_confirm_s` in blocks (0: confirmation off)."""
        return self.cfg.precursor_confirm_s / self.cfg.block_s

    def merge(self, hits: Hits, watched: Hits, clock: float, nb: int) -> Hits:
        """`hits` (which warn at once) with the `watched` ones that are confirmed, per block of
        a chunk whose first block is `clock`; every hit is remembered for later blocks."""
        off = self.window_blocks <= 0
        out: Hits = {}
        for b in range(nb):
            plain, watch = hits.get(b, []), watched.get(b, [])
            if not plain and not watch:
                continue
            now = clock + b
            kept = list(plain)
            for ni, sig in watch:
                if off:
                    kept.append((ni, sig))
                elif (note := self._confirmation(ni, sig, plain + watch, now)) is not None:
                    kept.append((ni, replace(sig, detail=f"{sig.detail}; confirmed: {note}")))
            for ni, sig in plain + watch:
                self.seen[(ni, sig.gpu)] = now
            if kept:
                out[b] = kept
        self._forget(clock + nb)
        return out

    def _confirmation(self, ni: int, sig: Signal, block: list[tuple[int, Signal]],
                      now: float) -> str | None:
        """Why this watched hit warns (``None``: it stays a watch)."""
        beside = [s.metric for i, s in block if i == ni and s.gpu == sig.gpu
                  and s.metric != sig.metric]
        if beside:
            return f"{beside[0]} of this GPU in the same block"
        last = self.seen.get((ni, sig.gpu))
        if last is not None and 0 < now - last <= self.window_blocks:
            return (f"another precursor on this GPU {(now - last) * self.cfg.block_s / 3600:.1f} "
                    "h earlier")
        return None

    def _forget(self, now: float) -> None:
        """Drop GPUs whose last hit is older than the window (the map stays small)."""
        old = [k for k, t in self.seen.items() if now - t > self.window_blocks]
        for k in old:
            del self.seen[k]
