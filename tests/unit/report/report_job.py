"""A small supervised job written through the real Store API, for the report's tests."""

from __future__ import annotations

from trainguard.analytics import build_report
from trainguard.analytics.report import AnalyticsReport
from trainguard.evidence.events import FailureEvent, TimeKind
from trainguard.store import Store
from trainguard.taxonomy import Action, Category, Severity

SDK = {"launch": 0.1, "imports": 3.0, "dist_init": 0.7, "first_step": 0.2}


def job(store: Store, *, gap_s: float, sdk: bool = True, gbps: float = 1.0,
        stop_on_alert: bool = False, foretold_s: float | None = None) -> AnalyticsReport:
    """A crash (retried), a node failure (node08 excluded), then success; checkpoints of 5 MB
    saved at ``gbps``; ``gap_s`` between attempts. ``stop_on_alert``: the node failure is a
    predictive stop 0.1 s after the alert, which foretold the failure ``foretold_s`` ahead."""
    sid = store.create_session("gpt", backend="local", started=1000.0)
    t = 1000.0
    plan = [("unknown", "retry", None), ("gpu_hardware", "exclude_and_retry", "node08"),
            (None, None, None)]
    for i, (cause, decision, culprit) in enumerate(plan):
        aid = store.create_attempt(sid, index=i, nodes=["node07", "node08"], started=t)
        for k in range(1, 4):
            store.add_checkpoint(session_id=sid, attempt_id=aid, step=10 * k + 40 * i, path="c",
                                 created=t + 5.0 + k, size_bytes=5_000_000,
                                 save_s=5_000_000 * 8 / (gbps * 1e9), blocking_s=0.01)
        end = t + 10.0
        failed = cause is not None
        store.finish_attempt(
            aid, ended=end, status="failed" if failed else "succeeded", failure_category=cause,
            decision=decision, excluded_nodes=[culprit] if culprit else [],
            startup_phases=SDK if sdk else {"launch": 0.1},
            detail={"failure": {"kind": "node", "culprit_nodes": [culprit or "node08"]}
                    if failed else None, "failed_at": end - 0.1 if failed else None,
                    "last_step": 40 if sdk else None})
        if culprit and stop_on_alert:
            store.add_events([FailureEvent(
                category=Category.GPU_HARDWARE, action=Action.EXCLUDE_NODE,
                severity=Severity.FATAL, signature="detector_alert", summary="detector alert",
                time=end - 0.2, time_kind=TimeKind.ABSOLUTE, host=culprit,
                fields=(("alert_kind", "predictive"),
                        *((("predicted_failure_in_s", str(foretold_s)),) if foretold_s else ())),
            )], session_id=sid, attempt_id=aid)
        t = end + gap_s
    return build_report(store, now=t + 100)
