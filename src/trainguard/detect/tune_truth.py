"""Known failures from the event store (`tune --db`): the XID events `trainguard logs --db` and
`watch`'s kernel-log tailing recorded, turned into ground truth with the same rules as kernel
logs (application XIDs apart, XIDs on one node within 30 min one failure).

    >>> truth_from_events([]).failures
    ()
"""

from __future__ import annotations

from collections.abc import Iterable

from trainguard.detect.truth import GroundTruth, _events_to_truth, _XidEvent
from trainguard.evidence.events import FailureEvent, TimeKind

__all__ = ["truth_from_events"]


def truth_from_events(events: Iterable[FailureEvent]) -> GroundTruth:
    """Ground truth from stored evidence: events with an XID, a host and an absolute time
    (boot-relative times cannot be placed on the telemetry's clock)."""
    xids = [_XidEvent(ev.host, float(ev.time), int(ev.xid),
                      None if ev.gpu_index is None else str(ev.gpu_index))
            for ev in events
            if ev.xid is not None and ev.host and ev.time is not None
            and ev.time_kind is TimeKind.ABSOLUTE]
    return _events_to_truth(xids, "store")
