"""Failure counts, node-days, MTTF and MTTR against a plain recomputation."""

from __future__ import annotations

import itertools

import pytest

from trainguard.analytics import failure_stats, load_runs
from trainguard.store import Store


def test_failure_stats_match_plain(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    stats = failure_stats(load_runs(store))
    done = [a for a in store.attempts() if a.ended is not None]
    failed = [a for a in done if a.status == "failed"]
    training = sum(a.ended - a.started for a in done)
    node_days = sum((a.ended - a.started) * len(a.nodes) for a in done) / 86400
    assert stats.failures == len(failed) == 5
    assert stats.node_days == pytest.approx(node_days)
    assert stats.per_node_day == pytest.approx(5 / node_days)
    assert stats.mttf_s == pytest.approx(training / 5)
    assert dict(stats.by_category) == {"gpu_hardware": 1, "nccl_timeout_hang": 1,
                                       "numerical_nan": 1, "gpu_memory_ecc": 1, "unknown": 1}
    resumes = []
    for s in store.sessions():
        attempts = store.attempts(s.id)
        for prev, nxt in itertools.pairwise(attempts):
            if prev.status == "failed":
                failed_at = prev.detail.get("failed_at") or prev.ended
                resumes.append(nxt.started + sum(nxt.startup_phases.values()) - failed_at)
    assert list(stats.resume_s) == pytest.approx(resumes)
    assert list(stats.resume_s) == pytest.approx([130.0, 125.0, 105.0, 600.0])
    assert stats.mttr_s == pytest.approx(sum(resumes) / len(resumes))


def test_zero_failures_mttf_none() -> None:
    with Store.open(":memory:") as store:
        sid = store.create_session("ok", backend="local", started=0.0)
        aid = store.create_attempt(sid, index=0, nodes=["a", "b"], started=0.0)
        store.finish_attempt(aid, ended=86400.0, status="succeeded")
        stats = failure_stats(load_runs(store))
    assert stats.failures == 0 and stats.mttf_s is None and stats.mttr_s is None
    assert stats.node_days == pytest.approx(2.0)
    assert stats.per_node_day == 0.0


def test_empty_and_running_only() -> None:
    with Store.open(":memory:") as store:
        assert failure_stats(load_runs(store)).per_node_day is None
        sid = store.create_session("r", backend="local", started=0.0)
        store.create_attempt(sid, index=0, nodes=["a"], started=0.0)
        stats = failure_stats(load_runs(store))
    assert (stats.failures, stats.node_days, stats.per_node_day) == (0, 0.0, None)
