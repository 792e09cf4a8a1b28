"""When a running attempt is hung: evidence that every rank is alive and advancing.

A rank that reports through the SDK sends heartbeats (its events): its own silence is what
counts. A rank without the SDK has no heartbeat, and its own output is *not* evidence: an
ordinary script prints warnings on every rank at start-up and then logs on rank 0 only, so
"rank 1 has been quiet" says nothing. What is judged instead, from a frozen
:class:`LivenessSnapshot` (built each poll by the attempt from the ranks' output and their
``/proc`` samples, read on this machine or sent by each host's agent):

1. **A stopped rank** (every process of its group or one of them in state ``T``/``t``,
   SIGSTOP or a tracer) continuously for longer than ``hang_timeout_s`` is hung, whatever the
   others print, and it is the culprit. This holds for SDK ranks too, and before a rank's first
   output: a stopped process is not starting, so the start-up allowance does not apply.
2. **An SDK rank** silent (no event) for longer than ``hang_timeout_s`` (``startup_timeout_s``
   before its first event) is hung, as before.
3. **The ranks without the SDK** are judged together. Progress is output from *any* rank (or
   an SDK event of any rank). When the whole job has been silent longer than the limit
   (``hang_timeout_s``, or ``startup_timeout_s`` while no rank has printed anything yet):

   - if some live rank used (almost) no CPU over the last ``hang_timeout_s`` (below
     ``min_cpu_rate`` of one core: a rank blocked in a gloo collective, or sleeping, is
     asleep), or the CPU time of some rank is not known (no ``/proc`` evidence: a remote
     backend without agents, an agent that does not report it), it is a hang;
   - if every live rank kept burning CPU, the job may be loading, compiling or computing
     silently (a rank importing torch on a busy host takes many seconds): it gets the start-up
     allowance, ``startup_timeout_s`` of silence, before it is called hung (NCCL spin-waits in
     a hung collective burn CPU too, so burning CPU is never proof of progress for ever).

   No culprit is named by this rule: which rank is to blame comes from evidence that singles
   it out (a stopped process, a Python stack that differs, the collective states), which the
   hang diagnosis collects once the hang is declared.

Every function here is pure; time comes in as ``now`` and the samples carry their own times.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

STALE_S = 5.0
"""A rank's newest ``/proc`` sample older than this says nothing about its CPU now."""


@dataclass(frozen=True, slots=True)
class ProcSample:
    """One rank's processes as ``/proc`` on its host showed them at ``at``.

    >>> ProcSample(rank=1, at=12.5, state="stopped", cpu_s=3.2)
    ProcSample(rank=1, at=12.5, state='stopped', cpu_s=3.2)
    """

    rank: int
    at: float
    """When it was taken (the controller's clock: agents' samples are timed on receipt)."""
    state: str
    """``running``, ``stopped``, ``disk-sleep``, ``zombie`` or ``exited``
    (:func:`trainguard.trace.collect.process_state`'s words)."""
    cpu_s: float | None = None
    """CPU seconds used so far by the rank's process group (user + system, reaped children
    included); None where only the state is known."""


@dataclass(frozen=True, slots=True)
class LivenessLimits:
    """The thresholds of :func:`judge` (from the job spec)."""

    hang_timeout_s: float
    """Silence (or a stopped rank) longer than this is a hang."""
    startup_timeout_s: float
    """The limit before anything was heard at all."""
    min_cpu_rate: float = 0.01
    """A rank using less CPU than this (cores) over the window is not advancing."""

    def __post_init__(self) -> None:
        for key, value in (("hang_timeout_s", self.hang_timeout_s),
                           ("startup_timeout_s", self.startup_timeout_s),
                           ("min_cpu_rate", self.min_cpu_rate)):
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"liveness.{key} must be > 0")


@dataclass(frozen=True, slots=True)
class RankLiveness:
    """One running rank, as :func:`judge` sees it."""

    rank: int
    node: str
    sdk: bool = False
    """It reports through the SDK: its own events are its heartbeat."""
    last_progress: float = 0.0
    """Its own last SDK event (launch time before any); used for SDK ranks only."""
    progressed: bool = False
    stopped_since: float | None = None
    """Since when it has been seen stopped without a break (None: not stopped)."""
    cpu_rate: float | None = None
    """CPU cores it used over the last ``hang_timeout_s``; None: not known for that window."""


@dataclass(frozen=True, slots=True)
class LivenessSnapshot:
    """The attempt's ranks still running (not finished), at ``now``."""

    now: float
    launched: float
    last_output: float | None
    """The newest output line or SDK event of any rank (None: nothing yet)."""
    ranks: tuple[RankLiveness, ...]


@dataclass(frozen=True, slots=True)
class HangVerdict:
    """A hang, with why; ``culprits`` only where the evidence singles ranks out."""

    silent_s: float
    """How long the evidence has said "no progress" (the hang's age when declared)."""
    reason: str
    culprits: tuple[int, ...] = ()


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(map(str, ranks))


def judge(snap: LivenessSnapshot, limits: LivenessLimits) -> HangVerdict | None:
    """The hang the snapshot shows, or None (the rule is the module docstring's)."""
    now, hang = snap.now, limits.hang_timeout_s
    stopped = sorted((r for r in snap.ranks if r.stopped_since is not None
                      and now - r.stopped_since > hang), key=lambda r: r.stopped_since or 0.0)
    if stopped:
        first = stopped[0]
        return HangVerdict(now - (first.stopped_since or now),
                           f"rank {first.rank} on {first.node} is stopped (state T) for "
                           f"{now - (first.stopped_since or now):.0f} s",
                           tuple(r.rank for r in stopped))
    for r in snap.ranks:
        if r.sdk:
            limit = hang if r.progressed else limits.startup_timeout_s
            if now - r.last_progress > limit:
                return HangVerdict(now - r.last_progress, f"rank {r.rank} on {r.node} sent "
                                   f"no SDK event for {now - r.last_progress:.0f} s")
    plain = [r for r in snap.ranks if not r.sdk]
    if not plain:
        return None
    limit = hang if snap.last_output is not None else limits.startup_timeout_s
    silent = now - (snap.last_output if snap.last_output is not None else snap.launched)
    if silent <= limit:
        return None
    heard = "any rank" if snap.last_output is not None else "any rank since launch"
    flat = [r.rank for r in plain if r.cpu_rate is not None and r.cpu_rate < limits.min_cpu_rate]
    blind = [r.rank for r in plain if r.cpu_rate is None]
    if flat:
        return HangVerdict(silent, f"no output from {heard} for {silent:.0f} s and rank(s) "
                           f"{_ranks(flat)} used no CPU in the last {hang:g} s")
    if blind:
        return HangVerdict(silent, f"no output from {heard} for {silent:.0f} s (no CPU "
                           f"evidence for rank(s) {_ranks(blind)})")
    if silent > max(limit, limits.startup_timeout_s):
        return HangVerdict(silent, f"no output from {heard} for {silent:.0f} s although every "
                           "rank kept using CPU (spinning in a collective?)")
    return None


class LivenessTracker:
    """The ``/proc`` history of an attempt's ranks, reduced to what :func:`judge` needs: since
    when each rank has been stopped, and its CPU rate over a sliding window.

        tracker = LivenessTracker(window_s=300.0)
        tracker.observe(ProcSample(0, at=10.0, state="running", cpu_s=1.5))
        tracker.cpu_rate(0, now=320.0)   # None until the window is covered
    """

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._hist: dict[int, deque[tuple[float, float]]] = {}
        self._raw: dict[int, float] = {}
        self._acc: dict[int, float] = {}
        self._stopped_since: dict[int, float] = {}
        self._states: dict[int, str] = {}
        self._last_at: dict[int, float] = {}

    def observe(self, s: ProcSample) -> None:
        """Take one sample (not newer than the rank's newest one: ignored)."""
        if s.at <= self._last_at.get(s.rank, -math.inf):
            return
        self._last_at[s.rank] = s.at
        if s.cpu_s is not None and math.isfinite(s.cpu_s):
            hist = self._hist.setdefault(s.rank, deque())
            # CPU time only grows, but a group member that exits unreaped takes its share
            # away: count increases only, so the counter is monotone.
            prev = self._raw.get(s.rank)
            acc = self._acc.get(s.rank, 0.0) + (max(0.0, s.cpu_s - prev) if prev is not None
                                                else 0.0)
            self._raw[s.rank], self._acc[s.rank] = s.cpu_s, acc
            hist.append((s.at, acc))
            # Keep the newest sample at or before the window's start, and all after it.
            while len(hist) > 2 and hist[1][0] <= s.at - self.window_s:
                hist.popleft()
        self._states[s.rank] = s.state
        if s.state == "stopped":
            self._stopped_since.setdefault(s.rank, s.at)
        else:
            self._stopped_since.pop(s.rank, None)

    def state(self, rank: int) -> str | None:
        return self._states.get(rank)

    def stopped_since(self, rank: int) -> float | None:
        return self._stopped_since.get(rank)

    def cpu_rate(self, rank: int, now: float) -> float | None:
        """Cores used over ``[now - window_s, now]``, or over the part of it the samples
        cover when that is at least half of it (the first samples come a moment after the
        launch); None when they cover less, or the newest one is stale."""
        hist = self._hist.get(rank)
        if not hist or now - hist[-1][0] > STALE_S:
            return None
        start = now - self.window_s
        base = hist[0]
        for t, acc in hist:
            if t > start:
                break
            base = (t, acc)
        last_t, last_acc = hist[-1]
        if last_t - base[0] < self.window_s / 2:
            return None
        return (last_acc - base[1]) / (last_t - base[0])


def snapshot(now: float, launched: float, last_output: float | None,
             ranks: Iterable[RankLiveness], tracker: LivenessTracker) -> LivenessSnapshot:
    """``ranks`` (the running ones) completed with the tracker's evidence at ``now``."""
    return LivenessSnapshot(now, launched, last_output, tuple(
        RankLiveness(r.rank, r.node, r.sdk, r.last_progress, r.progressed,
                     tracker.stopped_since(r.rank), tracker.cpu_rate(r.rank, now))
        for r in ranks))


__all__ = ["STALE_S", "HangVerdict", "LivenessLimits", "LivenessSnapshot", "LivenessTracker",
           "ProcSample", "RankLiveness", "judge", "snapshot"]
