"""Lemon scores and exclusion concentration (pure)."""

from __future__ import annotations

import math

import pytest

from trainguard.errors import ConfigError
from trainguard.nodehealth.health import (
    IncidentKind,
    LemonPolicy,
    NodeIncident,
    concentration,
    lemon_score,
)

DAY = 86400.0
X, E, A, J = (IncidentKind.XID, IncidentKind.EXCLUSION, IncidentKind.ALERT,
              IncidentKind.JOB_FAILURE)


def inc(kind: IncidentKind, days_ago: float, job: str | None) -> NodeIncident:
    return NodeIncident("n1", 100 * DAY - days_ago * DAY, kind, job)


@pytest.mark.parametrize(("incidents", "score", "jobs", "lemon"), [
    ([], 0.0, 0, False),
    ([inc(X, 0, "j1"), inc(E, 0, "j1"), inc(J, 0, "j1")], 1.0, 1, False),  # one job, one strike
    ([inc(X, 0, "j1"), inc(E, 0, "j2")], 2.0, 2, True),
    ([inc(X, 7, "j1"), inc(E, 7, "j2")], 1.0, 2, False),  # a week old: half each
    ([inc(A, 0, None), inc(A, 0, None), inc(A, 0, None)], 0.9, 3, False),
    ([inc(J, 0, "j1"), inc(J, 0, "j2"), inc(X, 0, "j3")], 2.4, 3, True),
])
def test_lemon_score(incidents: list[NodeIncident], score: float, jobs: int,
                     lemon: bool) -> None:
    got = lemon_score(incidents, now=100 * DAY)
    assert got.score == pytest.approx(score, abs=1e-3)
    assert (got.jobs, got.lemon) == (jobs, lemon)


def test_two_strikes_in_one_job_are_not_a_lemon_even_when_heavy() -> None:
    policy = LemonPolicy(threshold=0.5, min_jobs=2)
    assert not lemon_score([inc(X, 0, "j1"), inc(E, 0, "j1")], 100 * DAY, policy).lemon


def test_half_life_is_configurable() -> None:
    got = lemon_score([inc(X, 1, "j1")], 100 * DAY, LemonPolicy(half_life_s=DAY))
    assert got.score == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(ConfigError):
        LemonPolicy(half_life_s=0)


@pytest.mark.parametrize(("counts", "nodes", "share", "gini"), [
    ({}, [], 0.0, 0.0),
    ({"a": 5, "b": 5, "c": 5, "d": 5}, [], 0.75, 0.0),
    ({"a": 10}, ["a", "b", "c", "d"], 1.0, 0.75),
    ({"a": 6, "b": 3, "c": 1}, [*"abcdefghij"], 1.0, 0.8),
])
def test_concentration(counts: dict[str, int], nodes: list[str], share: float,
                       gini: float) -> None:
    c = concentration(counts, top_k=3, all_nodes=nodes)
    assert c.top_k_share == pytest.approx(share, abs=0.01)
    assert c.gini == pytest.approx(gini, abs=0.01)
    assert not math.isnan(c.gini)


def test_report_style_concentration() -> None:
    # 63 nodes, 3 of them with most exclusions: the report's "3 nodes > 50%".
    counts = {"n1": 9, "n2": 7, "n3": 5, **{f"m{i}": 1 for i in range(15)}}
    c = concentration(counts, 3, [f"x{i}" for i in range(45)])
    assert c.nodes == 63 and c.top_k_share > 0.5 and c.gini > 0.8
