"""Backtest scorecard: how many failures a detector saw coming, how early, and at what noise.

Rules (all on alert *onsets*, `AlertEpisode.start`; all bounds inclusive):

1. A failure at `t_xid` on node N is **detected** when an alert on N starts within
   [t_xid - 3 h, t_xid + 5 min]. It is **pre-XID** when such an alert starts before t_xid; its
   **lead** is t_xid minus the start of the earliest such alert.
2. An alert is a **false positive** when it starts outside every failure window
   [t_xid - 3 h, t_xid + 2 h] of its node and outside every benign window (maintenance) of its
   node, and is not a long-lead warning.
2a. An alert that starts on the failure's node within [t_xid - 48 h, t_xid - 3 h) is a
   **long-lead warning**: degradation seen a day or more ahead (wear, recurring errors) is an
   early warning, not a false alarm. It is counted on its own (`long_lead`); it detects nothing.
3. An alert starting within +-5 min of an application XID on its node is a false positive even
   when rule 2 would excuse it, and it detects nothing (it fired *because of* the job's fault).

An alert that started before a failure's window and is still on at the XID does not count: it
was paged for something else. Failures and alerts outside `span` are left out.

    >>> card = score([], GroundTruth(), (0.0, 86400.0), 64, name="none")
    >>> card.false_positives, card.total.n
    (0, 0)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainguard.detect.alerts import AlertEpisode
from trainguard.detect.truth import Failure, GroundTruth

__all__ = [
    "APP_XID_MARGIN_S",
    "DETECT_AFTER_S",
    "DETECT_BEFORE_S",
    "FP_AFTER_S",
    "WARN_BEFORE_S",
    "Comparison",
    "FailureMatch",
    "LeadStats",
    "Scorecard",
    "TypeStats",
    "compare",
    "score",
]

DETECT_BEFORE_S = 3 * 3600.0
"""An alert may start this long before the XID and still detect it."""
DETECT_AFTER_S = 5 * 60.0
"""... or this long after it (a hard alert on the XID itself)."""
WARN_BEFORE_S = 48 * 3600.0
"""An alert starting this long (or less) before the XID on its node, and before the detection
window, is a long-lead warning, not a false positive."""
FP_AFTER_S = 2 * 3600.0
"""Alerts up to this long after an XID are the failure's aftermath, not false positives."""
APP_XID_MARGIN_S = 5 * 60.0
"""Alerts starting this close to an application XID were caused by it."""
TOTAL = "all"


@dataclass(frozen=True, slots=True)
class LeadStats:
    """Lead times of pre-XID detections, in minutes."""

    median: float
    p25: float
    p75: float
    min: float
    max: float

    @staticmethod
    def of(leads_min: Sequence[float]) -> LeadStats | None:
        if not leads_min:
            return None
        a = np.asarray(leads_min, dtype=np.float64)
        p25, med, p75 = (float(x) for x in np.percentile(a, [25, 50, 75]))
        return LeadStats(med, p25, p75, float(a.min()), float(a.max()))

    def to_dict(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 2) for k in ("median", "p25", "p75", "min", "max")}


@dataclass(frozen=True, slots=True)
class TypeStats:
    """Detection figures for one failure type (or all of them: `failure_type == "all"`)."""

    failure_type: str
    n: int
    detected: int
    pre_xid: int
    lead: LeadStats | None
    metrics: tuple[tuple[str, int], ...]
    """Metrics in the signals of the detecting alerts: (metric, failures it helped), most first."""

    @property
    def rate(self) -> float:
        return self.detected / self.n if self.n else 0.0

    @property
    def pre_xid_rate(self) -> float:
        return self.pre_xid / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"failure_type": self.failure_type, "n": self.n, "detected": self.detected,
                "rate": round(self.rate, 4), "pre_xid": self.pre_xid,
                "pre_xid_rate": round(self.pre_xid_rate, 4),
                "lead_min": self.lead.to_dict() if self.lead else None,
                "metrics": dict(self.metrics)}


@dataclass(frozen=True, slots=True)
class FailureMatch:
    """One failure and the alerts that detected it."""

    failure: Failure
    alerts: tuple[AlertEpisode, ...]
    lead_s: float | None
    """t_xid - earliest detecting onset, when that onset is before the XID."""

    @property
    def detected(self) -> bool:
        return bool(self.alerts)


@dataclass(frozen=True, slots=True)
class Scorecard:
    """One detector's backtest result. Build it with :func:`score`."""

    name: str
    span: tuple[float, float]
    n_nodes: int
    n_alerts: int
    by_type: tuple[TypeStats, ...]
    total: TypeStats
    false_positives: int
    fp_at_app_xid: int
    """False positives that started at an application XID (part of `false_positives`)."""
    matches: tuple[FailureMatch, ...]
    fp_alerts: tuple[AlertEpisode, ...]
    long_lead: int = 0
    """Alerts that started 3-48 h before a failure on their node (rule 2a): not false positives."""

    @property
    def days(self) -> float:
        return (self.span[1] - self.span[0]) / 86400.0

    @property
    def fp_per_day(self) -> float:
        return self.false_positives / self.days if self.days > 0 else 0.0

    @property
    def fp_per_day_per_64(self) -> float:
        """False positives per day, scaled to a 64-node cluster."""
        if self.days <= 0 or self.n_nodes <= 0:
            return 0.0
        return self.false_positives * 64 / self.n_nodes / self.days

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "span": list(self.span), "days": round(self.days, 4),
            "n_nodes": self.n_nodes, "n_alerts": self.n_alerts,
            "total": self.total.to_dict(), "by_type": [t.to_dict() for t in self.by_type],
            "false_positives": self.false_positives, "fp_at_app_xid": self.fp_at_app_xid,
            "long_lead_warnings": self.long_lead,
            "fp_per_day": round(self.fp_per_day, 4),
            "fp_per_day_per_64_nodes": round(self.fp_per_day_per_64, 4),
            "missed": [{"node": m.failure.node, "time": m.failure.time,
                        "failure_type": m.failure.failure_type}
                       for m in self.matches if not m.detected],
        }


def _in_span(t: float, span: tuple[float, float]) -> bool:
    return span[0] <= t <= span[1]


def _type_stats(ftype: str, matches: Sequence[FailureMatch]) -> TypeStats:
    metrics: Counter[str] = Counter()
    for m in matches:
        metrics.update({s.metric for a in m.alerts for s in a.signals})
    leads = [m.lead_s / 60.0 for m in matches if m.lead_s is not None]
    return TypeStats(ftype, len(matches), sum(m.detected for m in matches), len(leads),
                     LeadStats.of(leads),
                     tuple(sorted(metrics.items(), key=lambda kv: (-kv[1], kv[0]))))


def score(alerts: Sequence[AlertEpisode], truth: GroundTruth, span: tuple[float, float],
          n_nodes: int, *, name: str) -> Scorecard:
    """Score `alerts` against `truth` over `span` (unix s) on a cluster of `n_nodes` nodes."""
    in_span = [a for a in alerts if _in_span(a.start, span)]
    app_times: dict[str, list[float]] = {}
    for x in truth.app_xids:
        app_times.setdefault(x.node, []).append(x.time)
    at_app = [any(abs(a.start - t) <= APP_XID_MARGIN_S for t in app_times.get(a.node, ()))
              for a in in_span]
    candidates = [a for a, bad in zip(in_span, at_app, strict=True) if not bad]

    failures = sorted((f for f in truth.failures if _in_span(f.time, span)),
                      key=lambda f: (f.time, f.node))
    by_node: dict[str, list[AlertEpisode]] = {}
    for a in candidates:
        by_node.setdefault(a.node, []).append(a)
    matches: list[FailureMatch] = []
    for f in failures:
        hit = tuple(sorted((a for a in by_node.get(f.node, ()) if
                            f.time - DETECT_BEFORE_S <= a.start <= f.time + DETECT_AFTER_S),
                           key=lambda a: a.start))
        lead = f.time - hit[0].start if hit and hit[0].start < f.time else None
        matches.append(FailureMatch(f, hit, lead))

    fp: list[AlertEpisode] = []
    n_app = 0
    fail_times: dict[str, list[float]] = {}
    for f in truth.failures:
        fail_times.setdefault(f.node, []).append(f.time)
    benign: dict[str, list[tuple[float, float]]] = {}
    for b in truth.benign:
        benign.setdefault(b.node, []).append((b.start, b.end))
    n_long = 0
    for a, bad in zip(in_span, at_app, strict=True):
        times = fail_times.get(a.node, ())
        excused = any(t - DETECT_BEFORE_S <= a.start <= t + FP_AFTER_S for t in times) or any(
            lo <= a.start <= hi for lo, hi in benign.get(a.node, ()))
        if not bad and not excused and any(t - WARN_BEFORE_S <= a.start < t - DETECT_BEFORE_S
                                           for t in times):
            n_long += 1
        elif bad or not excused:
            fp.append(a)
            n_app += bad
    types = sorted({m.failure.failure_type for m in matches})
    by_type = tuple(_type_stats(t, [m for m in matches if m.failure.failure_type == t])
                    for t in types)
    return Scorecard(name, span, n_nodes, len(in_span), by_type, _type_stats(TOTAL, matches),
                     len(fp), n_app, tuple(matches), tuple(fp), n_long)


@dataclass(frozen=True, slots=True)
class Comparison:
    """A side-by-side table: `header[0]` is the row label column, then one column per card."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _fmt_lead(t: TypeStats) -> str:
    if t.lead is None:
        return "-"
    return f"{t.lead.median:.0f} ({t.lead.p25:.0f}-{t.lead.p75:.0f})"


def compare(cards: Sequence[Scorecard]) -> Comparison:
    """Rows for a side-by-side table of several detectors (same truth and span expected)."""
    header = ("", *(c.name for c in cards))
    rows: list[tuple[str, ...]] = [
        ("detected", *(f"{c.total.detected}/{c.total.n} ({c.total.rate:.0%})" for c in cards)),
        ("pre-XID", *(f"{c.total.pre_xid}/{c.total.n} ({c.total.pre_xid_rate:.0%})"
                      for c in cards)),
        ("lead min, median (p25-p75)", *(_fmt_lead(c.total) for c in cards)),
        ("alerts", *(str(c.n_alerts) for c in cards)),
        ("false positives", *(str(c.false_positives) for c in cards)),
        ("  of which at app XIDs", *(str(c.fp_at_app_xid) for c in cards)),
        ("FP / day", *(f"{c.fp_per_day:.2f}" for c in cards)),
        ("FP / day / 64 nodes", *(f"{c.fp_per_day_per_64:.2f}" for c in cards)),
        ("long-lead warnings (3-48 h ahead)", *(str(c.long_lead) for c in cards)),
    ]
    types = sorted({t.failure_type for c in cards for t in c.by_type})
    for ftype in types:
        cells: list[str] = []
        for c in cards:
            t = next((x for x in c.by_type if x.failure_type == ftype), None)
            cells.append("-" if t is None else f"{t.detected}/{t.n}, {t.pre_xid} pre-XID")
        rows.append((f"  {ftype}", *cells))
    return Comparison(header, tuple(rows))
