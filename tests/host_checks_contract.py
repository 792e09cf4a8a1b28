"""Backend-independent checks of the store's host checks, run against SQLite
(tests/unit/store/test_store_host_checks.py) and PostgreSQL
(tests/integration/test_store_postgres_host_checks.py). Each takes the URL of a fresh database."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa

from trainguard.check.checker import CheckReport
from trainguard.check.model import Figure, Finding, Level, ProbeResult, Status
from trainguard.store import Store, resolve_db_url

T0 = 1_700_000_000.123456

Check = Callable[[str], None]


def make_report(started: float = T0, duration_s: float = 42.5) -> CheckReport:
    """Three hosts: node1 passes, node2 is slow (its GEMM and its link to node3), node3 fails
    its storage probe and has the slow link."""
    results = (
        ProbeResult("gemm", "node1", Status.OK, (Figure("gemm_gflops", 57.3, "GFLOP/s"),),
                    duration_s=1.5),
        ProbeResult("gemm", "node2", Status.OK, (Figure("gemm_gflops", 12.1, "GFLOP/s"),)),
        ProbeResult("storage", "node3", Status.ERROR, reason="fsync: EIO",
                    facts=(("fs", "nfs"),)),
    )
    findings = (
        Finding("node1", "host", Level.PASS, "gemm", "gemm 57.3 GFLOP/s", "gemm_gflops", 57.3,
                57.3),
        Finding("node2", "host", Level.SLOW, "gemm", "gemm 12.1 GFLOP/s, 0.21x the median",
                "gemm_gflops", 12.1, 57.3),
        Finding("node2<->node3", "link", Level.SLOW, "link", "link 1.2 GB/s, 0.1x"),
        Finding("node3", "host", Level.FAIL, "storage", "storage: fsync: EIO"),
    )
    verdicts = {"node1": Level.PASS, "node2": Level.SLOW, "node3": Level.FAIL}
    return CheckReport(("node1", "node2", "node3"), results, findings, verdicts, 2, started,
                       duration_s)


def check_round_trip(url: str) -> None:
    report = make_report()
    with Store.open(url) as store:
        sid = store.create_session("job", backend="local", started=T0 - 10)
        store.add_host_checks(report, context="preflight", session_id=sid)
        rows = store.host_checks()
    assert [r.host for r in rows] == ["node1", "node2", "node3"]
    by_host = {r.host: r for r in rows}
    n1, n2, n3 = by_host["node1"], by_host["node2"], by_host["node3"]
    assert (n1.level, n2.level, n3.level) == ("pass", "slow", "fail")
    assert n1.reason == ""
    # node2's worst findings are both slow ones (its own and its link's)
    assert n2.reason == "gemm 12.1 GFLOP/s, 0.21x the median; link 1.2 GB/s, 0.1x"
    assert n3.reason == "storage: fsync: EIO"
    for r in rows:
        assert r.checked_at == T0
        assert r.duration_s == 42.5
        assert r.ended == T0 + 42.5
        assert r.context == "preflight"
        assert r.session_id == sid
    # findings and figures come back as the model's dicts, so they rebuild the model objects
    assert [Finding.from_dict(f) for f in n3.findings] == [report.findings[2],
                                                           report.findings[3]]
    assert [ProbeResult.from_dict(p) for p in n1.figures] == [report.results[0]]
    assert [ProbeResult.from_dict(p) for p in n3.figures] == [report.results[2]]


def check_filters_and_last(url: str) -> None:
    with Store.open(url) as store:
        sid = store.create_session("job", backend="local", started=T0)
        store.add_host_checks(make_report(T0), context="check")
        store.add_host_checks(make_report(T0 + 100), context="stop", session_id=sid)
        assert store.last_host_checks() == {r.host: r
                                            for r in store.host_checks(session_id=sid)}
        last = store.last_host_checks()
        assert sorted(last) == ["node1", "node2", "node3"]
        assert {r.checked_at for r in last.values()} == {T0 + 100}
        assert [r.checked_at for r in store.host_checks(host="node2")] == [T0, T0 + 100]
        assert [r.host for r in store.host_checks(host="node2", session_id=sid)] == ["node2"]
        assert store.host_checks(host="node9") == []
        # a newer check of one host only moves that host's last check
        single = CheckReport(("node2",), (), (), {"node2": Level.PASS}, 0, T0 + 200, 1.0)
        store.add_host_checks(single)
        last = store.last_host_checks()
        assert last["node2"].checked_at == T0 + 200 and last["node2"].level == "pass"
        assert last["node1"].checked_at == T0 + 100


def check_bad_context_is_refused(url: str) -> None:
    with Store.open(url) as store:
        with pytest.raises(ValueError, match="check context must be one of"):
            store.add_host_checks(make_report(), context="bogus")
        assert store.host_checks() == []


def check_old_store_without_the_table(url: str) -> None:
    """A store written before host checks existed: readers find none, a writer adds the
    table; the schema version does not move."""
    with Store.open(url) as store:
        store.upsert_node("node1", state="ok", seen=T0)
        version = store.schema_version()
    engine = sa.create_engine(resolve_db_url(url))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE host_checks"))
    finally:
        engine.dispose()
    with Store.open(url, readonly=True) as store:
        assert store.host_checks() == []
        assert store.last_host_checks() == {}
        assert [n.name for n in store.nodes()] == ["node1"]
    with Store.open(url) as store:
        assert store.schema_version() == version
        store.add_host_checks(make_report())
    with Store.open(url, readonly=True) as store:
        assert sorted(store.last_host_checks()) == ["node1", "node2", "node3"]
        assert [n.name for n in store.nodes()] == ["node1"]


CHECKS: list[Check] = [
    check_round_trip,
    check_filters_and_last,
    check_bad_context_is_refused,
    check_old_store_without_the_table,
]


def check_id(check: Check) -> str:
    return check.__name__.removeprefix("check_")
