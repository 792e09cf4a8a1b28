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
3. cluster anchors with a gap threshold (single linkage) over the non-informational events;
   benign ones (an fp16 overflow) join a cluster they fall near but never bridge or start one;
   seconds since boot (plain ``dmesg``) are a clock of their own per host (per file when the
   lines name no host), clustered on it but comparable with no wall-clock time: when the
   wall-clock events form a single cluster and each boot clock a single cluster, those join it
   (the XID in a dmesg excerpt and the NCCL timeouts it caused), else they stay incidents of
   their own; events with no usable time form one group that joins the single cluster left
   when there is only one;
4. in each cluster the root cause is the non-informational event with the highest priority
   (hardware > host OOM > storage > ... > user code > network > NCCL timeout > launcher
   summaries), then severity, confidence, and the earliest time (the first rank to fail);
   its host, rank and GPU come from the root event, else from events reporting the same cause,
   and only then from a launcher's summary; the incident starts at its first causal event;
5. incidents are ordered most important first (a GPU hardware incident that cannot be ordered
   in time against a leading CUDA software error goes before it: ``precedence.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainguard.evidence.aggregate import last_time, repeats
from trainguard.evidence.alternatives import Alternative, alternatives
from trainguard.evidence.clocks import WALL_CLOCK, anchor_times, wall_time
from trainguard.evidence.collectives import collective_mismatch
from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.evidence.inference import Inference, infer
from trainguard.evidence.precedence import adjusted_priorities, hardware_first
from trainguard.evidence.rules import RuleSet
from trainguard.evidence.signals import SIGNAL_FIELD, is_teardown
from trainguard.evidence.suspicion import SIGNATURE as SUSPICION_SIGNATURE
from trainguard.evidence.textmodel import TEXT_LINES
from trainguard.evidence.textread import read_text
from trainguard.evidence.xid import is_consequence
from trainguard.taxonomy import CATEGORY_PRIORITY, SEVERITY_RANK, Action, Category, Severity

DEFAULT_WINDOW_S = 900.0
_CONSEQUENCE_XID_PRIORITY = 12
_MAX_EVIDENCE = 6
_MAX_SUSPICIOUS_LINES = 8
_MAX_ALTERNATIVE_LINES = 200
_SUSPICION_PRIORITY = 1  # above benign look-alikes, below every signature
_NO_INFERENCE = Inference()
_LAUNCHER_SIGNATURES = frozenset({"elastic_child_failed", "slurm_task_exit"})


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
    alternatives: tuple[Alternative, ...] = ()
    """For an ``unknown`` incident, the two most likely categories with calibrated confidence
    and the lines behind them (``alternatives.py``), computed once by :func:`correlate`; else
    nothing."""
    inference: Inference = _NO_INFERENCE
    """What the learned models changed (``inference.py``): a category answered for an
    ``unknown``, ``fix_config`` where the lines read like a setting to change."""

    @property
    def category(self) -> Category:
        """The rules' category, or the one a model gave (``inference.py``, ``textread.py``)."""
        return self.inference.applied(self.root_cause.category, self.root_cause.action)[0]

    @property
    def action(self) -> Action:
        return self.inference.applied(self.root_cause.category, self.root_cause.action)[1]

    @property
    def inferred(self) -> bool:
        """The category is a model's: an ``unknown`` answered, or an unsure rule overruled."""
        return self.inference.category is not None

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
    def suspicious(self) -> bool:
        """No signature explains this incident: it stands on failure words alone."""
        return self.root_cause.signature == SUSPICION_SIGNATURE

    @property
    def suspicious_lines(self) -> tuple[EvidenceLine, ...]:
        """For an ``unknown`` incident, the lines whose failure words made it suspicious."""
        if self.root_cause.category is not Category.UNKNOWN:
            return ()
        lines = [line for e in (self.root_cause, *self.related)
                 if e.signature == SUSPICION_SIGNATURE for line in e.evidence]
        lines.sort(key=lambda e: (e.path, e.line_no))
        return tuple(dict.fromkeys(lines))[:_MAX_SUSPICIOUS_LINES]

    @property
    def lines(self) -> tuple[EvidenceLine, ...]:
        """Every evidence line of the incident once, the root cause's first (at most 200)."""
        return _lines_of(self.root_cause, self.related)

    @property
    def evidence_lines(self) -> tuple[EvidenceLine, ...]:
        """Every event's evidence lines (not capped, not deduplicated): what the rules read."""
        return tuple(e for ev in (self.root_cause, *self.related) for e in ev.evidence)

    @property
    def text_lines(self) -> tuple[EvidenceLine, ...]:
        """What the text model reads: every evidence line and its neighbours
        (``FailureEvent.context``) once, in file order (at most ``TEXT_LINES``). A line that is
        one event's evidence and another's neighbour is read as the evidence (whole, not cut)."""
        events = (self.root_cause, *self.related)
        lines = {(e.path, e.line_no): e for ev in events for e in ev.context}
        lines.update(((e.path, e.line_no), e) for ev in events for e in ev.evidence)
        return tuple(lines[k] for k in sorted(lines))[:TEXT_LINES]

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
            "suspicious_lines": [e.to_dict() for e in self.suspicious_lines],
            "alternatives": [a.to_dict() for a in self.alternatives],
            "inferred": self.inferred,
            "inferred_category": (self.inference.category.to_dict()
                                  if self.inference.category is not None else None),
            "inferred_action": (self.inference.action.to_dict()
                                if self.inference.action is not None else None),
            "root_cause": self.root_cause.to_dict(),
            "related": [e.to_dict() for e in self.related],
        }


def event_priority(ev: FailureEvent, rules: RuleSet | None = None) -> int:
    """How likely this event is to be a cause rather than a consequence."""
    if ev.signature == SUSPICION_SIGNATURE:
        return _SUSPICION_PRIORITY
    if ev.signature.startswith("xid") and is_consequence(ev.xid, ev.caused_by_xid):
        return _CONSEQUENCE_XID_PRIORITY
    rule = rules.by_id.get(ev.signature) if rules is not None else None
    # A launcher's report read by a teardown signal (classify.py: SIGABRT after a collective
    # timeout, SIGTERM from the launcher or scheduler) keeps the launcher's low priority: the
    # job's own machinery sent it, so it never outranks a cause. Other readings (SIGKILL: the
    # OOM killer; SIGSEGV: the process's own fault) rank as their category.
    if rule is not None and (rule.category is ev.category or (
            rule.category is Category.UNKNOWN and is_teardown(ev.field_value(SIGNAL_FIELD)))):
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


def _cluster(events: Sequence[FailureEvent], window_s: float) -> list[list[FailureEvent]]:
    """Single-linkage clusters of the causal events; benign events join, never bridge.

    A benign line (an fp16 overflow every few minutes) must not chain two failures hours apart
    into one incident, nor stretch an incident back to itself: informational events are
    clustered only after the others, joining the causal cluster they fall within a window of.
    """
    anchors = anchor_times(events)
    by_clock: dict[str, list[tuple[float, FailureEvent]]] = defaultdict(list)
    info_by_clock: dict[str, list[tuple[float, FailureEvent]]] = defaultdict(list)
    untimed: list[FailureEvent] = []
    for ev, (anchor, clock) in zip(events, anchors, strict=True):
        if anchor is None:
            untimed.append(ev)
        elif ev.severity is Severity.INFO:
            info_by_clock[clock].append((anchor, ev))
        else:
            by_clock[clock].append((anchor, ev))
    timed: list[list[FailureEvent]] = []
    boot: list[list[list[FailureEvent]]] = []
    benign: list[list[FailureEvent]] = []
    for clock in sorted(set(by_clock) | set(info_by_clock)):
        causal, info_only = _clock_clusters(by_clock.get(clock, []),
                                            info_by_clock.get(clock, []), window_s)
        if clock == WALL_CLOCK:
            timed.extend(causal)
        elif causal:
            boot.append(causal)
        benign.extend(info_only)
    if len(timed) == 1 and boot and all(len(b) == 1 for b in boot):
        for (c,) in boot:  # seconds since boot place nothing: one failure each side, one cause
            timed[0].extend(c)
    else:
        timed.extend(c for b in boot for c in b)
    clusters = timed + benign
    if untimed:
        if len(clusters) == 1:
            clusters[0].extend(untimed)
        else:
            clusters.append(untimed)
    return clusters


def _clock_clusters(causal_items: list[tuple[float, FailureEvent]],
                    info_items: list[tuple[float, FailureEvent]], window_s: float
                    ) -> tuple[list[list[FailureEvent]], list[list[FailureEvent]]]:
    """On one clock: the causal clusters, each with the benign events that fall within a
    window of it, and the clusters of the benign events left over."""
    causal = _single_linkage(causal_items, window_s)
    spans = [(lo - window_s, hi + window_s) for lo, hi, _ in causal]
    leftover: list[tuple[float, FailureEvent]] = []
    for anchor, ev in info_items:
        end = last_time(ev)
        hi = anchor if end is None else max(anchor, end)
        home = next((i for i, (a, b) in enumerate(spans) if hi >= a and anchor <= b), None)
        if home is None:
            leftover.append((anchor, ev))
        else:
            causal[home][2].append(ev)
    return [c for _, _, c in causal], [c for _, _, c in _single_linkage(leftover, window_s)]


def _single_linkage(items: list[tuple[float, FailureEvent]], window_s: float
                    ) -> list[tuple[float, float, list[FailureEvent]]]:
    """(first anchor, last time, events) per run of anchors no more than ``window_s`` apart."""
    out: list[tuple[float, float, list[FailureEvent]]] = []
    items = sorted(items, key=lambda x: x[0])
    current: list[FailureEvent] = []
    first = last = -float("inf")
    for anchor, ev in items:
        if current and anchor - last > window_s:
            out.append((first, last, current))
            current = []
        if not current:
            first = anchor
        current.append(ev)
        # A folded run of repeats (aggregate.py) reaches to its last repeat's time.
        end = last_time(ev)
        last = max(last, anchor if end is None else max(anchor, end))
    if current:
        out.append((first, last, current))
    return out


def _root_key(ev: FailureEvent, priorities: dict[int, int]) -> tuple[object, ...]:
    line = ev.evidence[0].line_no if ev.evidence else 0
    t = ev.time if ev.time is not None and ev.time_kind is TimeKind.ABSOLUTE else float("inf")
    return (ev.severity is not Severity.INFO, priorities[id(ev)], SEVERITY_RANK[ev.severity],
            ev.confidence, -t, -line)


def _build(cluster: list[FailureEvent], rules: RuleSet | None) -> Incident:
    prio = adjusted_priorities(cluster, lambda e: event_priority(e, rules))
    root = max(cluster, key=lambda e: _root_key(e, prio))
    if root.category is Category.NCCL_TIMEOUT_HANG and \
            (mismatch := collective_mismatch(cluster)) is not None:
        root = mismatch
    related = tuple(sorted((e for e in cluster if e is not root and not (
                               root.signature == "collective_mismatch"
                               and e.evidence == root.evidence)),
                           key=lambda e: (wall_time(e),
                                          e.evidence[0].path if e.evidence else "",
                                          e.evidence[0].line_no if e.evidence else 0)))
    hosts = tuple(sorted({e.host for e in cluster if e.host}))
    ranks = tuple(sorted({e.rank for e in cluster if e.rank is not None}))
    ranked = sorted(cluster, key=lambda e: _root_key(e, prio), reverse=True)
    host, rank, gpu, gpu_index = _culprit(root, ranked)
    if host is None and len(hosts) == 1:
        host = hosts[0]
    start, end = _span(cluster)
    alts = (alternatives(_lines_of(root, related)) if root.category is Category.UNKNOWN
            else ())
    return Incident(root, related, start, end, hosts, ranks, host, gpu, gpu_index, rank,
                    alternatives=alts)


def _lines_of(root: FailureEvent, related: Sequence[FailureEvent]
              ) -> tuple[EvidenceLine, ...]:
    """Every evidence line of these events once, the root cause's first (at most 200)."""
    lines = [line for e in (root, *related) for line in e.evidence]
    return tuple(dict.fromkeys(lines))[:_MAX_ALTERNATIVE_LINES]


def _span(cluster: Sequence[FailureEvent]) -> tuple[float | None, float | None]:
    """First causal event to last event: a benign line before the failure does not start it."""
    def times(evs: Iterable[FailureEvent]) -> list[float]:
        return [t for e in evs if e.time_kind is TimeKind.ABSOLUTE
                for t in (e.time, last_time(e)) if t is not None]

    every = times(cluster)
    causal = times(e for e in cluster if e.severity is not Severity.INFO) or every
    return (min(causal) if causal else None), (max(every) if every else None)


def _culprit(root: FailureEvent, ranked: Sequence[FailureEvent]
             ) -> tuple[str | None, int | None, str | None, int | None]:
    """Where the root cause happened: host, rank, GPU.

    Each comes from the root event itself, else from another event that reports the same
    cause (an XID line names the GPU and host, the CUDA error of the same failure names the
    rank), and only then from a launcher's summary (torchrun's "Root Cause (first observed
    failure)", srun's failed task): a launcher's task number is a process slot, not the rank
    that hit the fault.
    """
    same = [e for e in ranked if e is not root and e.category is root.category
            and e.severity is not Severity.INFO and root.category is not Category.UNKNOWN]
    launchers = [e for e in ranked if e.signature in _LAUNCHER_SIGNATURES]

    def agrees(e: FailureEvent, host: str | None) -> bool:
        return host is None or e.host is None or e.host == host

    host = root.host or next((e.host for e in same if e.host), None) or next(
        (e.host for e in launchers if e.host), None)
    rank = root.rank
    if rank is None:
        rank = next((e.rank for e in same if e.rank is not None and agrees(e, host)), None)
    if rank is None:
        rank = next((e.rank for e in launchers if e.rank is not None and agrees(e, host)),
                    None)
    gpu = root.gpu_pci or next((e.gpu_pci for e in same if e.gpu_pci and agrees(e, host)),
                               None)
    gpu_index = root.gpu_index
    if gpu_index is None and gpu is None:
        gpu_index = next((e.gpu_index for e in same
                          if e.gpu_index is not None and agrees(e, host)), None)
    return host, rank, gpu, gpu_index


def _incident_key(inc: Incident, rules: RuleSet | None) -> tuple[object, ...]:
    r = inc.root_cause
    start = inc.start if inc.start is not None else float("inf")
    return (r.severity is not Severity.INFO, SEVERITY_RANK[r.severity], event_priority(r, rules),
            r.confidence, inc.event_count, -start)


def correlate(events: Iterable[FailureEvent], rules: RuleSet | None = None,
              window_s: float = DEFAULT_WINDOW_S, include_info: bool = False,
              learned: bool = True) -> list[Incident]:
    """Group events into incidents, most important first.

    With ``learned`` (the default) the learned models may answer an ``unknown`` incident's
    category and turn an action into ``fix_config`` (``inference.py``), and the text model may
    answer an ``unknown`` or overrule an unsure rule (``textread.py``), marked as inferred.

    Incidents made only of informational events (a benign loss-scale overflow, an NFS server
    coming back) are dropped unless ``include_info``; those that stand on failure words no
    signature explains (``failure_words`` events, see ``suspicion.py``) are kept as ``unknown``
    incidents with a low confidence, ranked after every explained one.
    """
    evs = deduplicate(events)
    incidents = [_build(c, rules) for c in _cluster(evs, window_s)]
    if not include_info:
        incidents = [i for i in incidents if i.severity is not Severity.INFO or i.suspicious]
    incidents.sort(key=lambda i: _incident_key(i, rules), reverse=True)
    return [with_inference(i) if learned else i for i in hardware_first(incidents)]


def with_inference(inc: Incident) -> Incident:
    """The incident with the learned models' decisions (``inference.py``)."""
    root = inc.root_cause
    # Only what no signature explains is guessed at: a rule that says ``unknown`` (a benign
    # look-alike, a launcher's bare exit summary) has read the line already.
    alts = inc.alternatives if inc.suspicious else ()
    found = infer(root.category, root.action, [e.program_text for e in root.evidence], alts,
                  lines=[e.program_text for e in inc.lines])
    return replace(inc, inference=read_text(found, root, inc.text_lines, inc.suspicious,
                                            inc.evidence_lines, inc.related))


__all__ = ["DEFAULT_WINDOW_S", "Incident", "correlate", "deduplicate", "event_priority",
           "with_inference"]
