"""Alerts a supervisor read from its alert feed (recorded as ``detector_alert`` events) count for
lead times; an alert that made the supervisor stop the attempt is a predictive stop, not a miss."""

from __future__ import annotations

import pytest

from trainguard.analytics import build_report
from trainguard.analytics.leadtime import PREDICTED_FAILURE_IN_S, alert_marks, merge_alerts
from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.report.summary import lead_text, stop_latency_text
from trainguard.store import Store
from trainguard.taxonomy import Action, Category, Severity


def alert_event(node: str, start: float, *, fatal: bool, kind: str = "predictive",
                foretold_s: float | None = None) -> FailureEvent:
    """The event `trainguard run` records for an alert line of its --alerts feed."""
    fields = [("alert_kind", kind), ("source", "replay of trainguard")]
    if foretold_s is not None:
        fields.append((PREDICTED_FAILURE_IN_S, str(foretold_s)))
    return FailureEvent(
        category=Category.GPU_HARDWARE, action=Action.EXCLUDE_NODE,
        severity=Severity.FATAL if fatal else Severity.NON_FATAL, signature="detector_alert",
        summary=f"detector {kind} alert", time=start, time_kind=TimeKind.ABSOLUTE, host=node,
        fields=tuple(fields), evidence=(EvidenceLine("alerts.jsonl", 1, "detector alert"),))


def failed_attempt(store: Store, sid: int, index: int, started: float, failed_at: float,
                   culprit: str, category: str) -> int:
    aid = store.create_attempt(sid, index=index, nodes=["node07", "node08"], started=started)
    store.finish_attempt(aid, ended=failed_at + 0.05, status="failed", failure_category=category,
                         decision="exclude_and_retry", excluded_nodes=[culprit],
                         startup_phases={"launch": 0.1, "first_step": 1.0},
                         detail={"failure": {"kind": "node", "culprit_nodes": [culprit]},
                                 "failed_at": failed_at, "last_step": 45})
    return aid


@pytest.mark.parametrize("reaction_s", [0.056, 2.0, 30.0])
def test_predictive_stop_counts_as_predicted(reaction_s: float) -> None:
    t0 = 1_795_654_916.0
    alert_at = t0 + 14.0
    with Store.open(":memory:") as store:
        sid = store.create_session("demo", backend="local", started=t0)
        aid = failed_attempt(store, sid, 0, t0, alert_at + reaction_s, "node08", "gpu_hardware")
        store.add_events([alert_event("node08", alert_at, fatal=True)], session_id=sid,
                         attempt_id=aid)
        assert store.alerts() == []  # the alert is known from the event only
        lt = build_report(store, now=t0 + 100).lead_times
    assert (lt.with_culprit, lt.predicted, lt.stopped, lt.missed) == (1, 1, 1, 0)
    (lead,) = lt.leads
    assert lead.stopped and lead.node == "node08" and lead.alert_id is None
    # the job left before the failure: the alert -> stop reaction is no lead
    assert (lead.lead_s, lead.lead_to) == (None, "")
    assert lead.stop_latency_s == pytest.approx(reaction_s)
    assert lt.lead_median_s is None
    assert "1 predictive stop" in lead_text(lt) and "0 missed" in lead_text(lt)


@pytest.mark.parametrize("foretold_s", [720.0, 870.0])
def test_a_predictive_stop_s_lead_is_to_the_failure_it_foretold(foretold_s: float) -> None:
    t0 = 1_795_654_916.0
    alert_at = t0 + 14.0
    with Store.open(":memory:") as store:
        sid = store.create_session("demo", backend="local", started=t0)
        aid = failed_attempt(store, sid, 0, t0, alert_at + 0.087, "node08", "gpu_hardware")
        store.add_events([alert_event("node08", alert_at, fatal=True, foretold_s=foretold_s)],
                         session_id=sid, attempt_id=aid)
        lt = build_report(store, now=t0 + 100).lead_times
    (lead,) = lt.leads
    assert lead.stopped and lead.lead_to == "prediction"
    assert lead.lead_s == pytest.approx(foretold_s)
    assert lead.stop_latency_s == pytest.approx(0.087, abs=1e-5)
    assert lt.lead_median_s == pytest.approx(foretold_s)
    assert stop_latency_text(lt) == "87 ms (1 stop)"


def test_a_predictive_stop_s_lead_is_to_the_node_s_later_failure() -> None:
    # The job moved off node08 on the predictive alert; node08's XID came 10 minutes later.
    t0 = 1_795_654_916.0
    alert_at = t0 + 14.0
    with Store.open(":memory:") as store:
        sid = store.create_session("demo", backend="local", started=t0)
        aid = failed_attempt(store, sid, 0, t0, alert_at + 0.5, "node08", "gpu_hardware")
        store.add_events([alert_event("node08", alert_at, fatal=True, foretold_s=3600.0)],
                         session_id=sid, attempt_id=aid)
        store.add_alert(node="node08", start=alert_at + 600.0, end=None, peak_score=100.0,
                        kind="hard")
        store.add_alert(node="node07", start=alert_at + 60.0, end=None, peak_score=100.0,
                        kind="hard")  # another node's failure foretells nothing here
        lt = build_report(store, now=t0 + 3600).lead_times
    (lead,) = lt.leads
    assert (lead.lead_s, lead.lead_to) == (pytest.approx(600.0), "later failure")
    assert lead.stop_latency_s == pytest.approx(0.5)


def test_warning_event_before_a_later_failure_gives_a_lead() -> None:
    with Store.open(":memory:") as store:
        sid = store.create_session("job", backend="local", started=0.0)
        aid = failed_attempt(store, sid, 0, 0.0, 1000.0, "node08", "gpu_xid")
        # a predictive alert the supervisor saw without stopping (no --stop-on-predictive)
        store.add_events([alert_event("node08", 280.0, fatal=False)], session_id=sid,
                         attempt_id=aid)
        # an alert on another node is no warning of this failure
        store.add_events([alert_event("node07", 100.0, fatal=False)], session_id=sid,
                         attempt_id=aid)
        lt = build_report(store, now=2000.0).lead_times
    assert (lt.predicted, lt.stopped, lt.missed) == (1, 0, 0)
    assert lt.leads[0].lead_s == pytest.approx(720.0)
    assert lt.lead_median_s == pytest.approx(720.0)


def test_alert_in_store_and_as_event_is_one_alert() -> None:
    with Store.open(":memory:") as store:
        sid = store.create_session("job", backend="local", started=0.0)
        aid = failed_attempt(store, sid, 0, 0.0, 500.0, "node08", "gpu_hardware")
        alert_id = store.add_alert(node="node08", start=499.0, end=None, peak_score=9.0,
                                   kind="hard")
        store.add_events([alert_event("node08", 499.0, fatal=True, kind="hard")],
                         session_id=sid, attempt_id=aid)
        marks = merge_alerts(store.alerts(), alert_marks(store.events()))
        lt = build_report(store, now=1000.0).lead_times
    assert len(marks) == 1 and marks[0].alert_id == alert_id
    assert (lt.predicted, lt.stopped) == (1, 1)
    assert lt.leads[0].alert_id == alert_id


def test_alert_after_the_failure_is_no_lead() -> None:
    with Store.open(":memory:") as store:
        sid = store.create_session("job", backend="local", started=0.0)
        aid = failed_attempt(store, sid, 0, 0.0, 500.0, "node08", "gpu_hardware")
        store.add_events([alert_event("node08", 600.0, fatal=True)], session_id=sid,
                         attempt_id=aid)
        lt = build_report(store, now=1000.0).lead_times
    assert (lt.predicted, lt.missed) == (0, 1)
