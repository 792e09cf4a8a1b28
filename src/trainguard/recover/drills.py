"""Fault drills: the supervisor-side faults of ``--inject`` fired into a running attempt.

A rank is killed or stopped through its handle (a drill its handle cannot deliver yet, its
agent not yet connected, is due again at the next poll), an XID line is appended to a node's
kernel log (by the node's agent where agents read the logs), a detector alert is appended to the
alerts file. The in-process faults (nan, slow, ...) reach the ranks in their environment instead
(:mod:`trainguard.recover.launchplan`) and are fired by the SDK.

    drills = Drills(spec, caps, clock=time.time, status=print)
    fire = drills.for_attempt(index, nodes, launched)
    fired = fire(now, steps, handle)      # each call fires what has come due
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from trainguard.errors import LaunchError
from trainguard.faultspec import FaultKind
from trainguard.recover.backend import AttemptHandle, Capabilities, WritesKernelLogs
from trainguard.recover.inject import (
    FaultSchedule,
    Firing,
    alert_record,
    append_line,
    signal_for,
    xid_line,
)
from trainguard.recover.injected import Injection
from trainguard.recover.spec import JobSpec


class Drills:
    """Fires the faults of ``spec.faults`` that the supervisor delivers."""

    def __init__(self, spec: JobSpec, capabilities: Capabilities, *,
                 clock: Callable[[], float], status: Callable[[str], None]) -> None:
        self.spec = spec
        self.capabilities = capabilities
        self.clock = clock
        self.status = status

    def for_attempt(self, index: int, nodes: tuple[str, ...],
                    launched: float) -> AttemptDrills:
        schedule = FaultSchedule.for_attempt(self.spec.faults, index, nodes,
                                             self.spec.nproc_per_node, launched)
        return AttemptDrills(self, schedule)

    def fire(self, firing: Firing, handle: AttemptHandle) -> None:
        kind, node = firing.spec.kind, firing.node
        if kind is FaultKind.XID:
            self._xid(node, firing.spec.xid, handle)
        elif kind is FaultKind.ALERT:
            self._alert(node)
        elif not self.capabilities.can_signal_rank:
            self.status(f"inject: {kind.value}: this backend cannot signal a rank")
        elif firing.rank is not None:
            handle.signal_rank(firing.rank, signal_for(kind))
            self.status(f"inject: {kind.value} rank {firing.rank} on {node}")

    def _xid(self, node: str, xid: int, handle: AttemptHandle) -> None:
        self.status(f"inject: XID {xid} into {node}'s kernel log")
        line = xid_line(node, xid)
        if self.capabilities.reads_kernel_logs and isinstance(handle, WritesKernelLogs):
            try:
                handle.append_kernel_line(node, line)  # the node's agent writes its own log
            except LaunchError as exc:
                self.status(f"inject: {exc}")
        else:
            append_line(self.spec.kernel_log_path(node), line)

    def _alert(self, node: str) -> None:
        alerts = self.spec.alerts_file
        if alerts is None:  # JobSpec refuses alert faults without an alerts file
            self.status("inject: alert: no --alerts file to append to")
            return
        record = alert_record(node, self.clock(), self.spec.alerts_replay)
        self.status(f"inject: {record.get('kind')} detector alert on {node} "
                     f"({record.get('source')})")
        append_line(alerts, json.dumps(record) + "\n")


class AttemptDrills:
    """The drills of one attempt: call it each poll; returns the faults fired (as written).
    :attr:`injected` keeps each as an :class:`~trainguard.recover.injected.Injection`, so the
    failure it causes is named as injected."""

    def __init__(self, drills: Drills, schedule: FaultSchedule) -> None:
        self._drills = drills
        self._schedule = schedule
        self._deferred: set[int] = set()
        self.injected: list[Injection] = []

    def __call__(self, now: float, steps: Mapping[int, int | None],
                 handle: AttemptHandle) -> list[str]:
        if not handle.running():
            # Every rank has exited: a fault now would land after the attempt's end (a poll
            # that came late), not in it. It stays unfired, and :meth:`unfired` says so.
            return []
        fired = []
        for firing in self._schedule.due(now, steps):
            try:
                self._drills.fire(firing, handle)
            except LaunchError as exc:
                # Not deliverable yet (the rank's agent has not connected): due again at the
                # next poll, said once.
                firing.fired = False
                if id(firing) not in self._deferred:
                    self._deferred.add(id(firing))
                    self._drills.status(f"inject: {firing.spec} waits: {exc}")
                continue
            fired.append(str(firing.spec))
            self.injected.append(injection_of(firing, now))
        return fired

    def unfired(self) -> list[str]:
        """The drills of this attempt that never fired (it ended before they were due)."""
        return [str(f.spec) for f in self._schedule.firings if not f.fired]


def injection_of(firing: Firing, now: float) -> Injection:
    """A fired drill as an injection: a kill or hang is of its rank, an XID or alert on its
    node."""
    kind = firing.spec.kind
    on_rank = kind in (FaultKind.KILL, FaultKind.HANG)
    return Injection(kind.value, firing.rank if on_rank else None, firing.node,
                     f"--inject {firing.spec}", now)


__all__ = ["AttemptDrills", "Drills", "injection_of"]
