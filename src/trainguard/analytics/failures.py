"""Failure rates and recovery times: how often jobs fail, per node-day, and how long they take to
train again.

Definitions (finished attempts only; an attempt still running is left out):

1. failures = attempts with status ``failed`` (cancellations are not failures), counted by
   ``failure_category`` (``unknown`` when none was recorded);
2. node-days = sum over attempts of ``(ended - started) * len(nodes) / 86400``;
   ``per_node_day = failures / node_days`` (None for zero node-days);
3. MTTF = total training time / failures, where the training time is the sum of the attempts'
   wall durations ``ended - started`` (a job-level mean time to failure; None without failures);
4. time to resume, for each failed attempt followed by another attempt of the same session:
   ``next.started + startup(next) - failure_time(failed)``, i.e. from the failure (``failed_at``,
   else ``ended``) until the next attempt finished its first step. An attempt without startup
   phases (Slurm history) counts its startup as 0, so its resume time is only the relaunch gap.
   When the next attempt ran without the SDK (:func:`trainguard.analytics.runs.without_sdk`) its
   first step is unknown, and so is the resume time (None): it is not the launch time;
5. MTTR = the mean of the known resume times (None when there is none); ``resumes_unknown``
   counts the recoveries left out.

    >>> stats = failure_stats(runs)             # doctest: +SKIP
    >>> stats.failures, stats.mttr_s            # doctest: +SKIP
    (3, 184.5)
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trainguard.analytics.runs import (
    FAILED,
    RunView,
    failure_time,
    mean,
    startup_s,
    without_sdk,
)
from trainguard.store import RUNNING

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Resume:
    """One recovery: a failed attempt and the launch that took over."""

    session_id: int
    failed_attempt_id: int
    next_attempt_id: int
    category: str
    resume_s: float | None
    """None when the next attempt ran without the SDK (its first step is unknown)."""
    automatic: bool
    """The next attempt was launched automatically."""


@dataclass(frozen=True, slots=True)
class FailureStats:
    """Failure counts and rates, MTTF and MTTR over a set of runs (see the module docstring).

        >>> FailureStats(0, {}, 0.0, None, None, None, ()).failures
        0
    """

    failures: int
    by_category: Mapping[str, int]
    node_days: float
    per_node_day: float | None
    mttf_s: float | None
    mttr_s: float | None
    resume_s: tuple[float, ...]
    """Known times to resume after each failed attempt followed by another, in run order."""
    training_s: float = 0.0
    """Sum of the finished attempts' wall durations (MTTF's numerator)."""
    resumes: tuple[Resume, ...] = field(default=())

    @property
    def resumes_unknown(self) -> int:
        """Recoveries whose resume time is unknown (the relaunch ran without the SDK)."""
        return sum(r.resume_s is None for r in self.resumes)

    @property
    def node_s(self) -> float:
        return self.node_days * SECONDS_PER_DAY

    def to_dict(self) -> dict[str, object]:
        return {"failures": self.failures, "by_category": dict(self.by_category),
                "node_days": self.node_days, "per_node_day": self.per_node_day,
                "mttf_s": self.mttf_s, "mttr_s": self.mttr_s, "resume_s": list(self.resume_s),
                "resumes_unknown": self.resumes_unknown, "training_s": self.training_s}


def resumes(run: RunView) -> list[Resume]:
    """Definition 4 for one run."""
    out: list[Resume] = []
    for failed, nxt in itertools.pairwise(run.attempts):
        failed_t = failure_time(failed)
        if failed.status != FAILED or failed_t is None:
            continue
        out.append(Resume(
            session_id=run.session_id, failed_attempt_id=failed.id, next_attempt_id=nxt.id,
            category=failed.failure_category or "unknown",
            resume_s=None if without_sdk(nxt) else nxt.started + startup_s(nxt) - failed_t,
            automatic=nxt.automatic))
    return out


def failure_stats(runs: Iterable[RunView]) -> FailureStats:
    """Failures, node-days, MTTF and MTTR over ``runs`` (see the module docstring)."""
    runs = list(runs)
    categories: Counter[str] = Counter()
    node_seconds = training = 0.0
    for run in runs:
        for a in run.attempts:
            if a.ended is None or a.status == RUNNING:
                continue
            duration = max(0.0, a.ended - a.started)
            training += duration
            node_seconds += duration * len(a.nodes)
            if a.status == FAILED:
                categories[a.failure_category or "unknown"] += 1
    failures = sum(categories.values())
    node_days = node_seconds / SECONDS_PER_DAY
    recoveries = tuple(r for run in runs for r in resumes(run))
    resume_s = tuple(r.resume_s for r in recoveries if r.resume_s is not None)
    return FailureStats(
        failures=failures,
        by_category=dict(sorted(categories.items(), key=lambda kv: (-kv[1], kv[0]))),
        node_days=node_days,
        per_node_day=failures / node_days if node_days > 0 else None,
        mttf_s=training / failures if failures else None,
        mttr_s=mean(resume_s),
        resume_s=resume_s,
        training_s=training,
        resumes=recoveries,
    )


__all__ = ["SECONDS_PER_DAY", "FailureStats", "Resume", "failure_stats", "resumes"]
