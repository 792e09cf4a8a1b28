"""A supervised run's own host checks (pre-flight, stop-time) are badput of their own kind."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa

from trainguard.analytics import build_report, checktime, goodput, load_runs
from trainguard.analytics.checktime import before, merge, overlap, session_check_intervals
from trainguard.analytics.goodput import Goodput
from trainguard.check.checker import CheckReport
from trainguard.check.model import Level
from trainguard.report.summary import summary_rows
from trainguard.store import HostCheckRecord, Store, resolve_db_url

T0 = 1_000_000.0
HOSTS = ("n1", "n2", "n3")


def check(store: Store, sid: int | None, start: float, end: float, context: str) -> None:
    """One check of every host (a row per host, all sharing the check's interval)."""
    report = CheckReport(HOSTS, (), (), dict.fromkeys(HOSTS, Level.PASS), 0, T0 + start,
                         end - start)
    store.add_host_checks(report, context=context, session_id=sid)


def populate(store: Store, *, with_checks: bool = True) -> int:
    """Preflight [10, 40] and [30, 50] (overlapping); attempt 0 [60, 1010] fails at 1000 with a
    checkpoint at 900; stop check [1010, 1040] and the relaunch's preflight [1035, 1070];
    attempt 1 [1100, 2000] succeeds; stop check [2000, 2025]."""
    sid = store.create_session("job", backend="local", started=T0)
    phases = {"launch": 5.0, "first_step": 5.0}
    a0 = store.create_attempt(sid, index=0, nodes=list(HOSTS), started=T0 + 60)
    store.add_checkpoint(session_id=sid, attempt_id=a0, step=100, path="c100",
                         created=T0 + 900, save_s=10.0)
    store.finish_attempt(a0, ended=T0 + 1010, status="failed", startup_phases=phases,
                         detail={"failed_at": T0 + 1000, "detection_s": 20.0, "last_step": 100,
                                 "failure": {"kind": "crash"}})
    a1 = store.create_attempt(sid, index=1, nodes=list(HOSTS), started=T0 + 1100)
    store.finish_attempt(a1, ended=T0 + 2000, status="succeeded", startup_phases=phases,
                         detail={"last_step": 200})
    store.finish_session(sid, status="succeeded", ended=T0 + 2030)
    if with_checks:
        for start, end, context in ((10, 40, "preflight"), (30, 50, "preflight"),
                                    (1010, 1040, "stop"), (1035, 1070, "preflight"),
                                    (2000, 2025, "stop")):
            check(store, sid, start, end, context)
    return sid


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(str(tmp_path / "tg.db")) as s:
        yield s


def identity(g: Goodput) -> float:
    """productive + badput + unknown - wall: 0 when the wall time is fully accounted for."""
    return g.productive_s + g.badput.total_s + g.unknown_s - g.wall_s


def test_check_time_is_its_own_badput(store: Store) -> None:
    sid = populate(store)
    run = load_runs(store, session_id=sid)[0]
    assert run.checks == ((T0 + 10, T0 + 50), (T0 + 1010, T0 + 1070), (T0 + 2000, T0 + 2025))
    g = goodput(run)
    plain = goodput(replace(run, checks=()))
    # without the checks: wall 60 -> 2000, relaunch wait 1010 -> 1100
    assert plain.wall_s == pytest.approx(1940.0)
    assert plain.badput.relaunch_wait_s == pytest.approx(90.0)
    assert plain.badput.host_checks_s == 0.0
    # overlapping checks count once: 40 s before, 60 s in the relaunch gap, 25 s after
    assert g.badput.host_checks_s == pytest.approx(40.0 + 60.0 + 25.0)
    assert g.wall_s == pytest.approx(2025.0 - 10.0)
    assert g.badput.relaunch_wait_s == pytest.approx(30.0)
    assert g.productive_s == pytest.approx(plain.productive_s)
    assert g.badput.other_s == pytest.approx(plain.badput.other_s + 10.0)  # [50, 60]
    assert g.ettr == pytest.approx(g.productive_s / g.wall_s)
    assert identity(g) == pytest.approx(0.0, abs=1e-6)
    assert identity(plain) == pytest.approx(0.0, abs=1e-6)


def test_check_inside_an_attempt_comes_out_of_productive(store: Store) -> None:
    sid = populate(store)
    check(store, sid, 1500, 1520, "stop")  # inside attempt 1's training window
    run = load_runs(store, session_id=sid)[0]
    g, plain = goodput(run), goodput(replace(run, checks=()))
    assert g.badput.host_checks_s == pytest.approx(125.0 + 20.0)
    assert g.productive_s == pytest.approx(plain.productive_s - 20.0)
    assert identity(g) == pytest.approx(0.0, abs=1e-6)


def test_check_in_teardown_comes_out_of_teardown(store: Store) -> None:
    sid = populate(store)
    check(store, sid, 1002, 1008, "stop")  # attempt 0 failed at 1000, ended at 1010
    g = goodput(load_runs(store, session_id=sid)[0])
    assert g.badput.teardown_s == pytest.approx(10.0 - 6.0)
    assert g.badput.host_checks_s == pytest.approx(125.0 + 6.0)
    assert identity(g) == pytest.approx(0.0, abs=1e-6)


def test_operator_checks_and_other_sessions_do_not_count(store: Store) -> None:
    sid = populate(store, with_checks=False)
    other = store.create_session("other", backend="local", started=T0)
    check(store, None, 1020, 1060, "check")
    check(store, sid, 1020, 1060, "release")
    check(store, other, 1020, 1060, "preflight")
    run = load_runs(store, session_id=sid)[0]
    assert run.checks == ()
    assert goodput(run).badput.host_checks_s == 0.0


def test_queue_ends_where_the_first_check_starts(store: Store) -> None:
    sid = populate(store)
    g = goodput(load_runs(store, session_id=sid)[0], include_queue=True)
    assert g.badput.queue_s == pytest.approx(10.0)
    assert g.wall_s == pytest.approx(2025.0)
    assert identity(g) == pytest.approx(0.0, abs=1e-6)


def test_checks_of_an_attempt_left_out_are_left_out(store: Store) -> None:
    sid = populate(store)
    store.create_attempt(sid, index=2, nodes=list(HOSTS), started=T0 + 2100)  # still running
    check(store, sid, 2150, 2160, "stop")
    run = load_runs(store, session_id=sid)[0]
    g = goodput(run)
    assert g.badput.host_checks_s == pytest.approx(125.0)
    assert g.wall_s == pytest.approx(2015.0)


def test_report_json_and_summary_rows(store: Store) -> None:
    sid = populate(store)
    populate(store)  # a second run with the same checks: the fleet sums them
    report = build_report(store, now=T0 + 10_000)
    doc = report.to_dict()
    assert doc["goodput"]["badput"]["host_checks_s"] == pytest.approx(250.0)
    per_run = {r["session_id"]: r for r in doc["runs"]}
    assert per_run[sid]["goodput"]["badput"]["host_checks_s"] == pytest.approx(125.0)
    g = report.goodput
    assert identity(g) == pytest.approx(0.0, abs=1e-6)
    rows = dict(summary_rows(report))
    assert rows["badput: host checks"] == f"{125 * 2 / 60:.1f} min ({250 / g.wall_s:.1%})"


def test_report_on_a_store_older_than_host_checks(tmp_path: Path) -> None:
    db = str(tmp_path / "tg.db")
    with Store.open(db) as s:
        populate(s, with_checks=False)
    engine = sa.create_engine(resolve_db_url(db))
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE host_checks"))
    finally:
        engine.dispose()
    with Store.open(db, readonly=True) as s:
        report = build_report(s, now=T0 + 10_000)
    assert report.goodput.badput.host_checks_s == 0.0
    assert "badput: host checks" not in dict(summary_rows(report))


@pytest.mark.parametrize(("raw", "merged"), [
    ([], ()),
    ([(5.0, 5.0)], ()),
    ([(3.0, 4.0), (0.0, 1.0)], ((0.0, 1.0), (3.0, 4.0))),
    ([(0.0, 2.0), (2.0, 3.0)], ((0.0, 3.0),)),
    ([(0.0, 10.0), (2.0, 3.0), (9.0, 12.0)], ((0.0, 12.0),)),
])
def test_merge(raw: list[tuple[float, float]], merged: tuple[tuple[float, float], ...]) -> None:
    assert merge(raw) == merged


def test_overlap_and_before() -> None:
    spans = ((0.0, 10.0), (20.0, 30.0))
    assert overlap(spans, 5.0, 25.0) == 10.0
    assert overlap(spans, 10.0, 20.0) == 0.0
    assert before(spans, 25.0) == ((0.0, 10.0), (20.0, 25.0))
    assert before(spans, 20.0) == ((0.0, 10.0),)
    assert before(spans, None) == spans


def test_session_check_intervals_keep_the_run_contexts() -> None:
    def rec(sid: int | None, at: float, context: str) -> HostCheckRecord:
        return HostCheckRecord(1, "n1", at, 10.0, "pass", "", context, sid, (), ())

    got = session_check_intervals([rec(1, 0.0, "preflight"), rec(1, 5.0, "stop"),
                                   rec(1, 100.0, "check"), rec(None, 0.0, "preflight"),
                                   rec(2, 50.0, "release"), rec(3, 7.0, "stop")])
    assert got == {1: ((0.0, 15.0),), 3: ((7.0, 17.0),)}
    assert set(checktime.__all__) <= set(dir(checktime))

