"""A second look before a jitter precursor or a row-remap XID warns.

The jitter rule (`precursors.py`) reads gauges a job moves on its own (power, SM clock), and one
run of it is enough to fire: one GPU of a healthy job can jitter for a while (the rank that
logs, evaluates or loads data; a shard with more work). So a jitter hit alone is a *watch*, not
a warning. It becomes a warning when the same GPU confirms it:

* another precursor hit on that GPU within the last `precursor_confirm_s` (the jitter again
  after a pause or after another `jitter_blocks` in a row, the other jitter series, or any other
  rule: recurring error counts, stalls, a slow remap trend);
* or another series of that GPU hits in the same block (power and clock jitter together).

A row remapped to a spare (XID 63, `knowledge.is_repair_xid`) is a watch too: a healthy GPU
spends a spare now and then in its life, and NVIDIA's catalog asks no action for it. It warns
when the GPU confirms it as a jitter hit is confirmed, or by more memory wear: a correctable
error or another row remapped (a `knowledge.is_wear_counter` that counts; the XID gauge shows a
second 63 in a row as no change) at least `REPAIR_APART_BLOCKS` blocks away from it and within
`precursor_confirm_s`, before it or after it (the watch then waits, and warns in the block of
its confirmation). The error that made the GPU remap the row, and the remap counter's own
step, belong to the remap itself: logged beside it, they confirm nothing.

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

A remap alone waits; a correctable error on its GPU half an hour later confirms it then:

    >>> xid = Signal("DCGM_FI_DEV_XID_ERRORS", "5", 63.0, "XID 63")
    >>> c.merge({}, {}, clock=100.0, nb=1, repairs={0: [(2, xid)]})
    {}
    >>> out = c.merge({}, {}, clock=101.0, nb=20, errors={14: {(2, "5")}})
    >>> [(b, s.detail) for b, hits in out.items() for _, s in hits]
    [(14, 'XID 63; confirmed: more memory wear on this GPU 0.5 h later')]
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainguard.detect.alerts import Signal
from trainguard.detect.config import DetectorConfig

__all__ = ["PrecursorConfirm"]

Hits = dict[int, list[tuple[int, Signal]]]
"""Block index (in the chunk) -> (node index, evidence), as `precursors.PrecursorHits`."""
Gpu = tuple[int, str | None]
"""(node index, GPU label): whose hits confirm whose."""
Errors = dict[int, set[Gpu]]
"""Block index (in the chunk) -> the GPUs whose memory wear counters (correctable errors, rows
remapped) counted in that block."""
REPAIR_APART_BLOCKS = 2
"""Wear confirms a remap only this many blocks (or more) away from it: the error that made the
GPU remap the row, and the remap counter's step, are logged beside the XID, maybe a scrape
later."""


@dataclass
class PrecursorConfirm:
    """Per GPU: the clock (in blocks) of its last precursor hit, watched or warned; of the last
    two blocks its memory wear counted in; and the remaps that wait for a confirmation."""

    cfg: DetectorConfig
    seen: dict[Gpu, float] = field(default_factory=dict)
    errors: dict[Gpu, tuple[float, float]] = field(default_factory=dict)
    """The clocks of the latest block with memory wear on the GPU and of the one before it."""
    waiting: list[tuple[float, int, Signal]] = field(default_factory=list)
    """Remaps (clock, node index, evidence) not confirmed yet, oldest first."""

    @property
    def window_blocks(self) -> float:
        """`precursor_confirm_s` in blocks (0: confirmation off)."""
        return self.cfg.precursor_confirm_s / self.cfg.block_s

    def merge(self, hits: Hits, watched: Hits, clock: float, nb: int,
              repairs: Hits | None = None, errors: Errors | None = None) -> Hits:
        """`hits` (which warn at once) with the `watched` ones and the `repairs` (row-remap
        XIDs) that are confirmed, per block of a chunk whose first block is `clock`; `errors`
        the GPUs whose memory wear counted, per block. Every hit is remembered for later
        blocks, and a remap not confirmed yet waits for `precursor_confirm_s`."""
        off = self.window_blocks <= 0
        repairs, errors = repairs or {}, errors or {}
        out: Hits = {}
        for b in range(nb):
            plain, watch, rep = hits.get(b, []), watched.get(b, []), repairs.get(b, [])
            err = errors.get(b, set())
            if not (plain or watch or rep or err or self.waiting):
                continue
            now = clock + b
            kept = list(plain)
            block = plain + watch + rep
            for ni, sig in watch:
                if off:
                    kept.append((ni, sig))
                elif (note := self._confirmation(ni, sig, block, now)) is not None:
                    kept.append((ni, _confirmed(sig, note)))
            kept += self._confirm_waiting(block, err, now)
            for ni, sig in rep:
                if off:
                    kept.append((ni, sig))
                elif (note := self._confirmation(ni, sig, block, now)
                      or self._error_before(ni, sig.gpu, now)) is not None:
                    kept.append((ni, _confirmed(sig, note)))
                else:
                    self.waiting.append((now, ni, sig))
            for ni, sig in block:
                self.seen[(ni, sig.gpu)] = now
            for key in err:
                last = self.errors.get(key)
                self.errors[key] = (now, last[0] if last is not None else now)
            if kept:
                out[b] = kept
        self._forget(clock + nb)
        return out

    def _error_before(self, ni: int, gpu: str | None, now: float) -> str | None:
        """Memory wear on this GPU within the window before `now`, and not beside it."""
        for t in self.errors.get((ni, gpu), ()):
            if REPAIR_APART_BLOCKS <= now - t <= self.window_blocks:
                return f"more memory wear on this GPU {self._hours(now - t):.1f} h earlier"
        return None

    def _confirm_waiting(self, block: list[tuple[int, Signal]], err: set[Gpu], now: float
                         ) -> list[tuple[int, Signal]]:
        """The waiting remaps that this block confirms (a precursor hit on their GPU, or memory
        wear far enough from them), as warnings of this block."""
        if not self.waiting:
            return []
        hit = {(ni, sig.gpu) for ni, sig in block}
        out, still = [], []
        for t, ni, sig in self.waiting:
            key = (ni, sig.gpu)
            h = self._hours(now - t)
            if now - t > self.window_blocks:
                continue
            if key in hit and now > t:
                note = f"another precursor on this GPU {h:.1f} h later"
            elif key in err and now - t >= REPAIR_APART_BLOCKS:
                note = f"more memory wear on this GPU {h:.1f} h later"
            else:
                still.append((t, ni, sig))
                continue
            out.append((ni, _confirmed(sig, note)))
        self.waiting = still
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
            return f"another precursor on this GPU {self._hours(now - last):.1f} h earlier"
        return None

    def _hours(self, blocks: float) -> float:
        return blocks * self.cfg.block_s / 3600

    def _forget(self, now: float) -> None:
        """Drop GPUs whose last hit or error is older than the window, and remaps that waited
        longer (the maps stay small)."""
        for k in [k for k, t in self.seen.items() if now - t > self.window_blocks]:
            del self.seen[k]
        for k in [k for k, (t, _) in self.errors.items() if now - t > self.window_blocks]:
            del self.errors[k]
        self.waiting = [w for w in self.waiting if now - w[0] <= self.window_blocks]


def _confirmed(sig: Signal, note: str) -> Signal:
    """`sig` as a warning, its finding saying what confirmed it."""
    return replace(sig, detail=f"{sig.detail}; confirmed: {note}")
