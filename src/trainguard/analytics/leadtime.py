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
*before* the failure the alert foretold, so ``t - alert.start`` is the alert -> stop reaction
time (``stop_latency_s``), not a lead. Its lead is measured to the failure itself where one is
known (:func:`predicted_lead`): a hard alert on the node after the predictive one (the node
failed after the job left it), else the lead the alert's own evidence states (a replayed alert
carries the lead it had in the history it comes from, ``predicted_failure_in_s``). Else it has
no lead (``lead_s`` None: stopped before the failure). A hard alert that stopped an attempt is
the failure seen, not foretold: its lead stays ``t - alert.start``. A stop counts as predicted;
the lead quantiles are over the warnings (:attr:`LeadTime.warning`).

Both ``predictive`` and ``hard`` alerts count; the kind is kept so that a report can tell an early
warning from a hard fault seen seconds before the crash.

    >>> leads = lead_times(runs, store.alerts())      # doctest: +SKIP
    >>> [(x.node, x.category, x.lead_s) for x in leads]   # doctest: +SKIP
    [('node7', 'gpu_hardware', 5400.0)]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
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
    predicted_lead_s: float | None = None
    """Seconds from the alert's onset to the failure it foretold, as its own evidence states
    (``predicted_failure_in_s`` of the alert record); None when it states none."""

    @classmethod
    def of(cls, alert: AlertRecord) -> AlertMark:
        return cls(alert.node, alert.start, alert.kind, alert.id, alert.source)


PREDICTED_FAILURE_IN_S = "predicted_failure_in_s"
"""Key of :attr:`AlertMark.predicted_lead_s` in an alert record and a ``detector_alert``
event's fields."""


def positive_seconds(value: object) -> float | None:
    """A lead in seconds from a record or event field; None unless a finite number > 0."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return x if 0 < x < float("inf") else None


def alert_marks(events: Iterable[FailureEvent]) -> list[AlertMark]:
    """The detector alerts among ``events`` (absolute time and a host needed)."""
    return [AlertMark(ev.host, float(ev.time), ev.field_value("alert_kind") or "predictive",
                      None, ev.field_value("source") or "supervisor",
                      stopped=ev.severity is Severity.FATAL,
                      predicted_lead_s=positive_seconds(ev.field_value(PREDICTED_FAILURE_IN_S)))
            for ev in events
            if ev.signature == DETECTOR_ALERT and ev.host and ev.time is not None
            and ev.time_kind is TimeKind.ABSOLUTE]


def predicted_lead(mark: AlertMark, on_node: Sequence[AlertMark], window_s: float
                   ) -> tuple[float | None, str]:
    """(lead, what it is measured to) of an alert whose failure did not happen in the job:
    the first hard alert on its node after it within ``window_s`` ("later failure"), else its
    own evidence ("prediction"), else (None, "")."""
    later = [m.start for m in on_node if m.kind == "hard" and m.node == mark.node
             and mark.start < m.start <= mark.start + window_s]
    if later:
        return min(later) - mark.start, "later failure"
    if mark.predicted_lead_s is not None:
        return mark.predicted_lead_s, "prediction"
    return None, ""


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
                lead = mark.predicted_lead_s if old is None or mark.predicted_lead_s \
                    is not None else old.predicted_lead_s
                out[key] = replace(mark, predicted_lead_s=lead)
            elif old.predicted_lead_s is None and mark.predicted_lead_s is not None:
                out[key] = replace(old, predicted_lead_s=mark.predicted_lead_s)
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
    lead_s: float | None
    """Seconds from the alert's onset to the failure it preceded; for a predictive stop to the
    failure it foretold (``lead_to``), None when that is unknown (stopped before the failure)."""
    stopped: bool = False
    """The alert made the supervisor stop the attempt (a predictive stop; outline step 2)."""
    stop_latency_s: float | None = None
    """For a predictive stop: seconds from the alert's onset to the attempt's stop."""
    lead_to: str = "failure"
    """What the lead is measured to: "failure" (the attempt's), "later failure" (a hard alert
    on the node after the job left it), "prediction" (the alert's own evidence), or "" (none:
    stopped before the failure)."""

    @property
    def warning(self) -> bool:
        """The lead is a warning before a failure: known, and not a hard alert's stop (whose
        lead is the stop's reaction time)."""
        return self.lead_s is not None and not (self.stopped and self.alert_kind == "hard")

    def to_dict(self) -> dict[str, object]:
        return {"session_id": self.session_id, "attempt_id": self.attempt_id, "node": self.node,
                "category": self.category, "failure_time": self.failure_time,
                "alert_id": self.alert_id, "alert_kind": self.alert_kind, "lead_s": self.lead_s,
                "stopped": self.stopped, "stop_latency_s": self.stop_latency_s,
                "lead_to": self.lead_to}


@dataclass(frozen=True, slots=True)
class LeadTimeSummary:
    """Lead times over the failures that named a culprit node."""

    with_culprit: int
    """Failed attempts naming at least one culprit node, less the unpredicted ones that are not
    a detector's to see (``injected``, ``user_code``)."""
    predicted: int
    """Those with an alert on a culprit node in the window before the failure."""
    lead_median_s: float | None
    """Over the predicted failures whose lead is a warning (:attr:`LeadTime.warning`): a stop's
    reaction time is no lead."""
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
    values = [x.lead_s for x in leads if x.warning and x.lead_s is not None]
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
            lead: float | None = t - start
            latency, lead_to = None, "failure"
            if stopped:
                latency = t - start
                if mark.kind != "hard":  # a hard alert is the failure, seen; no prediction
                    lead, lead_to = predicted_lead(mark, by_node.get(node, ()), window_s)
            out.append(LeadTime(run.session_id, a.id, node, category, t, mark.alert_id,
                                mark.kind, lead, stopped=stopped, stop_latency_s=latency,
                                lead_to=lead_to))
    return with_culprit, out, apart


__all__ = ["DEFAULT_WINDOW_S", "DETECTOR_ALERT", "PREDICTED_FAILURE_IN_S", "AlertMark", "LeadTime",
           "LeadTimeSummary", "alert_marks", "lead_time_summary", "lead_times", "merge_alerts",
           "not_a_miss", "positive_seconds", "predicted_lead"]
