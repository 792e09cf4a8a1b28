"""Goodput and ETTR: how much of a run's wall time trained the model, and where the rest went.

ETTR (effective training time ratio) is productive time over wall time (Meta, "Revisiting
Reliability in Large-Scale Machine Learning Research Clusters", 2024). Outline of :func:`goodput`
for one run (a session and its attempts):

1. wall = end of the last attempt - start of the first (queue time before the first launch is
   excluded; ``include_queue=True`` adds session start -> first attempt start as ``queue_s``). An
   attempt still running is left out, unless ``now`` is given: then it ends at ``now``.
2. per attempt, the failure time ``f`` is ``detail["failed_at"]`` for a failed or cancelled attempt
   (else ``ended``); ``teardown = ended - f`` (0 without ``failed_at``).
3. startup = the attempt's startup phases, in recorded order, each cut to what is left of
   ``[started, f]`` (an attempt that failed while starting spent all of it starting). The training
   window is ``[started + startup, f]``, of length ``W``.
4. for a failed or cancelled attempt the tail of the window is carved, from the end:
   a. detection = ``detail["detection_s"]`` (0 when absent), cut to ``W``;
   b. hang = ``detail["hang_for_s"]`` when ``detail["failure"]["kind"] == "hang"`` (the time
      without progress when the hang was declared; 0 when absent), cut to what is left;
   c. lost progress = from the last good checkpoint the attempt saved (its ``created``, the end of
      the save) to the start of the hang/detection tail; the whole rest of the window when it
      saved none. This assumes the next attempt resumes from that checkpoint. When the next
      attempt restored a memory snapshot instead (its ``detail["restore"]``), the lost progress
      is at most its ``steps_lost`` times this attempt's mean step time, and is counted under
      that restore's source (``Badput.lost_progress_by_source``).
5. checkpoint blocking = the stall (``blocking_s``, else ``save_s``) of the attempt's checkpoints,
   cut to what is left of the window; in a failed attempt, saves after the last good checkpoint
   are inside the lost progress and not counted twice.
6. productive = W - detection - hang - lost progress - checkpoint blocking (never negative).
7. relaunch wait = next attempt's ``started`` - this attempt's ``ended``, clamped at 0.
8. other = wall - productive - every badput above. It is 0 for attempts that follow each other
   and is clamped at 0: attempts that overlap in time (only possible in imported history) would
   make it negative, and then productive + badput exceeds wall by the overlap.
   Relaunches' startup is also split by how they started (``Badput.restart``): ``warm`` when
   the SDK's imports phase took at most a quarter of the first attempt's, else ``cold``
   (:func:`~trainguard.analytics.runs.start_kind`). Both splits are views of the badput above,
   not added to it.
9. host checks: the run's own pre-flight and stop-time checks (:mod:`.checktime`, merged so
   that overlapping checks count once) are badput of their own kind. Check time before the first
   attempt or after the last lengthens the wall (which then runs from the first check or launch
   to the last check or attempt end; the queue ends where it starts); check time inside a
   relaunch gap comes out of relaunch wait, inside an attempt's training window out of its
   productive (then unknown) time, inside its teardown out of teardown, each at most what that
   part had. Checks after the start of an attempt left out (still running) are left out too.

So ``productive_s + badput.total_s + unknown_s == wall_s`` up to float rounding whenever
attempts do not overlap, and ``ettr = productive_s / wall_s`` (None for a zero wall).

A script that does not use the SDK (:func:`trainguard.analytics.runs.without_sdk`) reports no
startup phase and no step: after the supervisor's ``launch`` phase, its imports, rendezvous and
first step cannot be told from training. That part of its window (after detection and hang,
which the supervisor measures) is ``unknown_s``, not productive, and no lost progress or
checkpoint stall is assigned to it. A run with unknown time has no ETTR (None); the ETTR of
several runs (:func:`combine`) covers only the runs whose time is fully known, and
``ettr_wall_s`` says how much wall time that is.

    >>> g = goodput(run)                        # doctest: +SKIP
    >>> round(g.ettr, 3), g.badput.lost_progress_s    # doctest: +SKIP
    (0.912, 420.0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from trainguard.analytics.checktime import CheckCarve, Interval, before, overlap, total
from trainguard.analytics.runs import (
    CANCELLED,
    FAILED,
    RunView,
    detail_number,
    failure_info,
    failure_time,
    restore_info,
    stall_s,
    start_kind,
    startup_phases,
    without_sdk,
)
from trainguard.store import AttemptRecord


@dataclass(frozen=True, slots=True)
class Badput:
    """Wall time that did not train the model, by cause (seconds)."""

    startup: Mapping[str, float] = field(default_factory=dict)
    """Per startup phase name (``launch``, ``imports``, ``dist_init``...), summed over attempts."""
    checkpoint_blocking_s: float = 0.0
    lost_progress_s: float = 0.0
    """Training since the last checkpoint of a failed or cancelled attempt: redone later."""
    detection_s: float = 0.0
    teardown_s: float = 0.0
    """Failure seen -> every rank stopped."""
    relaunch_wait_s: float = 0.0
    """One attempt ended -> the next started (backoff, scheduling)."""
    hang_s: float = 0.0
    other_s: float = 0.0
    """The rest of the wall time; clamped at 0 (see the module outline, step 8)."""
    queue_s: float = 0.0
    """Session start -> first launch (or first check), only with ``include_queue``."""
    host_checks_s: float = 0.0
    """The run's own pre-flight and stop-time host checks (outline step 9)."""
    lost_progress_by_source: Mapping[str, float] = field(default_factory=dict)
    """``lost_progress_s`` by where the next attempt restored from (memory, buddy, mixed,
    disk, none): a view of it, not added to the total."""
    restart: Mapping[str, float] = field(default_factory=dict)
    """Relaunches' startup by ``warm``/``cold`` start: a view of ``startup``, not added."""

    @property
    def startup_s(self) -> float:
        return sum(self.startup.values())

    @property
    def total_s(self) -> float:
        return (self.startup_s + self.checkpoint_blocking_s + self.lost_progress_s
                + self.detection_s + self.teardown_s + self.relaunch_wait_s + self.hang_s
                + self.other_s + self.queue_s + self.host_checks_s)

    def to_dict(self) -> dict[str, object]:
        return {"startup": dict(self.startup), "startup_s": self.startup_s,
                "checkpoint_blocking_s": self.checkpoint_blocking_s,
                "lost_progress_s": self.lost_progress_s, "detection_s": self.detection_s,
                "teardown_s": self.teardown_s, "relaunch_wait_s": self.relaunch_wait_s,
                "hang_s": self.hang_s, "other_s": self.other_s, "queue_s": self.queue_s,
                "host_checks_s": self.host_checks_s, "total_s": self.total_s,
                "lost_progress_by_source": dict(self.lost_progress_by_source),
                "restart": dict(self.restart)}


@dataclass(frozen=True, slots=True)
class Goodput:
    """Productive time of one run (or a fleet of runs) against its wall time.

        >>> g = Goodput(wall_s=100.0, productive_s=90.0, ettr=0.9, badput=Badput(other_s=10.0))
        >>> g.productive_s + g.badput.total_s + g.unknown_s == g.wall_s
        True
    """

    wall_s: float
    productive_s: float
    ettr: float | None
    """productive / wall over the runs whose time is fully known; None when that wall is 0
    (nothing finished yet, or every run ran without the SDK)."""
    badput: Badput
    unknown_s: float = 0.0
    """Wall time that cannot be split without the SDK (see the module docstring)."""
    ettr_wall_s: float | None = None
    """Wall time of the runs the ETTR covers; None: all of ``wall_s``."""
    ettr_productive_s: float | None = None
    """Productive time of the runs the ETTR covers; None: all of ``productive_s``."""

    @property
    def covered_wall_s(self) -> float:
        return self.wall_s if self.ettr_wall_s is None else self.ettr_wall_s

    @property
    def covered_productive_s(self) -> float:
        return self.productive_s if self.ettr_productive_s is None else self.ettr_productive_s

    def to_dict(self) -> dict[str, object]:
        return {"wall_s": self.wall_s, "productive_s": self.productive_s, "ettr": self.ettr,
                "badput": self.badput.to_dict(), "unknown_s": self.unknown_s,
                "ettr_wall_s": self.covered_wall_s}


@dataclass(frozen=True, slots=True)
class AttemptTime:
    """One attempt's time split by the module outline, steps 2-6 (seconds)."""

    attempt_id: int
    startup: Mapping[str, float]
    window_s: float
    productive_s: float
    checkpoint_blocking_s: float
    lost_progress_s: float
    detection_s: float
    hang_s: float
    teardown_s: float
    unknown_s: float = 0.0
    """The window's time that cannot be split without the SDK."""
    lost_source: str = "disk"
    """Where the lost progress was restored from by the next attempt."""


def _memory_lost_s(attempt: AttemptRecord, following: Mapping[str, Any], window_s: float,
                   lost_s: float) -> float:
    """Outline step 4c for a next attempt that restored a memory snapshot: at most its
    ``steps_lost`` times this attempt's mean step time (``lost_s`` when unknown)."""
    steps_lost = following.get("steps_lost")
    last = (attempt.detail or {}).get("last_step")
    own = restore_info(attempt).get("step")
    first = own if isinstance(own, int) else (attempt.resumed_from_step or 0)
    if not isinstance(steps_lost, int) or not isinstance(last, int) or last <= first:
        return lost_s
    return min(lost_s, steps_lost * window_s / (last - first))


def attempt_time(run: RunView, attempt: AttemptRecord, now: float | None = None,
                 following: Mapping[str, Any] | None = None) -> AttemptTime:
    """Split one attempt's time (outline steps 2-6); a running attempt ends at ``now``.
    ``following``: the next attempt's ``restore`` record (outline step 4c)."""
    end = attempt.ended if attempt.ended is not None else max(now or attempt.started,
                                                                attempt.started)
    failed = attempt.status in (FAILED, CANCELLED) and attempt.ended is not None
    fail_t = failure_time(attempt) if failed else None
    f = end if fail_t is None else fail_t
    # 3. startup phases in order, each cut to what is left of [started, f]
    left = max(0.0, f - attempt.started)
    startup: dict[str, float] = {}
    for name, seconds in startup_phases(attempt).items():
        take = min(seconds, left)
        startup[name] = startup.get(name, 0.0) + take
        left = max(0.0, left - take)
    window_start, window = f - left, left
    detection = hang = lost = 0.0
    ckpts = run.checkpoints_of(attempt)
    if without_sdk(attempt):
        return _without_sdk(attempt, startup, window, left, failed, end - f)
    if failed:
        # 4. carve the tail of the window: detection, hang, lost progress
        detection, hang, left = _detection_and_hang(attempt, left)
        lost_end = window_start + left
        saved = [c.created for c in ckpts if c.ok and c.created <= lost_end]
        last_saved = max(window_start, max(saved, default=window_start))
        lost = lost_end - last_saved
        source = str((following or {}).get("source") or "disk")
        if source in ("memory", "buddy", "mixed"):
            lost = _memory_lost_s(attempt, following or {}, window, lost)
            last_saved = lost_end - lost
        left = max(0.0, left - lost)
        ckpts = tuple(c for c in ckpts if c.created <= last_saved)
    # 5. checkpoint stalls, cut to what is left
    blocking = min(sum(stall_s(c) for c in ckpts), left)
    left = max(0.0, left - blocking)
    return AttemptTime(
        attempt_id=attempt.id, startup=startup, window_s=window, productive_s=left,
        checkpoint_blocking_s=blocking, lost_progress_s=lost, detection_s=detection,
        hang_s=hang, teardown_s=end - f,
        lost_source=str((following or {}).get("source") or "disk") if failed else "disk")


def _detection_and_hang(attempt: AttemptRecord, left: float) -> tuple[float, float, float]:
    """A failed attempt's detection time and hang, carved off the end of what is ``left``:
    ``(detection, hang, left after both)``."""
    detection = min(max(0.0, detail_number(attempt, "detection_s") or 0.0), left)
    left = max(0.0, left - detection)
    hang = 0.0
    if failure_info(attempt).get("kind") == "hang":
        hang = min(max(0.0, detail_number(attempt, "hang_for_s") or 0.0), left)
        left = max(0.0, left - hang)
    return detection, hang, left


def _without_sdk(attempt: AttemptRecord, startup: dict[str, float], window: float, left: float,
                 failed: bool, teardown: float) -> AttemptTime:
    """Without the SDK only what the supervisor saw is known: detection and hang come off the
    end of the window as usual; the rest is unknown (neither productive nor lost)."""
    detection, hang, left = _detection_and_hang(attempt, left) if failed else (0.0, 0.0, left)
    return AttemptTime(
        attempt_id=attempt.id, startup=startup, window_s=window, productive_s=0.0,
        checkpoint_blocking_s=0.0, lost_progress_s=0.0, detection_s=detection, hang_s=hang,
        teardown_s=teardown, unknown_s=left)


def goodput(run: RunView, *, include_queue: bool = False, now: float | None = None) -> Goodput:
    """ETTR and badput of one run (see the module outline)."""
    attempts = [a for a in run.attempts if a.ended is not None or now is not None]
    if not attempts:
        return Goodput(0.0, 0.0, None, Badput())
    nexts = [restore_info(b) for b in attempts[1:]] + [{}]
    times = [attempt_time(run, a, now, n) for a, n in zip(attempts, nexts, strict=True)]
    ends = [a.ended if a.ended is not None else max(float(now or 0.0), a.started)
            for a in attempts]
    first, last = min(a.started for a in attempts), max(ends)
    kept = {a.id for a in attempts}
    left_out = [a.started for a in run.attempts if a.id not in kept]
    checks = before(run.checks, min(left_out, default=None))  # 9.
    span_start = min(first, checks[0][0]) if checks else first
    wall = max(last, checks[-1][1] if checks else last) - span_start
    queue = max(0.0, span_start - run.session.started) if include_queue else 0.0
    wall += queue
    # 7. gaps between consecutive attempts (by launch index)
    gaps = [(end, nxt.started) for nxt, end in zip(attempts[1:], ends[:-1], strict=True)
            if nxt.started > end]
    relaunch = sum(b - a for a, b in gaps)
    carve = _carve_checks(checks, times, ends, gaps, relaunch, (first, last))
    startup: dict[str, float] = {}
    for t in times:
        for name, seconds in t.startup.items():
            startup[name] = startup.get(name, 0.0) + seconds
    productive = sum(t.productive_s for t in times) - carve.productive_s
    unknown = sum(t.unknown_s for t in times) - carve.unknown_s
    badput = Badput(
        startup=startup,
        checkpoint_blocking_s=sum(t.checkpoint_blocking_s for t in times),
        lost_progress_s=sum(t.lost_progress_s for t in times),
        detection_s=sum(t.detection_s for t in times),
        teardown_s=sum(t.teardown_s for t in times) - carve.teardown_s,
        relaunch_wait_s=relaunch - carve.relaunch_wait_s,
        hang_s=sum(t.hang_s for t in times),
        queue_s=queue,
        host_checks_s=carve.total_s,
        lost_progress_by_source=_by((t.lost_source, t.lost_progress_s) for t in times),
        restart=_restart(attempts, times),
    )
    other = max(0.0, wall - productive - unknown - badput.total_s)  # 8.
    known = unknown == 0
    return Goodput(wall, productive, productive / wall if wall > 0 and known else None,
                   replace(badput, other_s=other), unknown_s=unknown,
                   ettr_wall_s=None if known else 0.0, ettr_productive_s=None if known else 0.0)


def _by(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, seconds in pairs:
        if seconds > 0:
            out[key] = out.get(key, 0.0) + seconds
    return out


def _restart(attempts: Sequence[AttemptRecord], times: Sequence[AttemptTime]) -> dict[str, float]:
    """Relaunches' startup by warm or cold start (outline step 8's note)."""
    if not attempts:
        return {}
    cold = startup_phases(attempts[0]).get("imports")
    return _by((start_kind(a, cold), sum(t.startup.values()))
               for a, t in zip(attempts[1:], times[1:], strict=True))


def _carve_checks(checks: Sequence[Interval], times: Sequence[AttemptTime],
                  ends: Sequence[float], gaps: Sequence[Interval], relaunch: float,
                  span: Interval) -> CheckCarve:
    """Where the run's check time falls (outline step 9), each part at most what it had."""
    if not checks:
        return CheckCarve()
    productive = unknown = teardown = 0.0
    for t, end in zip(times, ends, strict=True):
        f = end - t.teardown_s
        in_window = overlap(checks, f - t.window_s, f)
        took = min(in_window, t.productive_s)
        productive += took
        unknown += min(in_window - took, t.unknown_s)
        teardown += min(overlap(checks, f, end), t.teardown_s)
    in_gaps = min(sum(overlap(checks, a, b) for a, b in gaps), relaunch)
    return CheckCarve(outside_s=total(checks) - overlap(checks, *span),
                      productive_s=productive, unknown_s=unknown, teardown_s=teardown,
                      relaunch_wait_s=in_gaps)


def fleet_goodput(runs: Iterable[RunView], *, include_queue: bool = False,
                  now: float | None = None) -> Goodput:
    """Every run's goodput summed: fleet ETTR = sum productive / sum wall."""
    return combine(goodput(r, include_queue=include_queue, now=now) for r in runs)


def combine(parts: Iterable[Goodput]) -> Goodput:
    """Sum goodputs field by field (walls add up: runs are counted side by side); the ETTR is
    over the covered parts (the runs whose time is fully known)."""
    wall = productive = unknown = covered_wall = covered_productive = 0.0
    startup: dict[str, float] = {}
    by_source: list[tuple[str, float]] = []
    restart: list[tuple[str, float]] = []
    sums = dict.fromkeys(("checkpoint_blocking_s", "lost_progress_s", "detection_s",
                          "teardown_s", "relaunch_wait_s", "hang_s", "other_s", "queue_s",
                          "host_checks_s"), 0.0)
    for g in parts:
        wall += g.wall_s
        productive += g.productive_s
        unknown += g.unknown_s
        covered_wall += g.covered_wall_s
        covered_productive += g.covered_productive_s
        for name, seconds in g.badput.startup.items():
            startup[name] = startup.get(name, 0.0) + seconds
        for key in sums:
            sums[key] += getattr(g.badput, key)
        by_source += g.badput.lost_progress_by_source.items()
        restart += g.badput.restart.items()
    return Goodput(wall, productive,
                   covered_productive / covered_wall if covered_wall > 0 else None,
                   Badput(startup=startup, lost_progress_by_source=_by(by_source),
                          restart=_by(restart), **sums),
                   unknown_s=unknown,
                   ettr_wall_s=covered_wall, ettr_productive_s=covered_productive)


__all__ = ["AttemptTime", "Badput", "Goodput", "attempt_time", "combine", "fleet_goodput",
           "goodput"]
