"""Injected faults and failures of the job's own code are no detector's to see: the report counts
them apart, never as detector misses (issue #28)."""

from __future__ import annotations

from typing import Any

from trainguard.analytics import build_report
from trainguard.analytics.leadtime import not_a_miss
from trainguard.report.summary import lead_text, summary_rows
from trainguard.store import Store

T0 = 1_795_654_916.0


def failed(store: Store, sid: int, index: int, category: str, **failure: Any) -> None:
    aid = store.create_attempt(sid, index=index, nodes=["n1", "n2"], started=T0 + 100 * index)
    store.finish_attempt(aid, ended=T0 + 100 * index + 50, status="failed",
                         failure_category=category, decision="retry",
                         detail={"failure": {"category": category, "culprit_nodes": ["n2"],
                                             **failure}})


def test_injected_and_user_code_failures_are_not_detector_misses() -> None:
    with Store.open(":memory:") as store:
        sid = store.create_session("job", backend="local", started=T0)
        failed(store, sid, 0, "injected_fault", kind="crash",
               injected="injected kill of rank 1 (trainguard inject)")
        failed(store, sid, 1, "user_code_error", kind="hang")  # a hang in the job's own code
        failed(store, sid, 2, "user_code_error", kind="crash")  # an exception
        failed(store, sid, 3, "gpu_hardware", kind="node", node_fault=True,
               injected="injected xid on n2 (trainguard inject)")  # a drill of exclusion
        failed(store, sid, 4, "network_ib", kind="crash")  # a real miss
        lt = build_report(store, now=T0 + 1000).lead_times
    assert (lt.with_culprit, lt.predicted, lt.missed) == (1, 0, 1)
    assert (lt.injected, lt.user_code) == (2, 2)
    assert lt.to_dict()["injected"] == 2 and lt.to_dict()["user_code"] == 2
    text = lead_text(lt)
    assert text.startswith("0 of 1 failures had an alert first, 1 missed")
    assert text.endswith("not detector misses: 2 injected faults, 2 user-code failures")


def test_only_injected_faults_still_get_their_row() -> None:
    with Store.open(":memory:") as store:
        sid = store.create_session("job", backend="local", started=T0)
        failed(store, sid, 0, "injected_fault", kind="hang",
               injected="injected hang of rank 1 (trainguard inject)")
        report = build_report(store, now=T0 + 1000)
    rows = dict(summary_rows(report))
    assert rows["detector alerts"] == ("0 of 0 failures had an alert first, 0 missed; not "
                                       "detector misses: 1 injected fault")


def test_not_a_miss() -> None:
    assert not_a_miss({"injected": "injected kill of rank 1 (trainguard inject)"}) == "injected"
    assert not_a_miss({"category": "injected_fault"}) == "injected"
    assert not_a_miss({}, "user_code_error") == "user_code"
    assert not_a_miss({"category": "collective_hang"}) is None
    assert not_a_miss({"category": "unknown"}) is None
