"""Goodput with memory restores: lost progress bounded by the steps the snapshot lost and
counted by restore source; relaunches' startup split into warm and cold starts."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.analytics.goodput import goodput
from trainguard.analytics.runs import RunView, start_kind
from trainguard.store import AttemptRecord, SessionRecord


def _attempt(index: int, started: float, ended: float, status: str, imports: float,
             **detail: Any) -> AttemptRecord:
    return AttemptRecord(
        id=index + 1, session_id=1, index=index, nodes=("n1", "n2"), started=started,
        ended=ended, status=status, automatic=True, resumed_from_step=None,
        failure_category=None, decision=None, excluded_nodes=(), exit_codes={},
        startup_phases={"launch": 1.0, "imports": imports}, evidence=(), detail=detail)


def _run(restore: dict[str, Any]) -> RunView:
    # Attempt 0: 2 s startup, then 100 s of training, 100 steps (1 s each), no checkpoint.
    first = _attempt(0, 0.0, 102.0, "failed", 1.0, last_step=100,
                     restore={"source": "none", "step": None, "steps_lost": None})
    second = _attempt(1, 102.0, 150.0, "succeeded", 0.1, last_step=140, restore=restore)
    session = SessionRecord(1, "r", "local", None, "succeeded", 0.0, 150.0, {})
    return RunView(session, (first, second), ())


def test_a_memory_restore_loses_only_the_steps_since_the_snapshot() -> None:
    g = goodput(_run({"source": "memory", "step": 97, "steps_lost": 3}))
    assert g.badput.lost_progress_s == pytest.approx(3.0)
    assert dict(g.badput.lost_progress_by_source) == {"memory": pytest.approx(3.0)}
    assert g.productive_s + g.badput.total_s == pytest.approx(g.wall_s)


def test_a_disk_restore_loses_the_whole_window_without_a_checkpoint() -> None:
    g = goodput(_run({"source": "disk", "step": None, "steps_lost": 100}))
    assert g.badput.lost_progress_s == pytest.approx(100.0)
    assert dict(g.badput.lost_progress_by_source) == {"disk": pytest.approx(100.0)}


def test_relaunch_startup_split_warm_and_cold() -> None:
    g = goodput(_run({"source": "memory", "step": 97, "steps_lost": 3}))
    assert dict(g.badput.restart) == {"warm": pytest.approx(1.1)}
    cold = _attempt(2, 0.0, 1.0, "succeeded", 0.9)
    assert start_kind(cold, 1.0) == "cold" and start_kind(cold, None) == "cold"
    assert start_kind(cold, 4.0) == "warm"


def test_the_badput_table_shows_the_splits() -> None:
    from trainguard.report.summary import badput_rows

    rows = dict(badput_rows(goodput(_run({"source": "memory", "step": 97, "steps_lost": 3}))))
    assert "badput: lost progress (restored from memory)" in rows
    keys = list(rows)
    warm = keys.index("badput: startup of relaunches (warm start)")
    assert keys[warm - 1].startswith("badput: startup: ")
    disk = dict(badput_rows(goodput(_run({"source": "disk", "step": None, "steps_lost": 9}))))
    assert not any("restored from" in k for k in disk)  # nothing to tell apart
