"""Node-health memory: what each node did to past jobs, and which nodes are lemons.

A *lemon* is a repeat offender across jobs (Meta's study: 1.2% of nodes touched 13% of daily
jobs). Outline of :func:`lemon_score` (pure):
1. every incident on a node (an exclusion, a hardware XID, a detector alert, a job it took down,
   a failure that made it a suspect) has a weight by kind. A failed attempt counts as the
   supervisor judged it (:attr:`trainguard.recover.failure.Failure.implication`): a job taken
   down when hardware evidence on the node failed it (``fault``, the node was excluded); a
   suspicion when the evidence only pointed at the node (``suspect``: e.g. a hang's likely
   culprit, a network error), weighing as little as a detector alert; nothing when the node
   was not to blame (``none``: an injected fault, a bug, a job-level failure);
2. incidents of one job count once, at the weight of the worst (one XID and the exclusion it
   caused are one strike, not two);
3. each strike decays with its age (half-life, default 7 days): a node repaired a month ago
   starts clean;
4. the score is the sum; a node is a lemon when the score reaches ``threshold`` with strikes in at
   least ``min_jobs`` different jobs.

:func:`concentration` measures how unevenly exclusions fall on nodes (top-k share, Gini), the
report's "3 of 63 nodes caused more than half of all exclusions".
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from trainguard.concentration import Concentration, concentration
from trainguard.errors import ConfigError


class IncidentKind(StrEnum):
    EXCLUSION = "exclusion"
    XID = "xid"
    ALERT = "alert"
    JOB_FAILURE = "job_failure"
    """Hardware evidence on the node failed an attempt (implication ``fault``)."""
    SUSPICION = "suspicion"
    """The evidence of a failed attempt pointed at the node without proving it (implication
    ``suspect``)."""


WEIGHTS: Mapping[IncidentKind, float] = {
    IncidentKind.EXCLUSION: 1.0,
    IncidentKind.XID: 1.0,
    IncidentKind.JOB_FAILURE: 0.7,
    IncidentKind.ALERT: 0.3,
    IncidentKind.SUSPICION: 0.3,
}


@dataclass(frozen=True, slots=True)
class NodeIncident:
    node: str
    time: float
    kind: IncidentKind
    job: str | None = None
    """The session (job) it belongs to; None: a job of its own."""
    summary: str = ""


@dataclass(frozen=True, slots=True)
class LemonPolicy:
    half_life_s: float = 7 * 86400.0
    """Age at which an incident counts half."""
    threshold: float = 2.0
    """Score from which a node is a lemon."""
    min_jobs: int = 2
    """A lemon hurt at least this many different jobs."""

    def __post_init__(self) -> None:
        if not self.half_life_s > 0:
            raise ConfigError("half_life_s must be > 0")
        if self.threshold <= 0 or self.min_jobs < 1:
            raise ConfigError("threshold must be > 0 and min_jobs >= 1")


@dataclass(frozen=True, slots=True)
class LemonScore:
    score: float
    jobs: int
    """Distinct jobs with an incident on the node."""
    lemon: bool


def lemon_score(incidents: Iterable[NodeIncident], now: float,
                policy: LemonPolicy = LemonPolicy()) -> LemonScore:
    """Score one node's incidents (see the module outline)."""
    strikes: dict[str, tuple[float, float]] = {}  # job -> (weight, time of the worst)
    for i, inc in enumerate(incidents):
        job = inc.job if inc.job is not None else f"#{i}"
        weight = WEIGHTS[inc.kind]
        best = strikes.get(job)
        if best is None or weight > best[0] or (weight == best[0] and inc.time > best[1]):
            strikes[job] = (weight, inc.time)
    decay = math.log(2) / policy.half_life_s
    score = sum(w * math.exp(-decay * max(0.0, now - t)) for w, t in strikes.values())
    return LemonScore(round(score, 3), len(strikes),
                      score >= policy.threshold and len(strikes) >= policy.min_jobs)


def by_node(incidents: Iterable[NodeIncident]) -> dict[str, list[NodeIncident]]:
    grouped: dict[str, list[NodeIncident]] = defaultdict(list)
    for inc in incidents:
        grouped[inc.node].append(inc)
    return dict(grouped)


__all__ = [
    "WEIGHTS",
    "Concentration",
    "IncidentKind",
    "LemonPolicy",
    "LemonScore",
    "NodeIncident",
    "by_node",
    "concentration",
    "lemon_score",
]
