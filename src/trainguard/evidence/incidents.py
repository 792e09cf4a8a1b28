"""Correlate failure events into incidents: one root cause, its consequences as related events.

One GPU falling off the bus makes every other rank of the job log NCCL timeouts, connection
resets and launcher errors. Grouping by time and ranking by "what can cause what" turns those
thousands of lines into one incident whose root cause is the hardware event.

Outline:
1. deduplicate: the same evidence seen twice (the same line in a combined and a per-rank log; an
   XID line and its fallen-off-the-bus companion) becomes one event with both evidence lines;
2. give every event an *anchor time*: its own absolute time, moved back by the duration a
   watchdog timeout reports (the hang started then), or, for lines without a timestamp, the time
   of the nearest timestamped event in the same file;
3. cluster anchors with a gap threshold (single linkage); events with no usable time form one
   group that joins the single timed cluster when there is only one;
4. in each cluster the root cause is the non-informational event with the highest priority
   (hardware > host OOM > storage > ... > user code > network > NCCL timeout > launcher
   summaries), then severity, confidence, and the earliest time (the first rank to fail);
5. incidents are ordered most important first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainguard.evidence.aggregate import last_time, repeats
from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.evidence.rules import RuleSet
from trainguard.evidence.xid import is_consequence
from trainguard.taxonomy import CATEGORY_PRIORITY, SEVERITY_RANK, Action, Category, Severity

DEFAULT_WINDOW_S = 900.0
_CONSEQUENCE_XID_PRIORITY = 12
_MAX_EVIDENCE = 6


@dataclass(frozen=True, slots=True)
class Incident:
    """A correlated group of events with one root cause."""

    root_cause: FailureEvent
    related: tuple[FailureEvent, ...]
    start: float | None
    end: float | None
    hosts: tuple[str, ...]
    ranks: tuple[int, ...]
    host: str | None
    gpu: str | None
    gpu_index: int | None
    rank: int | None

    @property
    def category(self) -> Category:
        return self.root_cause.category

    @property
    def action(self) -> Action:
        return self.root_cause.action

    @property
    def severity(self) -> Severity:
        return self.root_cause.severity

    @property
    def xid(self) -> int | None:
        return self.root_cause.xid

    @property
    def event_count(self) -> int:
        """Log events in this incident, folded repeats included."""
        return 1 + self.related_count

    @property
    def related_count(self) -> int:
        """Log events besides the root cause, folded repeats included."""
        return sum(repeats(e) for e in self.related) + repeats(self.root_cause) - 1

    @property
    def summary(self) -> str:
        where = []
        if self.host:
            where.append(self.host)
        if self.gpu:
            where.append(f"GPU {self.gpu}")
        elif self.gpu_index is not None:
            where.append(f"GPU {self.gpu_index}")
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        text = self.root_cause.summary
        if where:
            text += " on " + " ".join(where)
        if self.related_count:
            text += (f"; {self.related_count} related event(s) on {max(1, len(self.hosts))} "
                     f"host(s), {len(self.ranks)} rank(s)")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category.value,
            "action": self.action.value,
            "severity": self.severity.value,
            "confidence": round(self.root_cause.confidence, 3),
            "host": self.host,
            "gpu": self.gpu,
            "gpu_index": self.gpu_index,
            "rank": self.rank,
            "xid": self.xid,
            "summary": self.summary,
            "start": self.start,
            "end": self.end,
            "hosts": list(self.hosts),
            "ranks": list(self.ranks),
            "event_count": self.event_count,
            "root_cause": self.root_cause.to_dict(),
            "related": [e.to_dict() for e in self.related],
        }


def event_priority(ev: FailureEvent, rules: RuleSet | None = None) -> int:
    """How likely this event is to be a cause rather than a consequence."""
    if ev.signature.startswith("xid") and is_consequence(ev.xid, ev.caused_by_xid):
        return _CONSEQUENCE_XID_PRIORITY
    rule = rules.by_id.get(ev.signature) if rules is not None else None
    if rule is not None and rule.category is ev.category:
        return rule.priority
    return CATEGORY_PRIORITY[ev.category]


def _dedupe_key(ev: FailureEvent) -> tuple[object, ...]:
    t = round(ev.time) if ev.time is not None else None
    if ev.xid is not None:
        return ("xid", ev.host, ev.gpu_pci, ev.xid, None if t is None else t // 60)
    text = ev.evidence[0].text.strip() if ev.evidence else ev.summary
    return (ev.signature, ev.host, ev.rank, ev.gpu_pci, t, text)


def deduplicate(events: Iterable[FailureEvent]) -> list[FailureEvent]:
    """Merge events that are the same evidence seen twice."""
    out: dict[tuple[object, ...], FailureEvent] = {}
    for ev in events:
        key = _dedupe_key(ev)
        prev = out.get(key)
        if prev is None:
            out[key] = ev
            continue
        keep, other = (prev, ev) if _better(prev, ev) else (ev, prev)
        evidence = keep.evidence + tuple(e for e in other.evidence if e not in keep.evidence)
        out[key] = replace(keep, evidence=evidence[:_MAX_EVIDENCE])
    return list(out.values())


def _better(a: FailureEvent, b: FailureEvent) -> bool:
    """Prefer an explicit XID line over an inferred one, then higher confidence."""
    return (a.signature == "xid", a.confidence) >= (b.signature == "xid", b.confidence)


def _anchor_times(events: Sequence[FailureEvent]) -> list[tuple[float | None, str]]:
    """(anchor, clock) per event; clock is 'abs', 'rel:<host>' or 'none'."""
    by_file: dict[str, list[int]] = defaultdict(list)
    for i, ev in enumerate(events):
        by_file[ev.evidence[0].path if ev.evidence else ""].append(i)
    out: list[tuple[float | None, str]] = [(None, "none")] * len(events)
    for idxs in by_file.values():
        idxs.sort(key=lambda i: events[i].evidence[0].line_no if events[i].evidence else 0)
        last: tuple[float | None, str] = (None, "none")
        pending: list[int] = []
        for i in idxs:
            ev = events[i]
            if ev.time is not None and ev.time_kind is not TimeKind.NONE:
                clock = "abs" if ev.time_kind is TimeKind.ABSOLUTE else f"rel:{ev.host}"
                anchor = ev.time - _hang_duration_s(ev)
                out[i] = (anchor, clock)
                last = (ev.time, clock)
                for j in pending:  # untimed lines before the first timed one in this file
                    out[j] = last
                pending = []
            elif last[0] is not None:
                out[i] = last
            else:
                pending.append(i)
    return out


def _hang_duration_s(ev: FailureEvent) -> float:
    for key in ("ran_ms", "timeout_ms"):
        value = ev.field_value(key)
        if value and value.isdigit():
            return min(int(value) / 1000.0, 6 * 3600.0)
    return 0.0


def _cluster(events: Sequence[FailureEvent], window_s: float) -> list[list[FailureEvent]]:
    anchors = _anchor_times(events)
    by_clock: dict[str, list[tuple[float, FailureEvent]]] = defaultdict(list)
    untimed: list[FailureEvent] = []
    for ev, (anchor, clock) in zip(events, anchors, strict=True):
        if anchor is None:
            untimed.append(ev)
        else:
            by_clock[clock].append((anchor, ev))
    clusters: list[list[FailureEvent]] = []
    for items in by_clock.values():
        items.sort(key=lambda x: x[0])
        current: list[FailureEvent] = []
        last = -float("inf")
        for anchor, ev in items:
            if current and anchor - last > window_s:
                clusters.append(current)
                current = []
            current.append(ev)
            # A folded run of repeats (aggregate.py) reaches to its last repeat's time.
            end = last_time(ev)
            last = max(last, anchor if end is None else max(anchor, end))
        if current:
            clusters.append(current)
    if untimed:
        if len(clusters) == 1:
            clusters[0].extend(untimed)
        else:
            clusters.append(untimed)
    return clusters


def _root_key(ev: FailureEvent, rules: RuleSet | None) -> tuple[object, ...]:
    line = ev.evidence[0].line_no if ev.evidence else 0
    t = ev.time if ev.time is not None and ev.time_kind is TimeKind.ABSOLUTE else float("inf")
    return (ev.severity is not Severity.INFO, event_priority(ev, rules),
            SEVERITY_RANK[ev.severity], ev.confidence, -t, -line)


def _build(cluster: list[FailureEvent], rules: RuleSet | None) -> Incident:
    root = max(cluster, key=lambda e: _root_key(e, rules))
    related = tuple(sorted((e for e in cluster if e is not root),
                           key=lambda e: (e.time if e.time is not None else float("inf"),
                                          e.evidence[0].path if e.evidence else "",
                                          e.evidence[0].line_no if e.evidence else 0)))
    times = [t for e in cluster if e.time_kind is TimeKind.ABSOLUTE
             for t in (e.time, last_time(e)) if t is not None]
    hosts = tuple(sorted({e.host for e in cluster if e.host}))
    ranks = tuple(sorted({e.rank for e in cluster if e.rank is not None}))
    # The culprit's location: the root's own, else what a launcher summary names
    # (torchrun's "Root Cause (first observed failure)", srun's failed task).
    ranked = sorted(cluster, key=lambda e: _root_key(e, rules), reverse=True)
    host = root.host or next((e.host for e in ranked if e.host and e.signature in
                              ("elastic_child_failed", "slurm_task_exit")), None)
    rank = root.rank if root.rank is not None else next(
        (e.rank for e in ranked if e.rank is not None and e.signature in
         ("elastic_child_failed", "slurm_task_exit") and (host is None or e.host == host)),
        None)
    if host is None and len(hosts) == 1:
        host = hosts[0]
    return Incident(root, related, min(times) if times else None, max(times) if times else None,
                    hosts, ranks, host, root.gpu_pci, root.gpu_index, rank)


def _incident_key(inc: Incident, rules: RuleSet | None) -> tuple[object, ...]:
    r = inc.root_cause
    start = inc.start if inc.start is not None else float("inf")
    return (r.severity is not Severity.INFO, SEVERITY_RANK[r.severity], event_priority(r, rules),
            r.confidence, inc.event_count, -start)


def correlate(events: Iterable[FailureEvent], rules: RuleSet | None = None,
              window_s: float = DEFAULT_WINDOW_S, include_info: bool = False) -> list[Incident]:
    """Group events into incidents, most important first.

    Incidents made only of informational events (a benign loss-scale overflow, an NFS server
    coming back) are dropped unless ``include_info``.
    """
    evs = deduplicate(events)
    incidents = [_build(c, rules) for c in _cluster(evs, window_s)]
    if not include_info:
        incidents = [i for i in incidents if i.severity is not Severity.INFO]
    incidents.sort(key=lambda i: _incident_key(i, rules), reverse=True)
    return incidents


__all__ = ["DEFAULT_WINDOW_S", "Incident", "correlate", "deduplicate", "event_priority"]
