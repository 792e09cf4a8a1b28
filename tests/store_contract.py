"""Backend-independent checks of the event store, run against SQLite and PostgreSQL.

Each check takes the URL (or path) of a fresh, empty database and opens its own stores, so the same
assertions run in ``tests/unit/store`` (SQLite) and ``tests/integration`` (a real PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from trainguard.errors import SchemaVersionError, StoreError
from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.store import (
    SCHEMA_VERSION,
    AlertRecord,
    AttemptRecord,
    CheckpointRecord,
    NodeRecord,
    SessionRecord,
    Store,
    resolve_db_url,
)
from trainguard.taxonomy import Action, Category, Severity

T0 = 1_700_000_000.123456  # sub-millisecond digits: times must survive as doubles

Check = Callable[[str], None]


def full_event(**overrides: object) -> FailureEvent:
    """A FailureEvent with every field set to a non-default value."""
    values: dict[str, object] = {
        "category": Category.GPU_HARDWARE,
        "action": Action.REBOOT_NODE,
        "severity": Severity.FATAL,
        "signature": "xid",
        "summary": "XID 79: GPU has fallen off the bus",
        "time": T0 + 1.5,
        "time_kind": TimeKind.ABSOLUTE,
        "host": "node-3",
        "gpu_pci": "0000:3b:00.0",
        "gpu_index": 2,
        "rank": 17,
        "xid": 79,
        "caused_by_xid": 48,
        "confidence": 0.875,
        # order and a repeated key must survive
        "fields": (("op", "ALLREDUCE"), ("seq", "1234"), ("op", "BROADCAST"), ("empty", "")),
        "evidence": (
            EvidenceLine(
                path="/var/log/kern.log", line_no=42, text="NVRM: Xid (PCI:0000:3b:00): 79"
            ),
            EvidenceLine(path="rank17.log", line_no=7, text="ünïcode ✓ 'quotes' \"dq\""),
        ),
    }
    values.update(overrides)
    return FailureEvent(**values)  # type: ignore[arg-type]


def check_schema_version_written(url: str) -> None:
    with Store.open(url) as store:
        assert store.schema_version() == SCHEMA_VERSION
    with Store.open(url) as store:  # reopening an existing store is fine
        assert store.schema_version() == SCHEMA_VERSION


def _set_version(url: str, version: int) -> None:
    engine = sa.create_engine(resolve_db_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE schema_version SET version = :v"), {"v": version})
    finally:
        engine.dispose()


def check_refuses_newer_schema(url: str) -> None:
    Store.open(url).close()
    _set_version(url, SCHEMA_VERSION + 1)
    expected = rf"schema version {SCHEMA_VERSION + 1}, newer than version {SCHEMA_VERSION}"
    with pytest.raises(SchemaVersionError, match=expected):
        Store.open(url)


def check_nodes(url: str) -> None:
    with Store.open(url) as store:
        store.upsert_node("node-b", state="healthy", attrs={"gpus": 8, "driver": "550.54"}, seen=T0)
        store.upsert_node("node-a")
        store.upsert_node("node-b", state="suspect", seen=T0 + 60)  # attrs kept
        store.upsert_node("node-a", attrs={"gpus": 4})
        store.upsert_node("node-a")  # nothing to change: a no-op, not an error
        assert store.nodes() == [
            NodeRecord("node-a", None, {"gpus": 4}, None, None),
            NodeRecord("node-b", "suspect", {"gpus": 8, "driver": "550.54"}, T0, T0 + 60),
        ]
        long = "x" * 1000  # no length limits: both backends keep long names and states
        store.upsert_node(long, state=long)
        assert store.nodes()[-1] == NodeRecord(long, long, {}, None, None)


def check_sessions(url: str) -> None:
    with Store.open(url) as store:
        old = store.create_session("old", backend="local", started=T0 - 100)
        store.finish_session(old, status="succeeded", ended=T0 - 50)
        sid = store.create_session(
            "llama-70b",
            backend="slurm",
            started=T0,
            config={"nodes": 4, "tags": ["a"]},
            external_id="812345",
        )
        assert store.sessions()[1] == SessionRecord(
            sid, "llama-70b", "slurm", "812345", "running", T0, None, {"nodes": 4, "tags": ["a"]}
        )
        store.finish_session(sid, status="failed", ended=T0 + 3600.25)
        rec = store.sessions()[1]
        assert (rec.status, rec.ended, rec.duration_s) == ("failed", T0 + 3600.25, 3600.25)
        assert [s.id for s in store.sessions(since=T0 - 10)] == [sid]
        assert store.sessions()[0].config == {}
        with pytest.raises(StoreError, match="no session with id 999"):
            store.finish_session(999, status="failed", ended=T0)


def check_attempts(url: str) -> None:
    with Store.open(url) as store:
        sid = store.create_session("job", backend="slurm", started=T0)
        first = store.create_attempt(sid, index=0, nodes=["n3", "n1", "n2"], started=T0)
        second = store.create_attempt(
            sid,
            index=1,
            nodes=["n1", "n2", "n4"],
            started=T0 + 100,
            automatic=False,
            resumed_from_step=1200,
        )
        store.finish_attempt(
            first,
            ended=T0 + 90,
            status="failed",
            failure_category=Category.GPU_HARDWARE,
            decision="exclude_and_restart",
            excluded_nodes=["n3"],
            exit_codes={"0": 0, "1": -9, "2": None},
            startup_phases={"rendezvous": 4.5, "ckpt_load": 12.25, "first_step": 30.0},
            evidence=["n3: XID 79", "rank 2: NCCL watchdog timeout"],
            detail={"policy": "xid-fatal", "retry": 1},
        )
        records = store.attempts(sid)
        assert records[0] == AttemptRecord(
            id=first,
            session_id=sid,
            index=0,
            nodes=("n3", "n1", "n2"),
            started=T0,
            ended=T0 + 90,
            status="failed",
            automatic=True,
            resumed_from_step=None,
            failure_category="gpu_hardware",
            decision="exclude_and_restart",
            excluded_nodes=("n3",),
            exit_codes={"0": 0, "1": -9, "2": None},
            startup_phases={"rendezvous": 4.5, "ckpt_load": 12.25, "first_step": 30.0},
            evidence=("n3: XID 79", "rank 2: NCCL watchdog timeout"),
            detail={"policy": "xid-fatal", "retry": 1},
        )
        assert list(records[0].startup_phases) == ["rendezvous", "ckpt_load", "first_step"]
        assert records[0].duration_s == 90
        assert records[1] == AttemptRecord(
            id=second,
            session_id=sid,
            index=1,
            nodes=("n1", "n2", "n4"),
            started=T0 + 100,
            ended=None,
            status="running",
            automatic=False,
            resumed_from_step=1200,
            failure_category=None,
            decision=None,
            excluded_nodes=(),
            exit_codes={},
            startup_phases={},
            evidence=(),
            detail={},
        )
        other = store.create_session("other", backend="local", started=T0)
        store.create_attempt(other, index=0, nodes=[], started=T0)
        assert [a.id for a in store.attempts(sid)] == [first, second]
        assert len(store.attempts()) == 3
        assert store.attempts(other)[0].nodes == ()

        # finishing again replaces the outcome, including the excluded nodes
        store.finish_attempt(first, ended=T0 + 91, status="failed", excluded_nodes=["n1", "n3"])
        assert store.attempts(sid)[0].excluded_nodes == ("n1", "n3")

        with pytest.raises(StoreError, match="create attempt"):
            store.create_attempt(sid, index=1, nodes=["n9"], started=T0)  # duplicate index
        with pytest.raises(StoreError, match="create attempt"):
            store.create_attempt(12345, index=0, nodes=["n9"], started=T0)  # no such session
        with pytest.raises(StoreError, match="no attempt with id 999"):
            store.finish_attempt(999, ended=T0, status="failed")
        assert len(store.attempts()) == 3  # failed writes left nothing behind


def check_events(url: str) -> None:
    full = full_event()
    minimal = FailureEvent(
        category=Category.UNKNOWN,
        action=Action.NONE,
        severity=Severity.INFO,
        signature="s",
        summary="",
    )
    relative = full_event(time=12.5, time_kind=TimeKind.RELATIVE, host="node-4")
    late = full_event(
        time=T0 + 500,
        category=Category.NCCL_TIMEOUT_HANG,
        action=Action.RESTART_JOB,
        severity=Severity.NON_FATAL,
    )
    with Store.open(url) as store:
        sid = store.create_session("job", backend="local", started=T0)
        aid = store.create_attempt(sid, index=0, nodes=["node-3"], started=T0)
        assert store.add_events([]) == 0
        assert store.add_events(iter([full, minimal]), session_id=sid, attempt_id=aid) == 2
        assert store.add_events([relative, late]) == 2

        assert store.events() == [full, minimal, relative, late]
        assert store.events()[0].fields == full.fields
        assert store.events(host="node-3") == [full, late]
        assert store.events(since=T0) == [full, late]  # relative and untimed never match
        assert store.events(since=T0 + 2) == [late]
        assert store.events(session_id=sid) == [full, minimal]
        assert store.events(attempt_id=aid, category="unknown") == [minimal]
        assert store.events(category=Category.NCCL_TIMEOUT_HANG) == [late]


def check_alerts(url: str) -> None:
    signals: list[dict[str, Any]] = [
        {"metric": "gpu_temp", "gpu": 3, "deviation": 4.25},
        {"metric": "xid_count", "gpu": None, "deviation": 12.0},
    ]
    with Store.open(url) as store:
        closed = store.add_alert(
            node="n1", start=T0, end=T0 + 300, peak_score=0.93, kind="predictive", signals=signals
        )
        open_ = store.add_alert(
            node="n2", start=T0 + 10, end=None, peak_score=1.0, kind="hard", source="xid-watch"
        )
        assert store.alerts() == [
            AlertRecord(closed, "n1", T0, T0 + 300, 0.93, "predictive", tuple(signals), "detector"),
            AlertRecord(open_, "n2", T0 + 10, None, 1.0, "hard", (), "xid-watch"),
        ]
        assert [a.id for a in store.alerts(node="n2")] == [open_]
        assert [a.id for a in store.alerts(since=T0 + 301)] == [open_]  # still open
        assert [a.id for a in store.alerts(since=T0 + 300)] == [closed, open_]
        with pytest.raises(ValueError, match="alert kind must be one of predictive, hard"):
            store.add_alert(node="n1", start=T0, end=None, peak_score=1.0, kind="soft")


def check_exclusions(url: str) -> None:
    with Store.open(url) as store:
        sid = store.create_session("job", backend="slurm", started=T0)
        aid = store.create_attempt(sid, index=0, nodes=["n1", "n2"], started=T0)
        first = store.add_exclusion(
            "n1",
            reason="XID 79",
            created=T0,
            evidence=["kern.log:42 Xid 79"],
            session_id=sid,
            attempt_id=aid,
        )
        store.add_exclusion("n1", reason="ECC", created=T0 + 1, source="operator")
        store.add_exclusion("n2", reason="IB link down", created=T0 + 2)
        assert store.active_excluded_nodes() == {"n1", "n2"}

        assert store.release_exclusion("n1", released=T0 + 100) == 2
        assert store.release_exclusion("n1", released=T0 + 200) == 0  # nothing active left
        assert store.release_exclusion("never-excluded", released=T0) == 0
        assert store.active_excluded_nodes() == {"n2"}

        rows = store.exclusions()
        assert [(e.node, e.released, e.active) for e in rows] == [
            ("n1", T0 + 100, False),
            ("n1", T0 + 100, False),
            ("n2", None, True),
        ]
        assert rows[0].id == first
        assert (rows[0].evidence, rows[0].session_id, rows[0].attempt_id) == (
            ("kern.log:42 Xid 79",),
            sid,
            aid,
        )
        assert (rows[1].source, rows[1].evidence, rows[1].session_id) == ("operator", (), None)

        store.add_exclusion("n1", reason="again", created=T0 + 300)  # a released node can return
        assert store.active_excluded_nodes() == {"n1", "n2"}
        assert [e.reason for e in store.exclusions(active_only=True)] == ["IB link down", "again"]


def check_checkpoints(url: str) -> None:
    with Store.open(url) as store:
        sid = store.create_session("job", backend="local", started=T0)
        aid = store.create_attempt(sid, index=0, nodes=["n1"], started=T0)
        big = 5 * 2**40  # bytes beyond 32 bits
        c1 = store.add_checkpoint(
            session_id=sid,
            attempt_id=aid,
            step=3_000_000_000,
            path="s3://b/ckpt/step-1",
            created=T0 + 10,
            size_bytes=big,
            save_s=41.5,
            blocking_s=2.25,
        )
        c2 = store.add_checkpoint(
            session_id=None, attempt_id=None, step=0, path="/tmp/c", created=T0, ok=False
        )
        assert store.checkpoints() == [
            CheckpointRecord(c2, None, None, 0, "/tmp/c", T0, None, None, None, False),
            CheckpointRecord(
                c1, sid, aid, 3_000_000_000, "s3://b/ckpt/step-1", T0 + 10, big, 41.5, 2.25, True
            ),
        ]
        assert [c.id for c in store.checkpoints(sid)] == [c1]


def check_two_stores_share_a_database(url: str) -> None:
    with Store.open(url) as supervisor, Store.open(url) as cli:
        sid = supervisor.create_session("job", backend="local", started=T0)
        assert [s.id for s in cli.sessions()] == [sid]
        cli.add_exclusion("n1", reason="manual", created=T0)
        assert supervisor.active_excluded_nodes() == {"n1"}


CHECKS: list[Check] = [
    check_schema_version_written,
    check_refuses_newer_schema,
    check_nodes,
    check_sessions,
    check_attempts,
    check_events,
    check_alerts,
    check_exclusions,
    check_checkpoints,
    check_two_stores_share_a_database,
]


def check_id(check: Check) -> str:
    return check.__name__.removeprefix("check_")
