"""Runs as the analytics read them: a session with its attempts and checkpoints, plus the small
accessors every metric shares (when an attempt failed, how long it took to start, what a checkpoint
stalled training for, quantiles).

    >>> from trainguard.store import Store
    >>> with Store.open(":memory:") as store:
    ...     sid = store.create_session("llama", backend="local", started=0.0)
    ...     aid = store.create_attempt(sid, index=0, nodes=["n1"], started=5.0)
    ...     store.finish_attempt(aid, ended=65.0, status="succeeded")
    ...     [(r.session.name, len(r.attempts)) for r in load_runs(store)]
    [('llama', 1)]

Conventions shared by the analytics (each metric module documents its own formulas):

1. times are unix seconds; an attempt still ``running`` has ``ended`` None and is left out of
   every duration unless a metric says otherwise;
2. the failure time of an attempt is ``detail["failed_at"]`` (when the supervisor saw the failure,
   before it stopped the other ranks) clamped to ``[started, ended]``, else ``ended``;
3. the startup of an attempt is the sum of its ``startup_phases`` (``launch``, ``imports``,
   ``dist_init``, ``ckpt_load``, ``first_step``...); attempts without phases (Slurm imports) have
   a startup of 0. A supervised attempt whose script did not use the SDK has only the
   supervisor's ``launch`` phase and no step (:func:`without_sdk`): when its training started,
   and so its productive time and time to resume, is unknown, not the wall time after launch;
4. the time a checkpoint stalled training is ``blocking_s``, else ``save_s`` (a save without a
   separate blocking time was synchronous), else 0;
5. quantiles use numpy's default (``method="linear"``): the q-quantile of sorted ``x[0..n-1]`` is
   ``x[i] + (x[i+1] - x[i]) * f`` with ``i + f = q * (n - 1)``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainguard.analytics.checktime import Interval, session_check_intervals
from trainguard.errors import StoreError
from trainguard.store import RUNNING, AttemptRecord, CheckpointRecord, SessionRecord, Store

SUCCEEDED, FAILED, CANCELLED = "succeeded", "failed", "cancelled"
"""Final attempt statuses (the store's ``running`` is :data:`trainguard.store.RUNNING`)."""


@dataclass(frozen=True, slots=True)
class RunView:
    """One session with its attempts (by launch index), its checkpoints (by creation time) and
    the time its own host checks took (pre-flight and stop-time; merged, oldest first).

        >>> run.attempts[0].index          # doctest: +SKIP
        0
    """

    session: SessionRecord
    attempts: tuple[AttemptRecord, ...]
    checkpoints: tuple[CheckpointRecord, ...]
    checks: tuple[Interval, ...] = ()

    @property
    def session_id(self) -> int:
        return self.session.id

    def checkpoints_of(self, attempt: AttemptRecord) -> tuple[CheckpointRecord, ...]:
        """The checkpoints ``attempt`` saved, oldest first."""
        return tuple(c for c in self.checkpoints if c.attempt_id == attempt.id)

    @property
    def finished_attempts(self) -> tuple[AttemptRecord, ...]:
        return tuple(a for a in self.attempts if a.ended is not None and a.status != RUNNING)


def load_runs(
    store: Store, *, session_id: int | None = None, since: float | None = None
) -> list[RunView]:
    """Every session (oldest first) as a :class:`RunView`.

    ``since`` keeps the sessions still running or ended at/after it (the store's filter);
    ``session_id`` keeps one session and raises :class:`StoreError` when there is none.
    """
    sessions = store.sessions(since=since)
    if session_id is not None:
        sessions = [s for s in sessions if s.id == session_id]
        if not sessions:
            raise StoreError(f"no session with id {session_id} in {store.url}"
                             + ("" if since is None else " in the time range given"))
    if not sessions:
        return []
    if session_id is not None:
        attempts = store.attempts(session_id)
        checkpoints = store.checkpoints(session_id)
    else:
        attempts = store.attempts()
        checkpoints = store.checkpoints()
    checks = session_check_intervals(store.host_checks(session_id=session_id))
    by_session: dict[int, list[AttemptRecord]] = defaultdict(list)
    for a in attempts:
        by_session[a.session_id].append(a)
    ckpts: dict[int, list[CheckpointRecord]] = defaultdict(list)
    for c in checkpoints:
        if c.session_id is not None:
            ckpts[c.session_id].append(c)
    return [
        RunView(
            session=s,
            attempts=tuple(sorted(by_session.get(s.id, ()), key=lambda a: (a.index, a.id))),
            checkpoints=tuple(sorted(ckpts.get(s.id, ()), key=lambda c: (c.created, c.id))),
            checks=checks.get(s.id, ()),
        )
        for s in sessions
    ]


# -- accessors -------------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def detail_number(attempt: AttemptRecord, key: str) -> float | None:
    """A numeric ``detail`` value (``failed_at``, ``hang_for_s``, ``detection_s``), else None."""
    return _number(attempt.detail.get(key)) if attempt.detail else None


def failure_info(attempt: AttemptRecord) -> Mapping[str, Any]:
    """``detail["failure"]`` (kind, category, culprit_nodes...), or an empty mapping."""
    failure = attempt.detail.get("failure") if attempt.detail else None
    return failure if isinstance(failure, Mapping) else {}


def failure_time(attempt: AttemptRecord) -> float | None:
    """When the attempt failed (convention 2); None while it runs."""
    if attempt.ended is None:
        return None
    failed_at = detail_number(attempt, "failed_at")
    if failed_at is None:
        return attempt.ended
    return min(max(failed_at, attempt.started), attempt.ended)


def startup_phases(attempt: AttemptRecord) -> dict[str, float]:
    """The attempt's startup phases in recorded order, non-numeric or negative values dropped."""
    out: dict[str, float] = {}
    for name, value in attempt.startup_phases.items():
        seconds = _number(value)
        if seconds is not None and seconds >= 0:
            out[str(name)] = seconds
    return out


SUPERVISOR_PHASES = frozenset({"launch"})
"""Startup phases the supervisor measures itself; every other phase comes from the SDK."""


def without_sdk(attempt: AttemptRecord) -> bool:
    """A supervised attempt whose script reported nothing through the SDK (convention 3).

    The supervisor recorded its startup (it has phases) but every phase is the supervisor's own
    and no step was reported (``detail["last_step"]`` is None). Imported history without phases
    is not flagged: it follows the startup-0 convention.
    """
    phases = startup_phases(attempt)
    if not phases or any(name not in SUPERVISOR_PHASES for name in phases):
        return False
    return (attempt.detail or {}).get("last_step") is None


def restore_info(attempt: AttemptRecord) -> Mapping[str, Any]:
    """``detail["restore"]`` (``source``, ``step``, ``steps_lost``...), or an empty mapping."""
    restore = attempt.detail.get("restore") if attempt.detail else None
    return restore if isinstance(restore, Mapping) else {}


WARM_IMPORTS_SHARE = 0.25
"""A relaunch whose imports phase took at most this share of the first attempt's (a cold
start) started warm (a pre-warmed standby interpreter)."""


def start_kind(attempt: AttemptRecord, cold_imports_s: float | None) -> str:
    """``warm``, ``cold`` or ``mixed``, as the SDK reported (``detail["begun"]``); for older
    records, ``warm`` or ``cold`` from the ``imports`` phase against a cold start's."""
    begun = attempt.detail.get("begun") if attempt.detail else None
    if begun in ("warm", "cold", "mixed"):
        return str(begun)
    imports = startup_phases(attempt).get("imports")
    if imports is None or cold_imports_s is None or cold_imports_s <= 0:
        return "cold"
    return "warm" if imports <= WARM_IMPORTS_SHARE * cold_imports_s else "cold"


def startup_s(attempt: AttemptRecord) -> float:
    """Launch to the end of the first training step (convention 3)."""
    return sum(startup_phases(attempt).values())


def stall_s(checkpoint: CheckpointRecord) -> float:
    """Seconds the checkpoint stalled training (convention 4)."""
    for value in (checkpoint.blocking_s, checkpoint.save_s):
        if value is not None:
            return max(0.0, value)
    return 0.0


def quantile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-quantile (0..1) by numpy's default linear method; None for no values."""
    if not values:
        return None
    return float(np.quantile(np.asarray(values, dtype=float), q))


def median(values: Sequence[float]) -> float | None:
    return quantile(values, 0.5)


def mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


__all__ = [
    "CANCELLED",
    "FAILED",
    "SUCCEEDED",
    "SUPERVISOR_PHASES",
    "WARM_IMPORTS_SHARE",
    "RunView",
    "detail_number",
    "failure_info",
    "failure_time",
    "load_runs",
    "mean",
    "median",
    "quantile",
    "restore_info",
    "stall_s",
    "start_kind",
    "startup_phases",
    "startup_s",
    "without_sdk",
]
