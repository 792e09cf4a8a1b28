"""Crash-loop stops, from the policy's decision through the run's records to the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainguard.analytics import build_report
from trainguard.analytics.report import AnalyticsReport
from trainguard.recover.failure import Failure, FailureKind
from trainguard.recover.policy import ChainState, decide
from trainguard.recover.records import AttemptResult, Recorder
from trainguard.recover.spec import RetryPolicy
from trainguard.report.summary import summary_rows
from trainguard.store import Store
from trainguard.taxonomy import Category

ROW = "retry chains stopped as crash loops"
NODES = ("n1", "n2")


def _run(store: Store, run_dir: Path, steps: tuple[int | None, ...], policy: RetryPolicy,
         succeed: bool = False) -> None:
    """One supervised chain, recorded as the supervisor records it: each failed attempt gets
    the policy's decision on the steps reached so far."""
    run_dir.mkdir()
    rec = Recorder(run_dir, {"name": run_dir.name}, store)
    rec.start(run_dir.name, "local", 0.0, {})
    t = 0.0
    for i, step in enumerate(steps):
        last = succeed and i == len(steps) - 1
        failure = None if last else Failure(FailureKind.CRASH, Category.UNKNOWN, "exited",
                                            culprit_nodes=("n2",), culprit_rank=1)
        decision = None if failure is None else decide(
            failure, ChainState(NODES, (), 2, retries_used=i, attempt_steps=steps[:i + 1]),
            policy)
        sid = rec.start_attempt(i, NODES, t)
        rec.finish_attempt(AttemptResult(i, NODES, t, t + 10.0,
                                         "succeeded" if last else "failed", {0: 0 if last else 1},
                                         failure=failure, decision=decision, last_step=step,
                                         store_id=sid), (), ())
        t += 11.0
        if decision is not None and decision.verdict.value == "stop":
            break


def _report(tmp_path: Path, chains: list[tuple[tuple[int | None, ...], bool]]) -> AnalyticsReport:
    policy = RetryPolicy(max_retries=4)
    with Store.open(":memory:") as store:
        for n, (steps, succeed) in enumerate(chains):
            _run(store, tmp_path / f"run{n}", steps, policy, succeed)
        return build_report(store, now=1e6)


def test_report_counts_crash_loop_stops_only(tmp_path: Path) -> None:
    rep = _report(tmp_path, [
        ((41, 41, 41, 41, 41, 41), False),   # stopped by the crash-loop rule at attempt 3
        ((10, 20, 30, 40, 50, 60), False),   # always advancing: the retry budget stops it
        ((None,) * 6, False),                # no SDK: the budget stops it, not a crash loop
        ((41, 41, 50), True),                # succeeded
    ])
    assert [len(c.attempts) for c in rep.chains] == [4, 5, 5, 3]
    assert [c.crash_loop for c in rep.chains] == [True, False, False, False]
    assert rep.chain_stats["all"].crash_loops == 1
    assert rep.chain_stats["automatic"].crash_loops == 1
    assert rep.to_dict()["chain_stats"]["all"]["crash_loops"] == 1
    assert dict(summary_rows(rep))[ROW] == "1"


def test_report_says_zero_when_no_chain_looped(tmp_path: Path) -> None:
    rep = _report(tmp_path, [((10, 20), True)])
    assert dict(summary_rows(rep))[ROW] == "0"


def test_html_chart_marks_the_crash_loop(tmp_path: Path) -> None:
    go = pytest.importorskip("plotly.graph_objects", reason="the HTML report needs plotly")
    html = pytest.importorskip("trainguard.report.html")
    rep = _report(tmp_path, [((41, 41, 41, 41), False), ((10, 20), True)])
    fig: dict[str, Any] = html.retry_chains(go, rep).to_plotly_json()
    assert "1 stopped as crash loops" in fig["layout"]["title"]["text"]
    assert list(fig["data"][0]["hovertext"]) == ["stopped as a crash loop", "succeeded"]
