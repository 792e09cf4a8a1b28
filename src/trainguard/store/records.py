"""Immutable rows returned by :class:`~trainguard.store.Store` queries.

Payload mappings (``attrs``, ``config``, ``exit_codes``...) are the decoded JSON columns; treat them
as read-only. Times are unix seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainguard.fleet.events import FleetWindow

ALERT_KINDS: tuple[str, ...] = ("predictive", "hard")
"""Allowed values of :attr:`AlertRecord.kind`."""

CHECK_CONTEXTS: tuple[str, ...] = ("check", "preflight", "stop", "release")
"""Allowed values of :attr:`HostCheckRecord.context`: ``trainguard check``, a supervised run's
pre-flight check, its stop-time check, ``nodes release --verify``."""


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node and its last known health."""

    name: str
    state: str | None
    attrs: Mapping[str, Any]
    first_seen: float | None
    last_seen: float | None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A training job, across all its launches."""

    id: int
    name: str
    backend: str
    """Launch backend (``local``, ``slurm``...)."""
    external_id: str | None
    """The scheduler's id for the job, when there is one."""
    status: str
    """``running`` until :meth:`Store.finish_session` records the final status."""
    started: float
    ended: float | None
    config: Mapping[str, Any]

    @property
    def duration_s(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One launch of a session: who ran, how it ended and what the supervisor decided."""

    id: int
    session_id: int
    index: int
    """0 for the first launch, then 1, 2... within the session."""
    nodes: tuple[str, ...]
    started: float
    ended: float | None
    status: str
    """``running`` until :meth:`Store.finish_attempt` records the outcome."""
    automatic: bool
    """False when an operator relaunched by hand (matters for MTTR)."""
    resumed_from_step: int | None
    failure_category: str | None
    decision: str | None
    excluded_nodes: tuple[str, ...]
    exit_codes: Mapping[str, int | None]
    """Per rank (or per node) exit status; None where the process never reported one."""
    startup_phases: Mapping[str, float]
    """Seconds spent in each startup phase (``rendezvous``, ``ckpt_load``...), in order."""
    evidence: tuple[str, ...]
    detail: Mapping[str, Any]

    @property
    def duration_s(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """A detector alert episode on one node."""

    id: int
    node: str
    start: float
    end: float | None
    """None while the episode is still open."""
    peak_score: float
    kind: str
    """One of :data:`ALERT_KINDS`."""
    signals: tuple[Mapping[str, Any], ...]
    """The metrics that drove the score: ``{"metric": ..., "gpu": ..., "deviation": ...}``."""
    source: str


@dataclass(frozen=True, slots=True)
class ExclusionRecord:
    """A node taken out of scheduling, and when (if ever) it was put back."""

    id: int
    node: str
    reason: str
    source: str
    created: float
    released: float | None
    evidence: tuple[str, ...]
    session_id: int | None
    attempt_id: int | None

    @property
    def active(self) -> bool:
        return self.released is None


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One checkpoint save and what it cost the training loop."""

    id: int
    session_id: int | None
    attempt_id: int | None
    step: int
    path: str
    created: float
    size_bytes: int | None
    save_s: float | None
    """Wall time of the whole save, including background upload."""
    blocking_s: float | None
    """Time training was stalled by the save."""
    ok: bool


@dataclass(frozen=True, slots=True)
class HostCheckRecord:
    """One host's outcome in one host check (:mod:`trainguard.check`).

        >>> store.last_host_checks()["node3"].level   # doctest: +SKIP
        'slow'
    """

    id: int
    host: str
    checked_at: float
    """When the check started (the whole check, all hosts)."""
    duration_s: float
    """How long the whole check took."""
    level: str
    """``pass``, ``slow``, ``fail`` or ``skipped`` (:class:`trainguard.check.model.Level`)."""
    reason: str
    """The reasons of the host's worst findings, joined; empty for a pass."""
    context: str
    """One of :data:`CHECK_CONTEXTS`."""
    session_id: int | None
    """The supervised run that made the check, if one did."""
    findings: tuple[Mapping[str, Any], ...]
    """The host's findings (``Finding.to_dict``), its links' included."""
    figures: tuple[Mapping[str, Any], ...]
    """The host's probe results (``ProbeResult.to_dict``)."""

    @property
    def ended(self) -> float:
        return self.checked_at + self.duration_s


@dataclass(frozen=True, slots=True)
class FaultHistoryRecord:
    """A fault history imported from elsewhere (a ticket system, a repair log, a public trace),
    kept apart from what trainguard observed itself; its faults are
    :meth:`Store.history_events`."""

    id: int
    name: str
    """Unique in the store."""
    source: str
    """Where it was read from (a file path, as given)."""
    fmt: str
    """The source's format (``json``, ``jsonl``, ``csv``, ``slurm``...)."""
    fleet_size: int
    """Nodes in the fleet over the window, failed or not (as stated at import, never guessed)."""
    window_start: float
    window_end: float
    origin: float | None
    """Unix seconds of the source's relative time 0, when its times were relative."""
    imported: float
    """When it was imported."""
    counts: Mapping[str, Any]
    """What the import read, merged and refused (``ImportCounts`` as a dict)."""
    meta: Mapping[str, Any]
    """Free-form import details (field mapping, time unit, mapping file...)."""
    faults: int
    """How many faults it holds."""

    @property
    def window(self) -> FleetWindow:
        """The span the history covers and the fleet size, for :mod:`trainguard.fleet`."""
        # Imported here: trainguard.fleet imports the store (via nodehealth).
        from trainguard.fleet.events import FleetWindow

        return FleetWindow(self.window_start, self.window_end, self.fleet_size)


__all__ = [
    "ALERT_KINDS",
    "CHECK_CONTEXTS",
    "AlertRecord",
    "AttemptRecord",
    "CheckpointRecord",
    "ExclusionRecord",
    "FaultHistoryRecord",
    "HostCheckRecord",
    "NodeRecord",
    "SessionRecord",
]
