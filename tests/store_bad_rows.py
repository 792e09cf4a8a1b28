"""A store with two rows in every table and a way to corrupt one JSON cell of one row, for the
bad-row tests on SQLite (``tests/unit/store``) and PostgreSQL (``tests/integration``)."""

from __future__ import annotations

import pytest

from trainguard.check.checker import CheckReport
from trainguard.check.model import Figure, Finding, Level, ProbeResult, Status
from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.fleet import FaultEvent
from trainguard.store import Store
from trainguard.taxonomy import Action, Category, Severity

T0 = 1_700_000_000.0

JSON_CELLS: tuple[tuple[str, str, str], ...] = (
    # (table, column, what the good value looks like)
    ("nodes", "attrs", "object"),
    ("sessions", "config", "object"),
    ("attempts", "exit_codes", "object"),
    ("attempts", "startup_phases", "object"),
    ("attempts", "evidence", "list of strings"),
    ("attempts", "detail", "object"),
    ("events", "fields", "list of pairs"),
    ("events", "evidence", "list of objects"),
    ("alerts", "signals", "list of objects"),
    ("exclusions", "evidence", "list of strings"),
    ("host_checks", "findings", "list of objects"),
    ("host_checks", "figures", "list of objects"),
    ("fault_histories", "counts", "object"),
    ("fault_histories", "meta", "object"),
)
"""Every JSON column of every table."""

_WRONG = {
    "object": ("[1, 2]", "7"),
    "list of strings": ('{"a": 1}', "[1, {}]"),
    "list of objects": ('"text"', "[1, 2]"),
    "list of pairs": ("7", '[["only-one"]]'),
}
SHAPES: dict[tuple[str, str], tuple[str, ...]] = {(t, c): _WRONG[kind] for t, c, kind in JSON_CELLS}
"""Valid JSON of the wrong shape for each cell."""

EXTRA_SHAPES: dict[tuple[str, str], tuple[str, ...]] = {
    ("attempts", "exit_codes", ): ('{"0": "x"}',),
    ("attempts", "detail"): ('{"failure": {"category": "gpu_hardware", "culprit_nodes": 5}}',),
    ("events", "evidence"): ('[{"path": "p"}]',),
}
"""Right container, wrong contents."""


def corrupt_where(table: str) -> tuple[str, str]:
    """The key column of ``table`` and a WHERE clause selecting one row by it (``?`` param)."""
    key = "name" if table == "nodes" else "id"
    return key, f"{key} = ?"


def _event(host: str) -> FailureEvent:
    return FailureEvent(
        category=Category.GPU_HARDWARE, action=Action.REBOOT_NODE, severity=Severity.FATAL,
        signature="xid", summary="XID 79: GPU has fallen off the bus", time=T0 + 5,
        time_kind=TimeKind.ABSOLUTE, host=host, xid=79, confidence=0.9,
        fields=(("xid", "79"),),
        evidence=(EvidenceLine(path="/var/log/kern.log", line_no=3, text="NVRM: Xid 79"),))


def _check(started: float) -> CheckReport:
    results = (ProbeResult("gemm", "node-a", Status.OK, (Figure("gemm_gflops", 57.3, "GFLOP/s"),)),
               ProbeResult("gemm", "node-b", Status.OK, (Figure("gemm_gflops", 12.1, "GFLOP/s"),)))
    findings = (Finding("node-a", "host", Level.PASS, "gemm", "gemm 57.3 GFLOP/s"),
                Finding("node-b", "host", Level.SLOW, "gemm", "gemm 12.1 GFLOP/s", "gemm_gflops",
                        12.1, 57.3))
    return CheckReport(("node-a", "node-b"), results, findings,
                       {"node-a": Level.PASS, "node-b": Level.SLOW}, 0, started, 30.0)


def populate(store: Store) -> None:
    """Two rows in every table (host_checks: two per check, one check; fault histories: one
    fault each), all JSON cells set.

    The first row of each table (lowest id, or node ``node-a``) is the one tests corrupt.
    """
    store.upsert_node("node-a", state="ok", attrs={"gpus": 8}, seen=T0)
    store.upsert_node("node-b", state="excluded", attrs={"gpus": 8}, seen=T0)
    for i in range(2):
        sid = store.create_session(f"job{i}", backend="local", started=T0 + i,
                                   config={"nodes": 2})
        aid = store.create_attempt(sid, index=0, nodes=["node-a", "node-b"], started=T0 + i)
        store.finish_attempt(
            aid, ended=T0 + i + 100, status="failed", failure_category="gpu_hardware",
            decision="exclude", excluded_nodes=["node-b"], exit_codes={"0": 1, "1": None},
            startup_phases={"launch": 1.5}, evidence=["XID 79 on node-b"],
            detail={"failed_at": T0 + i + 90, "last_step": 10,
                    "failure": {"category": "gpu_hardware", "culprit_nodes": ["node-b"],
                                "summary": "XID 79"}})
        store.add_events([_event("node-b")], session_id=sid, attempt_id=aid)
        store.add_checkpoint(session_id=sid, attempt_id=aid, step=5, path="/ck/5",
                             created=T0 + i + 50, save_s=2.0, blocking_s=1.0)
        store.finish_session(sid, status="failed", ended=T0 + i + 100)
        store.add_alert(node="node-b", start=T0 + i + 10, end=T0 + i + 20, peak_score=4.0,
                        kind="predictive", signals=[{"metric": "temp", "deviation": 4.0}])
    # The corrupted exclusion is node-a's; node-b's exclusion must still hold.
    store.add_exclusion("node-a", reason="operator", created=T0, evidence=["by hand"])
    store.add_exclusion("node-b", reason="XID 79", created=T0 + 1, evidence=["XID 79"])
    store.add_host_checks(_check(T0 + 200))
    for i in range(2):
        fault = FaultEvent("node-b", T0 + 300 + i, T0 + 400, "Hardware / GPU", "gpu")
        store.add_fault_history(f"trace{i}", source="trace.csv", fmt="csv", fleet_size=2,
                                window_start=T0, window_end=T0 + 1000, origin=None,
                                counts={"records": 1}, meta={"unit": "days"},
                                faults=[(fault, 2)], imported=T0 + i)


def assert_warned(caplog: pytest.LogCaptureFixture, table: str, row: str) -> None:
    """One warning names the table and the row."""
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(table in line and row in line for line in lines), (table, row, lines)
