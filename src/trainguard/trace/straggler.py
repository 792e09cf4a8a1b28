"""Straggler detection: which rank the others wait for, where its extra time goes, and what it
costs the job.

In synchronous data-parallel training every rank runs the same steps per second, so a slow rank
does not show as fewer steps: it shows as more of its *own work* per step (compute, or loading
data), while its healthy peers show the same extra time as waiting in collectives. Each rank's
`TraceWindow` records split its step time into those parts, so the straggler is the rank whose
work per step stands out from the other ranks' at the same time, persistently.

Durations measured on one rank are only divided by durations measured on others; timestamps
only pair a window with the other ranks' windows over the same time, so clocks that are off by
a fraction of a window blur the pairing a little and bias nothing.

    report = detect_stragglers({0: windows0, 1: windows1, 2: windows2}, StragglerConfig())
    for s in report.stragglers:
        print(s.describe())  # rank 2 (node-b): +34% work per step vs its peers since ...
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from trainguard.errors import ConfigError
from trainguard.trace.model import TraceWindow

__all__ = [
    "CAUSE_COMPUTE",
    "CAUSE_DATA",
    "Evaluation",
    "RankSummary",
    "StepBreakdown",
    "Straggler",
    "StragglerConfig",
    "StragglerReport",
    "detect_stragglers",
]

CAUSE_COMPUTE = "compute"
"""The straggler's extra time is its own compute (slow GPU/CPU, contention, throttling, a sleep)."""
CAUSE_DATA = "data"
"""The straggler's extra time is in its data loading."""

_FloatArray = npt.NDArray[np.float64]

_MAD_SCALE = 1.4826  # MAD -> standard deviation for normal data
_MIN_MAD_PEERS = 3  # below this many peers a spread cannot be estimated robustly
_COVER = 0.5  # share of the evaluation window a rank's usable windows must cover to be judged
_EPS = 1e-9  # tolerance on the evaluation grid (floating-point times)


# --- config --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StragglerConfig:
    """Thresholds of `detect_stragglers`; the defaults suit trace windows of about 5 s.

    >>> StragglerConfig(min_slowdown=0.2).persist
    2
    """

    window_s: float = 45.0
    """Evaluation window: each rank is judged on its trace windows that end in the last this
    many seconds (about nine 5-s windows)."""
    every_s: float = 5.0
    """Evaluation cadence (seconds between evaluations; at most `window_s`)."""
    min_slowdown: float = 0.15
    """Flagged when its work per step is at least this fraction above the other ranks' ..."""
    min_excess_s: float = 0.0005
    """... by at least this many seconds per step (timer and scheduler noise floor) ..."""
    min_cost: float = 0.03
    """... costing the job at least this fraction of its step time ..."""
    mad_k: float = 3.0
    """... and this many robust deviations above the other ranks' (with 3 or more of them)."""
    trim: float = 0.3
    """Share of a rank's windows in an evaluation dropped at each end (its slowest and fastest)
    before averaging, so that a few slow windows do not make a straggler."""
    persist: int = 2
    """Flagged evaluations in a row that declare a straggler (and unflagged ones that end it)."""
    min_steps: int = 3
    """Steps a rank needs within an evaluation window to be judged in it."""
    warmup_s: float = 10.0
    """The first seconds of each rank's records are ignored (start-up, first steps)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"straggler.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ConfigError(f"straggler.{f.name} must be finite, got {value!r}")
        for name in ("persist", "min_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"straggler.{name} must be an integer >= 1, got {value!r}")
        for name in ("window_s", "every_s", "min_slowdown"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"straggler.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("min_excess_s", "mad_k", "warmup_s", "min_cost"):
            if getattr(self, name) < 0:
                raise ConfigError(f"straggler.{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0 <= self.trim < 0.5:
            raise ConfigError(f"straggler.trim must be in [0, 0.5), got {self.trim!r}")
        if self.min_cost >= 1:
            raise ConfigError(f"straggler.min_cost must be < 1, got {self.min_cost!r}")
        if self.every_s > self.window_s:
            raise ConfigError(f"straggler.every_s must be <= straggler.window_s "
                              f"({self.every_s!r} > {self.window_s!r})")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# --- results -------------------------------------------------------------------------------------


def _r(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Where a rank's step time goes, in seconds per step (sums over windows / their steps)."""

    steps: int
    step_s: float
    """Wall time per step."""
    compute_s: float
    """The rank's own work per step (`TraceWindow.compute_s`)."""
    data_s: float
    collective_s: float
    """Blocked in collectives per step (for a healthy rank: mostly waiting for the others)."""
    checkpoint_s: float

    @property
    def work_s(self) -> float:
        """Compute plus data loading: the time the other ranks wait for."""
        return self.compute_s + self.data_s

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "step_s": _r(self.step_s), "compute_s": _r(self.compute_s),
                "data_s": _r(self.data_s), "collective_s": _r(self.collective_s),
                "checkpoint_s": _r(self.checkpoint_s), "work_s": _r(self.work_s)}


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One evaluation: each compared rank's work per step and slowdown vs the other ranks."""

    at: float
    """End of the evaluation window (windows ending in ``(at - window_s, at]`` count)."""
    work_s: Mapping[int, float]
    """Each compared rank's median over its windows of work (compute + data) per step."""
    slowdown: Mapping[int, float]
    """Each compared rank's trimmed mean over its windows of ``work / ref - 1``, where ``ref``
    is the median of the other ranks' work per step over the same time."""
    flagged: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "work_s": {str(k): _r(v) for k, v in sorted(self.work_s.items())},
                "slowdown": {str(k): _r(v, 4) for k, v in sorted(self.slowdown.items())},
                "flagged": list(self.flagged)}


def local_time(t: float) -> str:
    """A unix time as local ISO time to the second (``2026-11-26 01:03:12+01:00``)."""
    try:
        return datetime.fromtimestamp(t).astimezone().isoformat(sep=" ", timespec="seconds")
    except (OverflowError, OSError, ValueError):  # out of the platform's range
        return f"t={t:.0f}"


@dataclass(frozen=True, slots=True)
class Straggler:
    """One episode of one rank being the straggler, with where its time goes and the cost.

    The breakdowns cover the windows that end from half an evaluation window before the first
    flagged evaluation to the last flagged one; ``peers`` is the field-by-field median of the
    other ranks' breakdowns over the same time.
    """

    rank: int
    host: str | None
    first_flagged: float
    """The first flagged evaluation (the straggling started up to ``window_s`` before)."""
    declared_at: float
    """The evaluation that completed `StragglerConfig.persist` flagged evaluations in a row."""
    last_flagged: float
    status: str
    """``recovered`` (`StragglerConfig.persist` unflagged evaluations in a row), ``silent``
    (it stopped being comparable: no more windows, or no steps), or ``ongoing``."""
    recovered_at: float | None
    """The first unflagged evaluation after the last flagged one, when ``recovered``."""
    evaluations: int
    """Flagged evaluations in the episode."""
    slowdown: float
    """Median over the episode's evaluations of its slowdown vs the other ranks."""
    own: StepBreakdown
    peers: StepBreakdown
    cause: str
    """Where the extra time goes: `CAUSE_COMPUTE` or `CAUSE_DATA`."""
    excess_s: float
    """Extra work per step: ``own.work_s - peers.work_s``."""
    cost: float
    """Fraction of the job's step time the excess costs (every rank waits for it)."""
    steps_per_s: float
    """The job's throughput over the episode."""
    steps_per_s_lost: float | None
    """Throughput the job would gain without the excess; None when it cannot be estimated."""

    @property
    def extra_s(self) -> dict[str, float]:
        """Per step, the straggler minus its peers: compute and data (its extra work) and
        collective (negative: it waits less, the peers wait for it)."""
        return {"compute": self.own.compute_s - self.peers.compute_s,
                "data": self.own.data_s - self.peers.data_s,
                "collective": self.own.collective_s - self.peers.collective_s}

    @property
    def flagged_s(self) -> float:
        """Seconds from the first flagged evaluation to the last one."""
        return max(0.0, self.last_flagged - self.first_flagged)

    def describe(self) -> str:
        """One line for a terminal or a log; times are the local wall-clock time."""
        extra = self.extra_s
        where = self.host or "unknown host"
        lost = ("" if self.steps_per_s_lost is None
                else f", {self.steps_per_s_lost:.2f} steps/s lost")
        return (f"rank {self.rank} ({where}): {self.slowdown:+.0%} work per step vs its peers "
                f"since {local_time(self.first_flagged)} ({self.status}, flagged for "
                f"{self.flagged_s:.0f} s); extra time in {self.cause}: "
                f"compute {extra['compute'] * 1e3:+.1f} ms/step, data "
                f"{extra['data'] * 1e3:+.1f} ms/step; peers wait "
                f"{-extra['collective'] * 1e3:+.1f} ms/step more in collectives; costs "
                f"{self.cost:.0%} of the step time{lost}")

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "first_flagged": self.first_flagged,
                "declared_at": self.declared_at, "last_flagged": self.last_flagged,
                "status": self.status, "recovered_at": self.recovered_at,
                "evaluations": self.evaluations, "slowdown": _r(self.slowdown, 4),
                "cause": self.cause, "excess_s": _r(self.excess_s),
                "extra_s": {k: _r(v) for k, v in self.extra_s.items()},
                "cost": _r(self.cost, 4), "steps_per_s": _r(self.steps_per_s, 4),
                "steps_per_s_lost": _r(self.steps_per_s_lost, 4),
                "own": self.own.to_dict(), "peers": self.peers.to_dict()}


@dataclass(frozen=True, slots=True)
class RankSummary:
    """One rank over the whole run (after warm-up): its breakdown and slowdown vs the others."""

    rank: int
    host: str | None
    windows: int
    """Trace windows used (with steps, after warm-up)."""
    skipped: int
    """Windows left out: no steps (a hang or a pause), unusable numbers, or warm-up."""
    last_end: float | None
    """End of its last window of any kind (None: it never reported)."""
    breakdown: StepBreakdown | None
    work_s: float | None
    """Median over its windows of work (compute + data) per step."""
    slowdown: float | None
    """Median over its windows of its work vs the other ranks' at the same time, minus 1
    (None: nothing to compare with)."""
    straggler: bool

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, "windows": self.windows,
                "skipped": self.skipped, "last_end": self.last_end,
                "breakdown": None if self.breakdown is None else self.breakdown.to_dict(),
                "work_s": _r(self.work_s), "slowdown": _r(self.slowdown, 4),
                "straggler": self.straggler}


@dataclass(frozen=True, slots=True)
class StragglerReport:
    """What `detect_stragglers` found: straggler episodes, a per-rank table, the evaluations."""

    config: StragglerConfig
    ranks: tuple[RankSummary, ...]
    stragglers: tuple[Straggler, ...]
    evaluations: tuple[Evaluation, ...] = ()
    silent: tuple[int, ...] = ()
    """Ranks that wrote no window, or whose last one ended more than ``window_s`` before the
    latest one (stopped reporting: see the hang analysis)."""
    note: str | None = None
    """Why nothing could be compared (no windows, none after the warm-up, a single rank, too
    short to judge), when so."""

    @property
    def conclusive(self) -> bool:
        """Some evaluation compared two ranks or more: "no straggler" means something."""
        return any(len(e.slowdown) >= 2 for e in self.evaluations)

    @property
    def straggler_ranks(self) -> tuple[int, ...]:
        return tuple(sorted({s.rank for s in self.stragglers}))

    @property
    def straggler_hosts(self) -> tuple[str, ...]:
        return tuple(sorted({s.host for s in self.stragglers if s.host is not None}))

    def to_dict(self, timeline: bool = False) -> dict[str, Any]:
        """JSON-ready; ``timeline`` adds every evaluation (long for a long run)."""
        out: dict[str, Any] = {
            "config": self.config.to_dict(), "note": self.note, "conclusive": self.conclusive,
            "stragglers": [s.to_dict() for s in self.stragglers],
            "straggler_ranks": list(self.straggler_ranks),
            "straggler_hosts": list(self.straggler_hosts),
            "silent": list(self.silent), "ranks": [r.to_dict() for r in self.ranks],
            "evaluated": len(self.evaluations)}
        if timeline:
            out["evaluations"] = [e.to_dict() for e in self.evaluations]
        return out


# --- the pure core -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Series:
    """One rank's usable windows, ordered by end, with their work per step."""

    windows: tuple[TraceWindow, ...]
    ends: tuple[float, ...]
    work: tuple[float, ...]
    """Per window: ``(compute_s + data_s) / steps``."""

    def span(self, lo_excl: float, hi_incl: float) -> tuple[int, int]:
        """Indices of the windows that end in ``(lo_excl, hi_incl]``."""
        return (bisect.bisect_right(self.ends, lo_excl), bisect.bisect_right(self.ends, hi_incl))


@dataclass(frozen=True, slots=True)
class _Paired:
    """One rank's windows, each next to the other ranks' work per step at the same time."""

    series: _Series
    ref: tuple[float | None, ...]
    """Per window: median over the other ranks of their work per step during it."""

    def ratios(self, lo: int, hi: int) -> list[float]:
        return [own / ref - 1.0 for own, ref in zip(self.series.work[lo:hi], self.ref[lo:hi],
                                                     strict=True) if ref is not None and ref > 0]

    def excess(self, lo: int, hi: int) -> list[tuple[float, float]]:
        """``(own - ref, step_s per step)`` per window."""
        return [(own - ref, w.step_s / w.steps) for own, ref, w in
                zip(self.series.work[lo:hi], self.ref[lo:hi], self.series.windows[lo:hi],
                    strict=True) if ref is not None]


def _usable(w: TraceWindow) -> bool:
    numbers = (w.start, w.end, w.step_s, w.collective_s, w.data_s, w.checkpoint_s)
    return (w.steps > 0 and all(math.isfinite(x) for x in numbers) and w.step_s > 0
            and w.end > w.start and w.collective_s >= 0 and w.data_s >= 0
            and w.checkpoint_s >= 0)


def _series(windows: Sequence[TraceWindow], warmup_s: float) -> tuple[_Series, int]:
    """The usable windows after the rank's warm-up, and how many were left out."""
    starts = [w.start for w in windows if math.isfinite(w.start)]
    if not starts:
        return _Series((), (), ()), len(windows)
    cut = min(starts) + warmup_s
    kept = sorted((w for w in windows if _usable(w) and w.start >= cut - _EPS),
                  key=lambda w: w.end)
    return (_Series(tuple(kept), tuple(w.end for w in kept),
                    tuple((w.compute_s + w.data_s) / w.steps for w in kept)),
            len(windows) - len(kept))


class _Rates:
    """One rank's windows as piecewise-constant rates of work, steps and covered time, so that
    its totals over any span (each window counted by its overlap) are two lookups."""

    def __init__(self, s: _Series) -> None:
        self.starts = np.array([w.start for w in s.windows], dtype=np.float64)
        self.ends = np.array(s.ends, dtype=np.float64)
        self.span_s = self.ends - self.starts
        self.totals = np.array([[w.compute_s + w.data_s, float(w.steps), w.end - w.start]
                                for w in s.windows], dtype=np.float64).reshape(-1, 3)
        self.before = np.vstack([np.zeros((1, 3)), np.cumsum(self.totals, axis=0)])

    def upto(self, t: _FloatArray) -> _FloatArray:
        """Work, steps and covered seconds before each time in `t` (shape ``(len(t), 3)``)."""
        k = np.searchsorted(self.ends, t, side="right")  # windows wholly before: k
        last = len(self.ends) - 1
        kk = np.minimum(k, last)
        inside = (k <= last) & (self.starts[kk] < t)
        frac = np.where(inside, (t - self.starts[kk]) / self.span_s[kk], 0.0)
        out: _FloatArray = self.before[k] + frac[:, None] * self.totals[kk]
        return out

    def work_during(self, starts: _FloatArray, ends: _FloatArray) -> _FloatArray:
        """Work per step over each ``[start, end]``; NaN where less than half is covered."""
        tot = self.upto(ends) - self.upto(starts)
        ok = (tot[:, 1] > 0) & (tot[:, 2] >= 0.5 * (ends - starts))
        out: _FloatArray = np.full(len(starts), np.nan)
        out[ok] = tot[ok, 0] / tot[ok, 1]
        return out


def _pair(series: Mapping[int, _Series]) -> dict[int, _Paired]:
    """Each window of each rank with the median of the other ranks' work at the same time."""
    rates = {rank: _Rates(s) for rank, s in series.items() if s.windows}
    out: dict[int, _Paired] = {}
    for rank, own in series.items():
        peers = [r for r in rates if r != rank]
        if not own.windows or not peers:
            out[rank] = _Paired(own, (None,) * len(own.windows))
            continue
        starts = np.array([w.start for w in own.windows], dtype=np.float64)
        ends = np.array(own.ends, dtype=np.float64)
        during = np.column_stack([rates[r].work_during(starts, ends) for r in peers])
        refs: list[float | None] = [None] * len(own.windows)
        seen = ~np.all(np.isnan(during), axis=1)
        if seen.any():
            for i, v in zip(np.flatnonzero(seen), np.nanmedian(during[seen], axis=1),
                            strict=True):
                refs[int(i)] = float(v)
        out[rank] = _Paired(own, tuple(refs))
    return out


def _breakdown(windows: Sequence[TraceWindow]) -> StepBreakdown | None:
    steps = sum(w.steps for w in windows)
    if steps <= 0:
        return None
    return StepBreakdown(
        steps=steps, step_s=sum(w.step_s for w in windows) / steps,
        compute_s=sum(w.compute_s for w in windows) / steps,
        data_s=sum(w.data_s for w in windows) / steps,
        collective_s=sum(w.collective_s for w in windows) / steps,
        checkpoint_s=sum(w.checkpoint_s for w in windows) / steps)


def _median_breakdown(parts: Sequence[StepBreakdown]) -> StepBreakdown:
    """Field-by-field median (the peers' typical rank)."""
    return StepBreakdown(
        steps=round(statistics.median(p.steps for p in parts)),
        step_s=statistics.median(p.step_s for p in parts),
        compute_s=statistics.median(p.compute_s for p in parts),
        data_s=statistics.median(p.data_s for p in parts),
        collective_s=statistics.median(p.collective_s for p in parts),
        checkpoint_s=statistics.median(p.checkpoint_s for p in parts))


@dataclass(frozen=True, slots=True)
class _Level:
    """One rank in one evaluation (trimmed means over its windows in the evaluation window)."""

    work_s: float
    slowdown: float
    excess_s: float
    cost: float


def _level(paired: _Paired, at: float, cfg: StragglerConfig) -> _Level | None:
    """The rank's level in ``(at - window_s, at]``; None when it cannot be compared there."""
    s = paired.series
    lo, hi = s.span(at - cfg.window_s, at)
    inside = s.windows[lo:hi]
    covered = sum(w.end - max(w.start, at - cfg.window_s) for w in inside)
    if covered < _COVER * cfg.window_s or sum(w.steps for w in inside) < cfg.min_steps:
        return None  # too little of the span (starting, stopped, paused) to judge it
    ratios, excess = paired.ratios(lo, hi), paired.excess(lo, hi)
    if not ratios:
        return None
    return _Level(work_s=statistics.median(s.work[lo:hi]),
                  slowdown=_trimmed_mean(ratios, cfg.trim),
                  excess_s=_trimmed_mean([x for x, _ in excess], cfg.trim),
                  cost=_trimmed_mean([x / step for x, step in excess], cfg.trim))


def _trimmed_mean(values: Sequence[float], trim: float) -> float:
    """The mean after dropping ``ceil(trim * n)`` values at each end (the median when that
    leaves nothing): with ``trim=0.3``, three slow windows out of nine do not move it, unlike a
    mean, and it is steadier than a median."""
    ordered = sorted(values)
    k = math.ceil(trim * len(ordered) - _EPS)
    if len(ordered) - 2 * k < 1:
        return statistics.median(ordered)
    kept = ordered[k:len(ordered) - k]
    return sum(kept) / len(kept)


def _stands_out(own: _Level, cfg: StragglerConfig) -> bool:
    """Slower than the other ranks by the configured margins (relative, absolute, cost)."""
    return (own.slowdown >= cfg.min_slowdown and own.excess_s >= cfg.min_excess_s
            and own.cost >= cfg.min_cost)


def _beyond_spread(own: _Level, others: Sequence[_Level], cfg: StragglerConfig) -> bool:
    """``mad_k`` robust deviations above the other ranks' slowdowns (always, with fewer than
    three others: their spread cannot be told from a straggler among them)."""
    if len(others) < _MIN_MAD_PEERS:
        return True
    center = statistics.median(o.slowdown for o in others)
    spread = _MAD_SCALE * statistics.median(abs(o.slowdown - center) for o in others)
    return spread <= 0 or (own.slowdown - center) / spread >= cfg.mad_k


def _grid(series: Mapping[int, _Series], cfg: StragglerConfig) -> list[float]:
    """Evaluation times: every ``every_s`` from the earliest window end past the latest."""
    ends = [s.ends[0] for s in series.values() if s.ends]
    lasts = [s.ends[-1] for s in series.values() if s.ends]
    if not ends:
        return []
    t0, t1 = min(ends), max(lasts)
    count = math.ceil((t1 - t0) / cfg.every_s - _EPS) + 1
    return [t0 + k * cfg.every_s for k in range(count)]


def _evaluate(at: float, paired: Mapping[int, _Paired], cfg: StragglerConfig) -> Evaluation:
    """Each rank's level in ``(at - window_s, at]``, and which ranks stand out."""
    levels = {rank: lv for rank, p in paired.items() if (lv := _level(p, at, cfg)) is not None}
    if len(levels) < 2:
        return Evaluation(at, {}, {}, ())
    flagged = tuple(sorted(
        rank for rank, lv in levels.items()
        if _stands_out(lv, cfg)
        and _beyond_spread(lv, [o for r, o in levels.items() if r != rank], cfg)))
    return Evaluation(at, {r: lv.work_s for r, lv in levels.items()},
                      {r: lv.slowdown for r, lv in levels.items()}, flagged)


@dataclass(frozen=True, slots=True)
class _Run:
    """One straggler episode of one rank: its evaluations from the first flagged one to the
    last flagged one (unflagged ones in between included)."""

    rank: int
    evaluations: tuple[Evaluation, ...]
    declared_at: float
    status: str
    recovered_at: float | None

    @property
    def flagged(self) -> int:
        return sum(self.rank in ev.flagged for ev in self.evaluations)


@dataclass(slots=True)
class _Track:
    """Where one rank stands while the evaluations are walked (mutable, private to `_runs`)."""

    streak: list[Evaluation] = field(default_factory=list)
    """Consecutive flagged evaluations (before it is declared), or the episode so far."""
    declared_at: float | None = None
    quiet: list[Evaluation] = field(default_factory=list)
    """Unflagged evaluations since the last flagged one (while declared)."""


def _runs(evaluations: Sequence[Evaluation], persist: int) -> list[_Run]:
    """Straggler episodes: `persist` flagged evaluations in a row open one, `persist` unflagged
    ones in a row close it (so one noisy evaluation neither declares nor ends a straggler).

    An evaluation that compared fewer than two ranks is no evaluation. One in which the rank
    could not be compared (no windows, too few steps) counts as unflagged; if the closing one
    is such, the episode ends ``silent`` rather than ``recovered``.
    """
    tracks: dict[int, _Track] = {}
    out: list[_Run] = []
    for ev in evaluations:
        if len(ev.slowdown) < 2:
            continue
        for rank in set(ev.flagged) | set(tracks):
            track = tracks.setdefault(rank, _Track())
            if rank in ev.flagged:
                track.streak.extend(track.quiet)
                track.streak.append(ev)
                track.quiet.clear()
                if track.declared_at is None and len(track.streak) == persist:
                    track.declared_at = ev.at
            elif track.declared_at is None:
                del tracks[rank]
            else:
                track.quiet.append(ev)
                if len(track.quiet) == persist:
                    recovered = rank in ev.slowdown
                    out.append(_Run(rank, tuple(track.streak), track.declared_at,
                                    "recovered" if recovered else "silent",
                                    track.quiet[0].at if recovered else None))
                    del tracks[rank]
    for rank, track in tracks.items():
        if track.declared_at is not None:
            out.append(_Run(rank, tuple(track.streak), track.declared_at, "ongoing", None))
    return sorted(out, key=lambda r: (r.evaluations[0].at, r.rank))


def _episode(run: _Run, series: Mapping[int, _Series], cfg: StragglerConfig,
             hosts: Mapping[int, str]) -> Straggler | None:
    """The figures of one episode, over the windows of its time."""
    first, last = run.evaluations[0].at, run.evaluations[-1].at
    # From about when it started (its level crosses the threshold once about half of the
    # windows behind an evaluation are slow), or the whole first window if that holds none.
    for lo_t in (first - cfg.window_s / 2, first - cfg.window_s):
        parts: dict[int, StepBreakdown] = {}
        for rank, s in series.items():
            lo, hi = s.span(lo_t, last)
            part = _breakdown(s.windows[lo:hi])
            if part is not None:
                parts[rank] = part
        own = parts.pop(run.rank, None)
        if own is not None and parts:
            break
    else:
        return None
    peers = _median_breakdown(list(parts.values()))
    excess = own.work_s - peers.work_s
    step_s = statistics.median([own.step_s, *(p.step_s for p in parts.values())])
    cost = min(1.0, max(0.0, excess / step_s))
    without = step_s - max(0.0, excess)
    lost = 1.0 / without - 1.0 / step_s if without > 0 else None
    extra_compute = own.compute_s - peers.compute_s
    extra_data = own.data_s - peers.data_s
    slowdowns = [ev.slowdown[run.rank] for ev in run.evaluations if run.rank in ev.slowdown]
    return Straggler(
        rank=run.rank, host=hosts.get(run.rank), first_flagged=first,
        declared_at=run.declared_at, last_flagged=last,
        status=run.status, recovered_at=run.recovered_at, evaluations=run.flagged,
        slowdown=statistics.median(slowdowns) if slowdowns else 0.0,
        own=own, peers=peers, cause=CAUSE_DATA if extra_data > extra_compute else CAUSE_COMPUTE,
        excess_s=excess, cost=cost, steps_per_s=1.0 / step_s, steps_per_s_lost=lost)


def _summaries(windows_by_rank: Mapping[int, Sequence[TraceWindow]],
               paired: Mapping[int, _Paired], skipped: Mapping[int, int],
               stragglers: Sequence[Straggler], hosts: Mapping[int, str]) -> list[RankSummary]:
    flagged = {s.rank for s in stragglers}
    out: list[RankSummary] = []
    for rank in sorted(windows_by_rank):
        p = paired[rank]
        ends = [w.end for w in windows_by_rank[rank] if math.isfinite(w.end)]
        ratios = p.ratios(0, len(p.series.windows))
        out.append(RankSummary(
            rank=rank, host=hosts.get(rank), windows=len(p.series.windows),
            skipped=skipped[rank], last_end=max(ends) if ends else None,
            breakdown=_breakdown(p.series.windows),
            work_s=statistics.median(p.series.work) if p.series.work else None,
            slowdown=statistics.median(ratios) if ratios else None,
            straggler=rank in flagged))
    return out


def _why_nothing(windows_by_rank: Mapping[int, Sequence[TraceWindow]],
                 reporting: Sequence[int], cfg: StragglerConfig) -> str:
    """Why fewer than two ranks can be compared: no windows at all, none with steps after the
    warm-up (a short attempt), or a single rank (no peers)."""
    written = sum(len(ws) for ws in windows_by_rank.values())
    if written == 0:
        return "no trace windows: nothing to compare (the ranks wrote none: no SDK, or " \
            "TRAINGUARD_TRACE=0)"
    if not reporting:
        ranks = sum(1 for ws in windows_by_rank.values() if ws)
        return (f"no rank has trace windows with steps after its first {cfg.warmup_s:g} s "
                f"(warm-up): {written} window(s) from {ranks} rank(s), all in the warm-up or "
                "without steps: too short to judge")
    return (f"only rank {reporting[0]} has usable trace windows (with steps, after "
            f"{cfg.warmup_s:g} s of warm-up): a straggler needs peers to compare with")


def detect_stragglers(windows_by_rank: Mapping[int, Sequence[TraceWindow]],
                      cfg: StragglerConfig | None = None,
                      hosts: Mapping[int, str] | None = None) -> StragglerReport:
    """The persistent stragglers among the ranks of one job (one attempt), from their windows.

    1. Per rank, keep the windows with steps (one without is a hang or a pause) that start
       after its first ``warmup_s`` seconds. Its work per step in a window is
       ``(compute_s + data_s) / steps``: checkpoint saves and collectives are not work.
    2. Pair every window with the other ranks' work per step over the same time (each of
       their windows weighted by its overlap); the window's reference is the median of those
       (leave-one-out: with two ranks, the other rank). ``work / ref - 1`` is its slowdown.
       Comparing at the same time cancels what every rank feels at once (machine load, a
       checkpoint save, a slow step everyone waits for).
    3. Every ``every_s`` from the earliest window end, judge each rank on its windows ending
       in the last ``window_s`` (once they cover half of that span and hold ``min_steps``
       steps): trimmed means of its windows' slowdown, extra seconds per step and
       their share of the step time, dropping the ``trim`` share at each end, so that a few
       slow windows do not count. It is flagged when all three reach ``min_slowdown``,
       ``min_excess_s`` and ``min_cost`` and, with three or more other ranks, its slowdown is
       ``mad_k`` robust deviations (scaled MAD) above theirs.
    4. ``persist`` flagged evaluations in a row declare a straggler, from the first of them;
       ``persist`` unflagged ones in a row end the episode (``recovered``, or ``silent`` when
       it could no longer be compared); otherwise it is ``ongoing``.
    5. Per episode: its breakdown per step and the other ranks' median breakdown over the same
       windows; the cause is the larger of its extra compute and its extra data time; the cost
       is its extra work over the step time (everyone waits for it), and the steps per second
       the job would gain without it.
    """
    cfg = StragglerConfig() if cfg is None else cfg
    hosts = {} if hosts is None else hosts
    series: dict[int, _Series] = {}
    skipped: dict[int, int] = {}
    for rank, windows in windows_by_rank.items():
        series[rank], skipped[rank] = _series(windows, cfg.warmup_s)
    paired = _pair(series)
    reporting = [rank for rank, s in series.items() if s.windows]
    note: str | None = None
    evaluations: list[Evaluation] = []
    stragglers: list[Straggler] = []
    if len(reporting) < 2:
        note = _why_nothing(windows_by_rank, reporting, cfg)
    else:
        evaluations = [_evaluate(at, paired, cfg) for at in _grid(series, cfg)]
        for run in _runs(evaluations, cfg.persist):
            episode = _episode(run, series, cfg, hosts)
            if episode is not None:
                stragglers.append(episode)
        if not any(len(e.slowdown) >= 2 for e in evaluations):
            note = (f"no {cfg.window_s:g}-s evaluation window held two ranks with "
                    f"{cfg.min_steps} steps over half of it: too short to judge")
    ranks = _summaries(windows_by_rank, paired, skipped, stragglers, hosts)
    latest = max((r.last_end for r in ranks if r.last_end is not None), default=None)
    silent = tuple(r.rank for r in ranks if latest is not None
                   and (r.last_end is None or r.last_end < latest - cfg.window_s))
    return StragglerReport(config=cfg, ranks=tuple(ranks), stragglers=tuple(stragglers),
                           evaluations=tuple(evaluations), silent=silent, note=note)
