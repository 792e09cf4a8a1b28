"""Early-warning rule 1: error counts (or hardware throttling) that recur on one GPU.

An error counter (correctable ECC / SBE, remapped rows, PCIe replays, NVLink CRC, thermal
violation time, InfiniBand symbol errors...) or a hardware throttle reason fires in a block when
it counts (or the reason is set). The series is a precursor when such blocks recur more than its
own history explains, in either of two windows of recent blocks:

* **the window** (`precursor_window_blocks`, 30 min by default): at least
  `precursor_min_events` blocks with events, a link or memory that keeps erring;
* **the burst window** (`precursor_burst_window_blocks`, 90 min by default): at least
  `precursor_burst_events` blocks with events, bursts minutes apart on a series that was quiet
  (a PCIe link that replays dozens of times, falls silent, and replays again).

In both, the count must be at least `precursor_background_ratio` times the series' usual rate
(learnt from the blocks that have left that window, half-life 12 h: the burst being judged is
never in it) plus `FLOOR_RATE` of the window's blocks (the burst window: the same number of
events, three quarters of one), and more than that rate explains at Poisson confidence:
`precursor_confidence` for the window, `precursor_burst_confidence` (one in a million) for the
burst window, which asks fewer events of more blocks and so is reached by chance far more
often. Three bursts in 90 minutes pass
only on a series quiet for days (a GPU that counts 1.4 times a day reaches them once in 12
days by chance). A single blip, a GPU that ticks now and then, or one that always counts, does
not warn.

Correctable-ECC and remapped-row counters also feed the trend test (`trend.py`), which sees
wear over hours and days.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.config import DetectorConfig
from trainguard.detect.confirm import Hits
from trainguard.detect.knowledge import is_wear_counter
from trainguard.detect.numeric import previous_valid
from trainguard.detect.precursor_state import (
    LONG_HALFLIFE_BLOCKS,
    RecurState,
    learn_before,
    popcount,
    recur_state,
)
from trainguard.detect.throttle import board_events
from trainguard.detect.trend import TrendRule, poisson_confidence
from trainguard.telemetry.frame import FloatArray

__all__ = ["FLOOR_RATE", "RecurringCounts", "Window", "window_hits"]

FLOOR_RATE = 0.05
"""The window's share of blocks with events must exceed the ratio times the usual rate by this
much: a series that never counted is not a precursor on one event."""

@dataclass(frozen=True)
class Window:
    """One window of the rule: its width in blocks, the events it needs, and the confidence."""

    blocks: int
    events: int
    floor: float
    """Share of the window's blocks beyond the ratio times the usual rate (`FLOOR_RATE`)."""
    confidence: float
    wording: str
    """How the evidence names it: "recurring" or "recurring in bursts"."""


def window_hits(mask: np.ndarray, rate: np.ndarray, now: np.ndarray, win: Window,
                ratio: float) -> list[tuple[int, int, int]]:
    """(node, gpu, count) where window `win` (bit `mask` of its blocks with events, the newest
    of them `now`) holds more events than the usual per-block `rate` explains."""
    count = popcount(mask)
    cand = (now & (count >= win.events)
            & (count / win.blocks >= ratio * rate + win.floor))
    out = []
    for ni, gi in zip(*np.nonzero(cand), strict=True):
        c = int(count[ni, gi])
        if poisson_confidence(c, float(rate[ni, gi]) * win.blocks) >= win.confidence:
            out.append((int(ni), int(gi), c))
    return out


@dataclass
class RecurringCounts:
    """Rule 1's state per series (see the module docstring)."""

    cfg: DetectorConfig
    series: dict[str, RecurState] = field(default_factory=dict)
    bursts: dict[str, RecurState] = field(default_factory=dict)
    """Per series, the same for the burst window (its own mask and its own usual rate)."""
    trend: TrendRule = field(init=False)

    def __post_init__(self) -> None:
        self.trend = TrendRule(self.cfg)

    def windows(self) -> tuple[Window, ...]:
        cfg = self.cfg
        w, lw = cfg.precursor_window_blocks, cfg.precursor_burst_window_blocks
        short = Window(w, cfg.precursor_min_events, FLOOR_RATE, cfg.precursor_confidence,
                       "recurring")
        if lw <= w:
            return (short,)
        return (short, Window(lw, cfg.precursor_burst_events, FLOOR_RATE * w / lw,
                              cfg.precursor_burst_confidence, "recurring in bursts"))

    def scan(self, name: str, x: FloatArray, s: int, nb: int, counter: bool, warm: float,
             clock: float, hits: Hits, label: Callable[[int, int], str | None]) -> np.ndarray:
        """The rule on one series [node, gpu, time] (whole blocks of `s` samples; `clock` is the
        trend test's time of the first); returns [node, gpu, block]: the blocks with an event
        (a count, not the value a counter is first seen at; or a hardware throttle reason)."""
        cfg = self.cfg
        n, g, _t = x.shape
        wins = self.windows()
        st = recur_state(self.series, name, (n, g))
        states = (st,) if len(wins) == 1 else (st, recur_state(self.bursts, name, (n, g)))
        # The burst window's usual rate is learnt over as many of its widths as the window's
        # over the warm-up before it may fire (3 h by default): a link that counts every hour
        # is not quiet for having been seen for one.
        warmups = (warm, warm * wins[-1].blocks / wins[0].blocks)[: len(wins)]
        if counter:
            prev, st.prev = previous_valid(x, st.prev)
            with np.errstate(invalid="ignore"):
                inc = np.where(x >= prev, x - prev, x)      # a reset counts from zero
            ev = np.nan_to_num(inc, nan=0.0) > 0
            grew = ev & ~np.isnan(prev)     # not the first value a series is seen at
        else:
            ev = grew = board_events(x)
        seen = ~np.isnan(x)
        ev_b = np.asarray(ev[..., : nb * s].reshape(n, g, nb, s).any(axis=-1), dtype=bool)
        seen_b = np.asarray(seen[..., : nb * s].reshape(n, g, nb, s).any(axis=-1), dtype=bool)
        alpha = 1.0 - 0.5 ** (1.0 / LONG_HALFLIFE_BLOCKS)
        what = "error count" if counter else "hardware throttling"
        for b in range(nb):
            ok = seen_b[..., b]
            e = ev_b[..., b] & ok
            for win, state in zip(wins, states, strict=True):
                learn_before(state, e, ok, alpha, win.blocks)
                # A window is the last blocks of time: a block without samples counts as quiet.
                state.mask = (((state.mask << 1) | e.astype(np.int64))
                              & ((1 << win.blocks) - 1))
            ready = e.copy()
            for win, state, need in zip(wins, states, warmups, strict=True):
                now = ready & (state.blocks >= need)
                for ni, gi, c in window_hits(state.mask, state.rate, now, win,
                                             cfg.precursor_background_ratio):
                    hits.setdefault(b, []).append((ni, Signal(
                        name, label(ni, gi), float(c),
                        f"{what} {win.wording}: {c} of the last {win.blocks} blocks "
                        f"(usually {float(state.rate[ni, gi]) * win.blocks:.1f})")))
                    for other in states:  # one hit per burst; the episode carries it on
                        other.mask[ni, gi] = 0
                    ready[ni, gi] = False
            for state in states:
                state.blocks = state.blocks + ok
            if counter and is_wear_counter(name):
                for ni, gi, dev, detail in self.trend.step(name, clock + b, e, ok):
                    hits.setdefault(b, []).append((ni, Signal(name, label(ni, gi), dev, detail)))
        return np.asarray(grew[..., : nb * s].reshape(n, g, nb, s).any(axis=-1), dtype=bool)
