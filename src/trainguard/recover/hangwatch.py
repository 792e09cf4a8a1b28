"""The hang rule's inputs gathered while an attempt runs (the I/O around the pure
:mod:`trainguard.recover.liveness`): each rank's process state and CPU time, sent by its host's
agent, else read in ``/proc`` here where the pids are this machine's, else only whether the
backend calls it stopped; and the ranks' output, from their watches.

    hangs = HangWatch(spec, capabilities, handle, launched)
    verdict = hangs.check(now, watches, codes)   # each poll; None: no hang
"""

from __future__ import annotations

from collections.abc import Mapping

from trainguard.recover.backend import AttemptHandle, Capabilities, ReportsRankProcs
from trainguard.recover.liveness import (
    HangVerdict,
    LivenessLimits,
    LivenessTracker,
    ProcSample,
    RankLiveness,
    judge,
    snapshot,
)
from trainguard.recover.spec import JobSpec
from trainguard.recover.watch import RankWatch
from trainguard.trace.collect import group_usage

SAMPLE_EVERY_S = 1.0
"""How often the ranks' processes are sampled in ``/proc`` where their pids are local."""


class HangWatch:
    """The liveness evidence of one attempt (see the module docstring)."""

    def __init__(self, spec: JobSpec, capabilities: Capabilities, handle: AttemptHandle,
                 launched: float) -> None:
        self._handle = handle
        self._local = capabilities.has_local_pids
        self._launched = launched
        self._tracker = LivenessTracker(spec.hang_timeout_s)
        self._limits = LivenessLimits(spec.hang_timeout_s, spec.startup_timeout_s)
        self._next_sample = 0.0

    def check(self, now: float, watches: Mapping[int, RankWatch],
              codes: Mapping[int, int | None]) -> HangVerdict | None:
        """Sample (when due), then judge: the hang the evidence shows now, or None."""
        self._sample(now)
        heard = [w.last_output for w in watches.values() if w.last_output is not None]
        ranks = [RankLiveness(r, w.node, w.sdk, w.last_progress, w.progressed)
                 for r, w in sorted(watches.items()) if codes.get(r) is None and not w.finished]
        return judge(snapshot(now, self._launched, max(heard, default=None), ranks,
                              self._tracker), self._limits)

    def stopped(self, rank: int) -> bool:
        """The rank's last sample saw it stopped."""
        return self._tracker.state(rank) == "stopped"

    def _sample(self, now: float) -> None:
        handle, tracker = self._handle, self._tracker
        if isinstance(handle, ReportsRankProcs):
            for sample in handle.proc_samples():  # at most one per rank, timed here
                tracker.observe(ProcSample(sample.rank, now, sample.state, sample.cpu_s))
            return
        if now < self._next_sample:
            return
        self._next_sample = now + SAMPLE_EVERY_S
        running = handle.running()
        pids = {r: pid for r, pid in handle.pids().items() if r in running}
        usage = group_usage(pids) if pids and self._local else {}
        for rank in sorted(running):
            if rank in usage:
                state, cpu = usage[rank]
                tracker.observe(ProcSample(rank, now, state, cpu))
            else:
                tracker.observe(ProcSample(rank, now, "stopped" if handle.is_stopped(rank)
                                           else "running"))


__all__ = ["SAMPLE_EVERY_S", "HangWatch"]
