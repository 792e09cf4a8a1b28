"""A script run without the SDK reports no startup phase and no step: its productive time, its
startup after launch and the time to resume after a failure are unknown, not wall time."""

from __future__ import annotations

import pytest

from trainguard.analytics import build_report, failure_stats, fleet_goodput, goodput, load_runs
from trainguard.analytics.runs import without_sdk
from trainguard.durations import format_duration
from trainguard.report.summary import NO_SDK, summary_rows
from trainguard.store import Store

SDK_PHASES = {"launch": 1.0, "imports": 20.0, "dist_init": 5.0, "first_step": 4.0}


def supervised(store: Store, name: str, t0: float, durations: list[float], *, sdk: bool,
               gap: float = 3.0, teardown: float = 2.0) -> int:
    """A session of attempts of the given lengths; all but the last fail. Without the SDK an
    attempt has only the supervisor's ``launch`` phase and no ``last_step``, as `trainguard run`
    records a plain script."""
    sid = store.create_session(name, backend="local", started=t0)
    t = t0
    for i, d in enumerate(durations):
        aid = store.create_attempt(sid, index=i, nodes=["a", "b"], started=t)
        failed = i < len(durations) - 1
        end = t + d
        store.finish_attempt(
            aid, ended=end, status="failed" if failed else "succeeded",
            startup_phases=SDK_PHASES if sdk else {"launch": 0.2},
            detail={"failure": {"kind": "crash", "culprit_nodes": ["b"]} if failed else None,
                    "failed_at": end - teardown if failed else None,
                    "last_step": 40 if sdk else None})
        t = end + gap
    return sid


@pytest.mark.parametrize("durations", [[60.0, 300.0], [5.0, 7.0, 900.0]])
def test_run_without_sdk_has_no_ettr_and_no_mttr(durations: list[float]) -> None:
    with Store.open(":memory:") as store:
        supervised(store, "plain", 0.0, durations, sdk=False)
        runs = load_runs(store)
        report = build_report(store, now=1e6)
    assert all(without_sdk(a) for a in runs[0].attempts)
    g = goodput(runs[0])
    wall = sum(durations) + 3.0 * (len(durations) - 1)
    assert g.wall_s == pytest.approx(wall)
    assert g.ettr is None and g.productive_s == 0.0
    assert dict(g.badput.startup) == pytest.approx({"launch": 0.2 * len(durations)})
    known = g.badput.startup_s + g.badput.teardown_s + g.badput.relaunch_wait_s
    assert g.unknown_s == pytest.approx(wall - known)
    assert g.productive_s + g.badput.total_s + g.unknown_s == pytest.approx(g.wall_s)
    stats = failure_stats(runs)
    assert stats.failures == len(durations) - 1
    assert stats.mttr_s is None and stats.resume_s == ()
    assert stats.resumes_unknown == len(durations) - 1
    assert report.model_inputs.restart_s is None  # not measured from launch times
    shown = dict(summary_rows(report))
    assert shown["ETTR"] == NO_SDK
    assert shown["MTTR (failure to resume)"] == NO_SDK
    assert shown["productive / wall"].startswith(NO_SDK)
    doc = report.to_dict()
    assert doc["goodput"]["ettr"] is None
    assert doc["goodput"]["unknown_s"] == round(g.unknown_s, 4)
    assert doc["failures"]["resumes_unknown"] == len(durations) - 1


def test_fleet_ettr_covers_only_runs_with_the_sdk() -> None:
    with Store.open(":memory:") as store:
        supervised(store, "sdk", 0.0, [600.0, 1200.0], sdk=True)
        supervised(store, "plain", 10_000.0, [100.0, 400.0], sdk=False)
        runs = load_runs(store)
        report = build_report(store, now=1e6)
    with_sdk = goodput(runs[0])
    fleet = fleet_goodput(runs)
    assert with_sdk.ettr is not None and 0 < with_sdk.ettr < 1
    assert fleet.ettr == pytest.approx(with_sdk.ettr)
    assert fleet.covered_wall_s == pytest.approx(with_sdk.wall_s)
    assert fleet.wall_s == pytest.approx(with_sdk.wall_s + 503.0)
    assert fleet.unknown_s > 0
    # one recovery measured through the SDK, one unknown
    assert report.failures.resume_s == pytest.approx([2.0 + 3.0 + sum(SDK_PHASES.values())])
    assert report.failures.resumes_unknown == 1
    shown = dict(summary_rows(report))
    assert shown["ETTR"].startswith(f"{with_sdk.ettr:.1%} (over the ")
    assert "1 unknown (no SDK)" in shown["MTTR (failure to resume)"]
    # the unknown time has its own row; it is not badput
    assert shown[NO_SDK].startswith(f"{format_duration(fleet.unknown_s)} (")
    assert not any(k.startswith("badput:") and NO_SDK in k for k in shown)


def test_sdk_attempt_that_failed_before_its_first_step_is_not_flagged() -> None:
    # phases from the SDK (imports) but no first_step: the SDK ran, the attempt died starting
    with Store.open(":memory:") as store:
        sid = store.create_session("s", backend="local", started=0.0)
        aid = store.create_attempt(sid, index=0, nodes=["a"], started=0.0)
        store.finish_attempt(aid, ended=30.0, status="failed",
                             startup_phases={"launch": 1.0, "imports": 40.0},
                             detail={"last_step": None})
        (run,) = load_runs(store)
    assert not without_sdk(run.attempts[0])
    assert goodput(run).unknown_s == 0.0
