"""What an attempt's evidence and records are made of, outside the attempt itself: the
classified tail of a failed rank's output, node evidence an agent collected, checkpoints a
resume rejected, and the record of an attempt whose launch failed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from trainguard.evidence.events import STORED_CHARS, EvidenceLine, FailureEvent
from trainguard.evidence.rules import RuleSet
from trainguard.filetail import read_tail
from trainguard.recover.backend import AttemptHandle, ReportsNodeEvents
from trainguard.recover.failure import launch_failure
from trainguard.recover.records import AttemptResult
from trainguard.recover.watch import RankWatch
from trainguard.taxonomy import Action, Category, Severity

TAIL_BYTES = 256 << 10
TAIL_LINES = 4000
"""A failed rank's output classified: its last lines, at most this many and ``TAIL_BYTES``."""

Scan = Callable[..., list[FailureEvent]]
"""Log classification (:func:`trainguard.evidence.scanner.scan_bytes`)."""


def remote_events(handle: AttemptHandle) -> list[FailureEvent]:
    """Node evidence an agent-run attempt collected on its hosts (none for local ranks)."""
    return list(handle.node_events()) if isinstance(handle, ReportsNodeEvents) else []


def tail_events(w: RankWatch, rules: RuleSet, scan: Scan) -> tuple[FailureEvent, ...]:
    """Classified evidence in the last lines of a failed rank's output."""
    try:
        data, first = read_tail(w.output, TAIL_BYTES, TAIL_LINES)
    except OSError:
        return ()
    found = scan(data, rules, path=str(w.output), first_line=first, host_hint=w.node)
    return tuple(replace(ev, rank=w.rank if ev.rank is None else ev.rank, host=w.node)
                 for ev in found)


def checkpoint_events(skipped: tuple[Mapping[str, Any], ...],
                      w: RankWatch) -> list[FailureEvent]:
    """One event per checkpoint the job's resume rejected."""
    events = []
    for s in skipped:
        summary = f"checkpoint {s.get('path')} rejected on resume: {s.get('reason')}"
        events.append(FailureEvent(
            category=Category.CHECKPOINT, action=Action.CHECK_STORAGE,
            severity=Severity.NON_FATAL, signature="checkpoint_rejected",
            summary=summary[:300], host=w.node, rank=w.rank,
            evidence=(EvidenceLine(str(w.events_path), 0, summary[:STORED_CHARS]),)))
    return events


def failed_launch(index: int, nodes: tuple[str, ...], started: float, ended: float, why: str,
                  store_id: int | None, *, exit_codes: Mapping[int, int | None] | None = None,
                  launch_s: float | None = None,
                  host_clocks: Mapping[str, Mapping[str, float | int]] | None = None
                  ) -> AttemptResult:
    """The record of attempt ``index``, whose launch failed (``why``): it counts as an attempt
    (it was announced, its directory and store row exist), failed, with no decision."""
    return AttemptResult(
        index=index, nodes=nodes, started=started, ended=ended, status="failed",
        exit_codes=dict(exit_codes or {}), failure=launch_failure(why),
        startup_phases={} if launch_s is None else {"launch": launch_s}, store_id=store_id,
        failed_at=ended, host_clocks=dict(host_clocks or {}))


__all__ = ["TAIL_BYTES", "TAIL_LINES", "Scan", "checkpoint_events", "failed_launch",
           "remote_events", "tail_events"]
