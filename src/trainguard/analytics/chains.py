"""Retry chains: a job's launches from a (re)start until it succeeds or is given up.

Outline of :func:`retry_chains` (per session, attempts by launch index):

1. the first attempt starts a chain, and so does every attempt with ``automatic`` False (an
   operator relaunched by hand, or the first run of an imported Slurm job); the other attempts
   (supervisor retries, Slurm requeues) continue the chain they follow;
2. a chain ends at its first succeeded attempt (a later attempt in the same session, e.g. a
   continuation, starts a new chain) or at the session's last attempt;
3. a retry interval is ``next.started - prev.ended`` for consecutive attempts of the session where
   ``prev`` did not succeed; it belongs to the chain of ``next``. A chain started by a manual
   relaunch therefore carries the operator's relaunch delay as its first interval, which is what
   "median retry interval 11 min" measures for manual recovery;
4. a chain is ``automatic`` when its first attempt was launched automatically (a supervised run),
   manual otherwise (an imported Slurm job is a manual chain; its requeues continue it).

:func:`chain_stats` summarizes the finished chains (a chain whose last attempt still runs has no
outcome yet and is left out): success rate = chains that ended in success / chains; attempts per
chain (mean, median); retry intervals (median, 25th and 75th percentile, numpy's default linear
method, see :func:`trainguard.analytics.runs.quantile`). Stats are given for all chains and for the
automatic and manual ones alone, with how many chains the supervisor stopped as crash loops
(restarts without progress, :mod:`trainguard.recover.crashloop`).

    >>> stats = chain_stats(retry_chains(runs))       # doctest: +SKIP
    >>> stats["automatic"].success_rate, stats["manual"].retry_interval_median_s  # doctest: +SKIP
    (0.9, 660.0)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainguard.analytics.runs import SUCCEEDED, RunView, mean, median, quantile
from trainguard.recover.crashloop import is_crash_loop_stop
from trainguard.store import RUNNING, AttemptRecord

GROUPS = ("all", "automatic", "manual")
"""Keys of :func:`chain_stats`."""


@dataclass(frozen=True, slots=True)
class Chain:
    """One retry chain (see the module outline)."""

    session_id: int
    attempts: tuple[AttemptRecord, ...]
    succeeded: bool
    automatic: bool
    retry_intervals_s: tuple[float, ...]

    @property
    def running(self) -> bool:
        """The last attempt has not finished: the chain has no outcome yet."""
        last = self.attempts[-1]
        return last.ended is None or last.status == RUNNING

    @property
    def crash_loop(self) -> bool:
        """The supervisor stopped the chain as a crash loop (its last attempt's decision)."""
        decision = self.attempts[-1].detail.get("decision")
        return not self.succeeded and isinstance(decision, dict) \
            and is_crash_loop_stop(decision)

    def to_dict(self) -> dict[str, object]:
        return {"session_id": self.session_id, "attempts": [a.index for a in self.attempts],
                "succeeded": self.succeeded, "automatic": self.automatic,
                "running": self.running, "retry_intervals_s": list(self.retry_intervals_s),
                "crash_loop": self.crash_loop}


@dataclass(frozen=True, slots=True)
class ChainStats:
    """Summary of a group of finished chains."""

    chains: int
    succeeded: int
    success_rate: float | None
    """succeeded / chains; None without chains."""
    attempts_mean: float | None
    attempts_median: float | None
    retry_interval_median_s: float | None
    retry_interval_p25_s: float | None
    retry_interval_p75_s: float | None
    retry_intervals: int = 0
    """How many retry intervals the quantiles are computed from."""
    crash_loops: int = 0
    """Chains the supervisor stopped as crash loops (restarts without progress)."""

    def to_dict(self) -> dict[str, object]:
        return {"chains": self.chains, "succeeded": self.succeeded,
                "success_rate": self.success_rate, "attempts_mean": self.attempts_mean,
                "attempts_median": self.attempts_median,
                "retry_interval_median_s": self.retry_interval_median_s,
                "retry_interval_p25_s": self.retry_interval_p25_s,
                "retry_interval_p75_s": self.retry_interval_p75_s,
                "retry_intervals": self.retry_intervals, "crash_loops": self.crash_loops}


def session_chains(run: RunView) -> list[Chain]:
    """The retry chains of one session (outline steps 1-4)."""
    groups: list[tuple[list[AttemptRecord], list[float]]] = []
    prev: AttemptRecord | None = None
    for a in run.attempts:
        new = prev is None or not a.automatic or prev.status == SUCCEEDED
        if new:
            groups.append(([], []))
        members, intervals = groups[-1]
        if prev is not None and prev.status != SUCCEEDED and prev.ended is not None:
            intervals.append(a.started - prev.ended)
        members.append(a)
        prev = a
    return [
        Chain(session_id=run.session_id, attempts=tuple(members),
              succeeded=members[-1].status == SUCCEEDED, automatic=members[0].automatic,
              retry_intervals_s=tuple(intervals))
        for members, intervals in groups
    ]


def retry_chains(runs: Iterable[RunView]) -> list[Chain]:
    """The retry chains of every run, run by run."""
    return [chain for run in runs for chain in session_chains(run)]


def summarize(chains: Sequence[Chain]) -> ChainStats:
    """Stats over the finished chains in ``chains`` (see the module docstring)."""
    done = [c for c in chains if not c.running]
    succeeded = sum(c.succeeded for c in done)
    lengths = [float(len(c.attempts)) for c in done]
    intervals = [x for c in done for x in c.retry_intervals_s]
    return ChainStats(
        chains=len(done),
        succeeded=succeeded,
        success_rate=succeeded / len(done) if done else None,
        attempts_mean=mean(lengths),
        attempts_median=median(lengths),
        retry_interval_median_s=median(intervals),
        retry_interval_p25_s=quantile(intervals, 0.25),
        retry_interval_p75_s=quantile(intervals, 0.75),
        retry_intervals=len(intervals),
        crash_loops=sum(c.crash_loop for c in done),
    )


def chain_stats(chains: Sequence[Chain]) -> dict[str, ChainStats]:
    """Stats for ``"all"`` chains, the ``"automatic"`` ones and the ``"manual"`` ones."""
    return {
        "all": summarize(chains),
        "automatic": summarize([c for c in chains if c.automatic]),
        "manual": summarize([c for c in chains if not c.automatic]),
    }


__all__ = ["GROUPS", "Chain", "ChainStats", "chain_stats", "retry_chains", "session_chains",
           "summarize"]
