"""Detection lead time: how long before a failure the detector flagged the node that caused it.

Outline of :func:`lead_times`:

1. take each failed attempt whose failure names culprit nodes (``detail["failure"]
   ["culprit_nodes"]``); its failure time ``t`` is ``failed_at``, else ``ended``;
2. for each culprit node, look for alerts on it that started in ``[t - window_s, t)`` (default
   24 h): an alert after the failure cannot have warned of it, and one older than the window is
   taken as unrelated;
3. the earliest such alert over the culprit nodes gives the lead: ``lead = t - alert.start``, the
   most warning there was. A failure without such an alert has no lead time (it was not predicted)
   and is counted in :class:`LeadTimeSummary` as missed.

Both ``predictive`` and ``hard`` alerts count; the kind is kept so that a report can tell an early
warning from a hard fault seen seconds before the crash.

    >>> leads = lead_times(runs, store.alerts())      # doctest: +SKIP
    >>> [(x.node, x.category, x.lead_s) for x in leads]   # doctest: +SKIP
    [('node7', 'gpu_hardware', 5400.0)]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainguard.analytics.runs import FAILED, RunView, failure_info, failure_time, median, quantile
from trainguard.errors import ConfigError
from trainguard.store import AlertRecord

DEFAULT_WINDOW_S = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class LeadTime:
    """One failure that an alert on its culprit node preceded."""

    session_id: int
    attempt_id: int
    node: str
    category: str
    failure_time: float
    alert_id: int
    alert_kind: str
    lead_s: float

    def to_dict(self) -> dict[str, object]:
        return {"session_id": self.session_id, "attempt_id": self.attempt_id, "node": self.node,
                "category": self.category, "failure_time": self.failure_time,
                "alert_id": self.alert_id, "alert_kind": self.alert_kind, "lead_s": self.lead_s}


@dataclass(frozen=True, slots=True)
class LeadTimeSummary:
    """Lead times over the failures that named a culprit node."""

    with_culprit: int
    """Failed attempts naming at least one culprit node."""
    predicted: int
    """Those with an alert on a culprit node in the window before the failure."""
    lead_median_s: float | None
    lead_p90_s: float | None
    leads: tuple[LeadTime, ...]

    @property
    def missed(self) -> int:
        return self.with_culprit - self.predicted

    def to_dict(self) -> dict[str, object]:
        return {"with_culprit": self.with_culprit, "predicted": self.predicted,
                "missed": self.missed, "lead_median_s": self.lead_median_s,
                "lead_p90_s": self.lead_p90_s, "leads": [x.to_dict() for x in self.leads]}


def _culprits(failure: object) -> list[str]:
    nodes = failure if isinstance(failure, (list, tuple)) else ()
    return [str(n) for n in nodes if n]


def lead_times(runs: Iterable[RunView], alerts: Sequence[AlertRecord],
               window_s: float = DEFAULT_WINDOW_S) -> list[LeadTime]:
    """One :class:`LeadTime` per predicted failure (see the module outline), in run order."""
    return list(_scan(runs, alerts, window_s)[1])


def lead_time_summary(runs: Iterable[RunView], alerts: Sequence[AlertRecord],
                      window_s: float = DEFAULT_WINDOW_S) -> LeadTimeSummary:
    with_culprit, leads = _scan(runs, alerts, window_s)
    values = [x.lead_s for x in leads]
    return LeadTimeSummary(with_culprit, len(leads), median(values), quantile(values, 0.9),
                           tuple(leads))


def _scan(runs: Iterable[RunView], alerts: Sequence[AlertRecord],
          window_s: float) -> tuple[int, list[LeadTime]]:
    if window_s <= 0:
        raise ConfigError(f"window_s must be > 0, got {window_s}")
    by_node: dict[str, list[AlertRecord]] = defaultdict(list)
    for al in alerts:
        by_node[al.node].append(al)
    with_culprit = 0
    out: list[LeadTime] = []
    for run in runs:
        for a in run.attempts:
            t = failure_time(a)
            failure = failure_info(a)
            nodes = _culprits(failure.get("culprit_nodes"))
            if a.status != FAILED or t is None or not nodes:
                continue
            with_culprit += 1
            candidates = [(al.start, al.id, node, al) for node in nodes
                          for al in by_node.get(node, ()) if t - window_s <= al.start < t]
            if not candidates:
                continue
            start, _, node, alert = min(candidates)
            category = a.failure_category or str(failure.get("category") or "unknown")
            out.append(LeadTime(run.session_id, a.id, node, category, t, alert.id, alert.kind,
                                t - start))
    return with_culprit, out


__all__ = ["DEFAULT_WINDOW_S", "LeadTime", "LeadTimeSummary", "lead_time_summary", "lead_times"]
