"""From the detector's episodes to the alerts the watch service raises (pure).

Each round the service compares the episodes the detector has now (open ones, and closed ones
it still keeps) with the alerts it raised before, keyed by node, kind, start and source:

1. an episode not seen before is a new alert: ``fired`` (or, when it opened and closed inside
   one round, as during a catch-up after a restart, fired already resolved);
2. a raised alert whose episode has closed is ``resolved``;
3. a resolved alert whose episode re-opened (an onset inside the cool-down) fires again;
4. an open alert whose peak grew is ``updated`` (the store and Alertmanager get the new score).

The warm-up is reconciled once it is scored: episodes that closed before its end are history
(stored and reported, marked ``historical``, never paged or acted on, and not raised again by a
second warm-up); those still open fire as live alerts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from trainguard.detect.alerts import AlertEpisode
from trainguard.watch.state import LiveAlert, alert_key

__all__ = ["Change", "confidence", "episode_summary", "reconcile"]

ChangeKind = Literal["fired", "resolved", "updated"]


@dataclass(frozen=True, slots=True)
class Change:
    kind: ChangeKind
    alert: LiveAlert


def episode_summary(ep: AlertEpisode) -> str:
    """One line: kind, score and the strongest signals."""
    parts = []
    for s in ep.signals[:3]:
        where = f" {s.gpu}" if s.gpu else ""
        parts.append(f"{s.metric}{where} {s.deviation:+.1f}" + (f" ({s.detail})"
                                                               if s.detail else ""))
    head = (f"hard evidence on {ep.node}" if ep.kind.value == "hard"
            else f"{ep.node} deviates (score {ep.peak_score:.1f})")
    return head + (": " + "; ".join(parts) if parts else "")


def confidence(kind: str, peak: float, score_on: float) -> float:
    """How sure an alert is, 0..1, for the action policy: hard evidence 1; a predictive alert
    ``peak / (peak + score_on)`` (0.5 at the alert threshold, 0.8 at four times it)."""
    if kind == "hard":
        return 1.0
    if not math.isfinite(peak) or peak <= 0:
        return 0.0
    return peak / (peak + score_on)


def reconcile(known: Mapping[str, LiveAlert], open_eps: Iterable[AlertEpisode],
              closed_eps: Iterable[AlertEpisode], *, now: float,
              warm_until: float | None, scored_to: float) -> list[Change]:
    """The changes that bring `known` in line with the episodes (see the module docstring).

    `now` is the wall time stamped on new alerts; `scored_to` the detector time scored so far.
    """
    changes: list[Change] = []
    for ep, is_open in [(e, True) for e in open_eps] + [(e, False) for e in closed_eps]:
        key = alert_key(ep.node, ep.kind.value, ep.start, "detector")
        end = None if is_open else ep.end
        old = known.get(key)
        signals = tuple(s.to_dict() for s in ep.signals)
        if old is None:
            historical = (not is_open and warm_until is not None and ep.end < warm_until
                          and scored_to <= warm_until)
            alert = LiveAlert(node=ep.node, kind=ep.kind.value, start=ep.start, end=end,
                              peak=ep.peak_score, source="detector", raised_at=now,
                              signals=signals, summary=episode_summary(ep),
                              historical=historical)
            changes.append(Change("fired", alert))
        elif old.historical:
            continue
        elif old.open and not is_open:
            changes.append(Change("resolved", old.changed(end=end, peak=ep.peak_score,
                                                          signals=signals)))
        elif not old.open and is_open:
            changes.append(Change("fired", old.changed(end=None, peak=ep.peak_score,
                                                       signals=signals)))
        elif ep.peak_score > old.peak + 1e-9:
            changes.append(Change("updated", old.changed(peak=ep.peak_score, signals=signals,
                                                         summary=episode_summary(ep))))
    return changes
