"""Detection lead time: how long before a failure the detector flagged the node that caused it.

Alerts come from two places in the store: the alert episodes a detector wrote (``trainguard
watch``; :meth:`Store.alerts`) and the alerts a supervisor read from its alert feed, which it
records as classified events of the attempt they reached (signature ``detector_alert``, the
alert's start as the event time; :func:`alert_marks`). Both become :class:`AlertMark`.

Outline of :func:`lead_times`:

1. take each failed attempt whose failure names culprit nodes (``detail["failure"]
   ["culprit_nodes"]``); its failure time ``t`` is ``failed_at``, else ``ended``;
2. for each culprit node, look for alerts on it that started in ``[t - window_s, t)`` (default
   24 h): an alert after the failure cannot have warned of it, and one older than the window is
   taken as unrelated. An alert that made the supervisor stop this attempt (a fatal
   ``detector_alert`` event of the attempt: a hard alert, or a predictive one with
   ``--stop-on-predictive``) counts even when it is dated ``t`` itself;
3. the earliest such alert over the culprit nodes gives the lead: ``lead = t - alert.start``, the
   most warning there was. A failure without such an alert has no lead time (it was not predicted)
   and is counted in :class:`LeadTimeSummary` as missed, unless no detector could have seen it
   coming (:func:`not_a_miss`): a fault trainguard injected (``run --inject``, ``trainguard
   inject``) or a failure of the job's own code (an exception, a hang in its own frames,
   category ``user_code_error``). Those are counted apart (``injected``, ``user_code``), never
   as misses.

A predictive stop is the detector doing its job: the attempt was stopped and the node excluded
*before* the failure the alert foretold, so the store holds no later failure to measure the lead
against. Such a lead (``stopped``) is the alert -> stop reaction time; it is counted as predicted
and kept out of the lead quantiles, which describe warnings before failures that happened.

Both ``predictive`` and ``hard`` alerts count; the kind is kept so that a report can tell an early
warning from a hard fault seen seconds before the crash.

    >>> leads = lead_times(runs, store.alerts())      # doctest: +SKIP
    >>> [(x.node, x.category, x.lead_s) for x in leads]   # doctest: +SKIP
    [('node7', 'gpu_hardware', 5400.0)]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.analytics.runs import FAILED, RunView, failure_info, failure_time, median, quantile
from trainguard.errors import ConfigError
from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.store import AlertRecord
from trainguard.taxonomy import Category, Severity

DEFAULT_WINDOW_S = 24 * 3600.0
DETECTOR_ALERT = "detector_alert"
"""Signature of the events a supervisor records for the alerts it reads
(:meth:`trainguard.recover.watch.NodeWatch`)."""


@dataclass(frozen=True, slots=True)
class AlertMark:
    """A detector alert on a node, from the store's alerts or from a supervisor's event."""

    node: str
    start: float
    kind: str
    alert_id: int | None
    """The store's alert id; None for an alert known from an event only."""
    source: str
    stopped: bool = False
    """A supervisor stopped an attempt on it (a fatal ``detector_alert`` event)."""

    @classmethod
    def of(cls, alert: AlertRecord) -> AlertMark:
        return cls(alert.node, alert.start, alert.kind, alert.id, alert.source)


def alert_marks(events: Iterable[FailureEvent]) -> list[AlertMark]:
    """The detector alerts among ``events`` (absolute time and a host needed)."""
    return [AlertMark(ev.host, float(ev.time), ev.field_value("alert_kind") or "predictive",
                      None, ev.field_value("source") or "supervisor",
                      stopped=ev.severity is Severity.FATAL)
            for ev in events
            if ev.signature == DETECTOR_ALERT and ev.host and ev.time is not None
            and ev.time_kind is TimeKind.ABSOLUTE]


def merge_alerts(*groups: Iterable[AlertRecord | AlertMark]) -> list[AlertMark]:
    """One mark per (node, start, kind): an alert in the store and the event a supervisor made
    of it are one alert (the store's id is kept)."""
    out: dict[tuple[str, float, str], AlertMark] = {}
    for group in groups:
        for item in group:
            mark = AlertMark.of(item) if isinstance(item, AlertRecord) else item
            key = (mark.node, mark.start, mark.kind)
            old = out.get(key)
            if old is None or (old.alert_id is None and mark.alert_id is not None):
                out[key] = mark
    return sorted(out.values(), key=lambda m: (m.start, m.node))


@dataclass(frozen=True, slots=True)
class LeadTime:
    """One failure that an alert on its culprit node preceded."""

    session_id: int
    attempt_id: int
    node: str
    category: str
    failure_time: float
    alert_id: int | None
    alert_kind: str
    lead_s: float
    stopped: bool = False
    """The alert made the supervisor stop the attempt (a predictive stop; outline step 2)."""

    def to_dict(self) -> dict[str, object]:
        return {"session_id": self.session_id, "attempt_id": self.attempt_id, "node": self.node,
                "category": self.category, "failure_time": self.failure_time,
                "alert_id": self.alert_id, "alert_kind": self.alert_kind, "lead_s": self.lead_s,
                "stopped": self.stopped}


@dataclass(frozen=True, slots=True)
class LeadTimeSummary:
    """Lead times over the failures that named a culprit node."""

    with_culprit: int
    """Failed attempts naming at least one culprit node, less the unpredicted ones that are not
    a detector's to see (``injected``, ``user_code``)."""
    predicted: int
    """Those with an alert on a culprit node in the window before the failure."""
    lead_median_s: float | None
    """Over the predicted failures that were not stopped on their alert."""
    lead_p90_s: float | None
    leads: tuple[LeadTime, ...]
    injected: int = 0
    """Failures without an alert first that trainguard injected (not detector misses)."""
    user_code: int = 0
    """Failures without an alert first caused by the job's own code (not detector misses)."""

    @property
    def missed(self) -> int:
        return self.with_culprit - self.predicted

    @property
    def stopped(self) -> int:
        """Predicted failures the supervisor stopped on their alert (predictive stops)."""
        return sum(x.stopped for x in self.leads)

    def to_dict(self) -> dict[str, object]:
        return {"with_culprit": self.with_culprit, "predicted": self.predicted,
                "stopped": self.stopped, "missed": self.missed, "injected": self.injected,
                "user_code": self.user_code,
                "lead_median_s": self.lead_median_s, "lead_p90_s": self.lead_p90_s,
                "leads": [x.to_dict() for x in self.leads]}


Alerts = Sequence[AlertRecord | AlertMark]
Stops = Mapping[int, Sequence[AlertMark]]
"""Attempt id -> the alerts its supervisor recorded for it (:func:`alert_marks` of its events)."""


def _culprits(failure: object) -> list[str]:
    nodes = failure if isinstance(failure, (list, tuple)) else ()
    return [str(n) for n in nodes if n]


def not_a_miss(failure: Mapping[str, Any], category: str | None = None) -> str | None:
    """Why a failure without an alert first is no detector miss: ``injected`` (trainguard
    delivered it), ``user_code`` (the job's own code: an exception, a hang in its own frames),
    else None (a miss)."""
    category = category or str(failure.get("category") or "")
    if failure.get("injected") or category == Category.INJECTED_FAULT.value:
        return "injected"
    if category == Category.USER_CODE_ERROR.value:
        return "user_code"
    return None


def lead_times(runs: Iterable[RunView], alerts: Alerts, window_s: float = DEFAULT_WINDOW_S,
               stops: Stops | None = None) -> list[LeadTime]:
    """One :class:`LeadTime` per predicted failure (see the module outline), in run order."""
    return list(_scan(runs, alerts, window_s, stops or {})[1])


def lead_time_summary(runs: Iterable[RunView], alerts: Alerts,
                      window_s: float = DEFAULT_WINDOW_S,
                      stops: Stops | None = None) -> LeadTimeSummary:
    with_culprit, leads, apart = _scan(runs, alerts, window_s, stops or {})
    values = [x.lead_s for x in leads if not x.stopped]
    return LeadTimeSummary(with_culprit, len(leads), median(values), quantile(values, 0.9),
                           tuple(leads), injected=apart["injected"],
                           user_code=apart["user_code"])


def _scan(runs: Iterable[RunView], alerts: Alerts, window_s: float,
          stops: Stops) -> tuple[int, list[LeadTime], dict[str, int]]:
    if window_s <= 0:
        raise ConfigError(f"window_s must be > 0, got {window_s}")
    by_node: dict[str, list[AlertMark]] = defaultdict(list)
    for mark in merge_alerts(alerts, (m for marks in stops.values() for m in marks)):
        by_node[mark.node].append(mark)
    with_culprit = 0
    apart = {"injected": 0, "user_code": 0}
    out: list[LeadTime] = []
    for run in runs:
        for a in run.attempts:
            t = failure_time(a)
            failure = failure_info(a)
            nodes = _culprits(failure.get("culprit_nodes"))
            if a.status != FAILED or t is None or not nodes:
                continue
            cause = {(m.node, m.start, m.kind) for m in stops.get(a.id, ()) if m.stopped}
            candidates = [(m.start, n, m) for n in nodes for m in by_node.get(n, ())
                          if t - window_s <= m.start < t
                          or (m.start <= t and (m.node, m.start, m.kind) in cause)]
            if not candidates:
                why = not_a_miss(failure, a.failure_category)
                if why is not None:
                    apart[why] += 1
                else:
                    with_culprit += 1
                continue
            with_culprit += 1
            start, node, mark = min(candidates, key=lambda c: (c[0], c[1]))
            category = a.failure_category or str(failure.get("category") or "unknown")
            stopped = any((m.node, m.start, m.kind) in cause for _, _, m in candidates)
            out.append(LeadTime(run.session_id, a.id, node, category, t, mark.alert_id,
                                mark.kind, t - start, stopped=stopped))
    return with_culprit, out, apart


__all__ = ["DEFAULT_WINDOW_S", "DETECTOR_ALERT", "AlertMark", "LeadTime", "LeadTimeSummary",
           "alert_marks", "lead_time_summary", "lead_times", "merge_alerts", "not_a_miss"]
