"""From per-block node scores and hard evidence to alert episodes.

Predictive episodes need sustained evidence (`persist_blocks` consecutive blocks at or above
`score_on`); the onset is the end of the block that completed the run, the moment someone would
be paged. An episode stays on while the score is at or above `score_off` and ends `cooldown_s`
after the last such block; an onset inside the cool-down re-opens the previous episode instead of
paging again. Hard evidence opens its own episode at once (an XID must not hide inside a long
predictive episode) and joins evidence on the same node within `hard_cooldown_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainguard.detect.alerts import AlertEpisode, AlertKind, Signal
from trainguard.detect.config import DetectorConfig
from trainguard.telemetry.frame import FloatArray

__all__ = ["LEAD_ACTIVITY", "LEAD_COUNTER", "LEAD_GAUGE", "LEAD_PRECURSOR", "EpisodeTracker"]

LEAD_GAUGE = 0
"""What leads a node's score in a block: a level deviation (temperature, power, clocks)..."""
LEAD_COUNTER = 1
"""... a recurring error counter (SBE, PCIe replays, NVLink CRC, remapped rows) ..."""
LEAD_ACTIVITY = 2
"""... a GPU whose activity departs from its siblings' (a stalling GPU in a synchronous job) ..."""
LEAD_PRECURSOR = 3
"""... or an early-warning rule completed in this block (`precursors.py`): alert at once."""


@dataclass
class _Open:
    start: float
    last: float
    peak: float
    signals: tuple[Signal, ...]


@dataclass
class EpisodeTracker:
    """Mutable per-node episode state; `closed` collects finished episodes in onset order."""

    cfg: DetectorConfig
    nodes: list[str]
    run: dict[int, int] = field(default_factory=dict)
    soft: dict[int, _Open] = field(default_factory=dict)
    hard: dict[int, _Open] = field(default_factory=dict)
    last_soft_end: dict[int, float] = field(default_factory=dict)
    last_hard: dict[int, float] = field(default_factory=dict)
    closed: list[AlertEpisode] = field(default_factory=list)
    evidence: FloatArray = field(default_factory=lambda: np.zeros(0))
    """Per node: accumulated evidence of recurring specific deviations (see `soft_block`)."""
    last_scores: FloatArray | None = None
    """The latest block's node scores (index as `nodes`; NaN: no data), for live display."""
    last_t: float | None = None
    """End time of the latest block scored."""

    def quiet(self, t: float) -> set[int]:
        """Nodes with recent hard evidence: predictive alerts there are suppressed."""
        q = self.cfg.quiet_after_hard_s
        return {i for i, th in self.last_hard.items() if t - th < q}

    def soft_block(self, t: float, score: FloatArray, signals: dict[int, tuple[Signal, ...]],
                   quiet: set[int], lead: np.ndarray | None = None) -> None:
        """Feed one block's node scores (`signals` for the nodes at or above score_on) and
        what leads each node's score (`LEAD_*`; None: all gauge-led).

        An episode opens on a node when either
        1. its score stays at or above score_on for `persist_blocks` consecutive blocks when a
           recurring error counter leads, `persist_gauge_blocks` otherwise; or
        2. an early-warning rule completed on it in this block (`LEAD_PRECURSOR`); or
        3. evidence from specific deviations (an error counter or a stalling GPU leads the
           score) accumulates to `evidence_counter` / `evidence_activity` while this block is at
           or above score_on: each such block adds min(score, evidence_cap) - evidence_drift,
           every other block takes evidence_drift away (never below 0). Intermittent evidence
           (a GPU that stalls every few minutes, error bursts that grow) adds up; a single spike
           of a few minutes, or a level excursion, does not.
        """
        cfg = self.cfg
        n = score.shape[0]
        self.last_scores, self.last_t = score.copy(), t
        lead_ = np.zeros(n, dtype=np.int8) if lead is None else np.asarray(lead, dtype=np.int8)
        if self.evidence.shape[0] != n:
            self.evidence = np.pad(self.evidence, (0, max(0, n - self.evidence.shape[0])))[:n]
        s = np.nan_to_num(score, nan=0.0)
        specific = lead_ != LEAD_GAUGE
        gain = np.where(specific, np.minimum(s, cfg.evidence_cap) - cfg.evidence_drift,
                        -cfg.evidence_drift)
        self.evidence = np.maximum(0.0, self.evidence + gain)
        if quiet:
            self.evidence[sorted(quiet)] = 0.0
        above = np.flatnonzero(s >= cfg.score_on).tolist()
        for i in list(self.run):
            if i not in above or i in quiet:
                del self.run[i]
        for i in above:
            if i in quiet:
                continue
            self.run[i] = self.run.get(i, 0) + 1
            need = cfg.persist_blocks if lead_[i] == LEAD_COUNTER else cfg.persist_gauge_blocks
            bar = cfg.evidence_counter if lead_[i] == LEAD_COUNTER else cfg.evidence_activity
            sustained = self.run[i] >= need
            accumulated = bool(specific[i]) and self.evidence[i] >= bar
            if (sustained or accumulated or lead_[i] == LEAD_PRECURSOR) and i not in self.soft:
                self.evidence[i] = 0.0
                sig = signals.get(i, ())
                prev_end = self.last_soft_end.get(i)
                if prev_end is not None and t - prev_end < cfg.cooldown_s and self._reopen(i):
                    continue
                self.soft[i] = _Open(t, t, float(score[i]), sig)
        for i, ep in list(self.soft.items()):
            si = float(score[i]) if not np.isnan(score[i]) else 0.0
            if si >= cfg.score_off and i not in quiet:
                ep.last = t
                if si > ep.peak:
                    ep.peak = si
                    ep.signals = _keep_findings(ep.signals, signals.get(i, ()),
                                                cfg.top_signals)
            elif t - ep.last >= cfg.cooldown_s or i in quiet:
                self._close_soft(i)

    def _reopen(self, i: int) -> bool:
        for k in range(len(self.closed) - 1, -1, -1):
            ep = self.closed[k]
            if ep.node == self.nodes[i] and ep.kind is AlertKind.PREDICTIVE:
                del self.closed[k]
                self.soft[i] = _Open(ep.start, ep.end, ep.peak_score, ep.signals)
                return True
        return False

    def _close_soft(self, i: int) -> None:
        ep = self.soft.pop(i)
        self.last_soft_end[i] = ep.last
        self.closed.append(AlertEpisode(self.nodes[i], ep.start, ep.last, ep.peak,
                                        AlertKind.PREDICTIVE, ep.signals))

    def hard_event(self, i: int, t: float, signal: Signal, severity: float) -> None:
        """Hard evidence on node `i` at time `t`."""
        self.last_hard[i] = t
        ep = self.hard.get(i)
        if ep is not None and t - ep.last <= self.cfg.hard_cooldown_s:
            ep.last = max(ep.last, t)
            if len(ep.signals) < self.cfg.top_signals and signal not in ep.signals:
                ep.signals = (*ep.signals, signal)
            ep.peak = max(ep.peak, severity)
            return
        if ep is not None:
            self._close_hard(i)
        self.hard[i] = _Open(t, t, severity, (signal,))

    def join_hard(self, i: int, t: float, signal: Signal) -> bool:
        """Add `signal` to node `i`'s open hard episode (evidence that asks no action of its
        own, seen with a failure: a non-fatal XID); False, and nothing changed, when none is
        open."""
        ep = self.hard.get(i)
        if ep is None or t - ep.last > self.cfg.hard_cooldown_s:
            return False
        ep.last = max(ep.last, t)
        if len(ep.signals) < self.cfg.top_signals and signal not in ep.signals:
            ep.signals = (*ep.signals, signal)
        return True

    def _close_hard(self, i: int) -> None:
        ep = self.hard.pop(i)
        self.closed.append(AlertEpisode(self.nodes[i], ep.start, ep.last, ep.peak,
                                        AlertKind.HARD, ep.signals))

    def expire_hard(self, t: float) -> None:
        for i, ep in list(self.hard.items()):
            if t - ep.last > self.cfg.hard_cooldown_s:
                self._close_hard(i)

    def open_episodes(self) -> list[AlertEpisode]:
        """Episodes still open, as they stand (`end` is their latest evidence so far)."""
        out = [AlertEpisode(self.nodes[i], ep.start, ep.last, ep.peak, AlertKind.PREDICTIVE,
                            ep.signals) for i, ep in self.soft.items()]
        out += [AlertEpisode(self.nodes[i], ep.start, ep.last, ep.peak, AlertKind.HARD,
                             ep.signals) for i, ep in self.hard.items()]
        return sorted(out, key=lambda e: (e.start, e.node, e.kind.value))

    def forget_closed(self, before: float) -> int:
        """Drop closed episodes that ended before `before` (a live service calls it once it has
        reported them; episodes within the cool-down must stay, they may still be re-opened).
        Returns how many were dropped."""
        keep = [ep for ep in self.closed if ep.end >= before]
        dropped = len(self.closed) - len(keep)
        self.closed = keep
        return dropped

    def finish(self) -> list[AlertEpisode]:
        for i in list(self.soft):
            self._close_soft(i)
        for i in list(self.hard):
            self._close_hard(i)
        return sorted(self.closed, key=lambda e: (e.start, e.node, e.kind.value))


def _keep_findings(old: tuple[Signal, ...], new: tuple[Signal, ...], top: int
                   ) -> tuple[Signal, ...]:
    """The signals of a new peak, after any early-warning finding the episode opened with
    (a signal with a `detail`): what made it page stays first."""
    if not new:
        return old
    kept = tuple(s for s in old if s.detail)
    return (*kept, *(s for s in new if s not in kept))[:top]
