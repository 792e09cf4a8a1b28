"""Goodput / ETTR against a plain recomputation from the raw store records."""

from __future__ import annotations

import random

import pytest
from analytics_fleet import NOW, T0

from trainguard.analytics import fleet_goodput, goodput, load_runs
from trainguard.analytics.goodput import attempt_time
from trainguard.analytics.runs import RunView
from trainguard.store import AttemptRecord, CheckpointRecord, SessionRecord, Store


def plain_productive(store: Store, session_id: int) -> tuple[float, float]:
    """(productive, wall) of a session, written out from the records (no clamping needed for
    the fixture's data)."""
    attempts = sorted(store.attempts(session_id), key=lambda a: a.index)
    ckpts = store.checkpoints(session_id)
    wall = attempts[-1].ended - attempts[0].started
    productive = 0.0
    for a in attempts:
        fail_t = a.detail.get("failed_at") or a.ended
        train_start = a.started + sum(a.startup_phases.values())
        window = fail_t - train_start
        mine = [c for c in ckpts if c.attempt_id == a.id]

        def stall(c: CheckpointRecord) -> float:
            return c.blocking_s if c.blocking_s is not None else (c.save_s or 0.0)

        if a.status == "succeeded":
            productive += window - sum(stall(c) for c in mine)
            continue
        tail = a.detail.get("detection_s") or 0.0
        if (a.detail.get("failure") or {}).get("kind") == "hang":
            tail += a.detail.get("hang_for_s") or 0.0
        good = [c.created for c in mine if c.ok]
        last_saved = max(good) if good else train_start
        lost = (fail_t - tail) - last_saved
        blocking = sum(stall(c) for c in mine if c.created <= last_saved)
        productive += window - tail - lost - blocking
    return productive, wall


def test_ettr_matches_plain_computation(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    for key in ("A", "B", "C"):
        run = load_runs(store, session_id=ids[key])[0]
        g = goodput(run)
        productive, wall = plain_productive(store, ids[key])
        assert g.wall_s == pytest.approx(wall)
        assert g.productive_s == pytest.approx(productive)
        assert g.ettr == pytest.approx(productive / wall)


def test_session_a_by_hand(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    g = goodput(load_runs(store, session_id=ids["A"])[0])
    assert g.wall_s == pytest.approx(5950.0)
    assert g.productive_s == pytest.approx(1986.0 + 765.0 + 1872.0)
    b = g.badput
    assert dict(b.startup) == pytest.approx(
        {"launch": 15.0, "imports": 30.0, "dist_init": 45.0, "ckpt_load": 55.0,
         "first_step": 60.0})
    assert b.checkpoint_blocking_s == pytest.approx(14.0 + 5.0 + 13.0)  # failed save stalls too
    assert b.lost_progress_s == pytest.approx(475.0 + 200.0)
    assert b.detection_s == pytest.approx(15.0)
    assert b.hang_s == pytest.approx(300.0)
    assert b.teardown_s == pytest.approx(30.0 + 20.0)
    assert b.relaunch_wait_s == pytest.approx(20.0 + 30.0)
    assert b.other_s == pytest.approx(0.0, abs=1e-9)


def test_include_queue(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    run = load_runs(store, session_id=ids["A"])[0]
    g = goodput(run, include_queue=True)
    assert g.badput.queue_s == pytest.approx(60.0)
    assert g.wall_s == pytest.approx(6010.0)
    assert g.productive_s + g.badput.total_s == pytest.approx(g.wall_s)


def test_badput_sum_identity_on_fixture(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    for run in load_runs(store):
        for q in (False, True):
            g = goodput(run, include_queue=q, now=NOW)
            assert g.productive_s + g.badput.total_s == pytest.approx(g.wall_s, abs=1e-6)
            assert g.badput.other_s >= 0


def test_slurm_session_without_phases(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    g = goodput(load_runs(store, session_id=ids["C"])[0])
    assert g.badput.startup_s == 0
    assert g.badput.lost_progress_s == pytest.approx(3600.0)  # no checkpoint: all of it lost
    assert g.badput.relaunch_wait_s == pytest.approx(600.0)
    assert g.ettr == pytest.approx(5800.0 / 10_000.0)


def test_running_session(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    run = load_runs(store, session_id=ids["D"])[0]
    assert goodput(run).ettr is None and goodput(run).wall_s == 0
    live = goodput(run, now=NOW)
    assert live.wall_s == pytest.approx(NOW - (T0 + 40_010))
    assert live.ettr == pytest.approx(1.0)


def test_fleet_goodput_sums_runs(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    runs = load_runs(store)
    parts = [goodput(r) for r in runs]
    total = fleet_goodput(runs)
    assert total.wall_s == pytest.approx(sum(p.wall_s for p in parts))
    assert total.productive_s == pytest.approx(sum(p.productive_s for p in parts))
    assert total.ettr == pytest.approx((4623.0 + 0.0 + 5800.0) / (5950.0 + 1200.0 + 10_000.0))
    assert total.badput.startup["launch"] == pytest.approx(15.0 + 10.0)


def test_empty_store(tmp_path: object) -> None:
    with Store.open(":memory:") as store:
        assert load_runs(store) == []
        g = fleet_goodput(load_runs(store))
    assert (g.wall_s, g.productive_s, g.ettr, g.badput.total_s) == (0.0, 0.0, None, 0.0)


# -- the identity on random histories, clamping paths included -----------------------------


def _random_run(rng: random.Random) -> RunView:
    session = SessionRecord(id=1, name="r", backend="local", external_id=None, status="failed",
                            started=0.0, ended=None, config={})
    t = rng.uniform(0, 100)
    attempts: list[AttemptRecord] = []
    ckpts: list[CheckpointRecord] = []
    for i in range(rng.randint(1, 5)):
        started = t
        ended = started + rng.uniform(0, 3000)
        status = rng.choice(["failed", "cancelled", "succeeded"])
        phases = {name: rng.uniform(0, 400) for name in ("launch", "imports", "first_step")
                  if rng.random() < 0.7}
        detail: dict[str, object] = {"failure": {"kind": rng.choice(["crash", "hang"])}}
        if rng.random() < 0.6:
            detail["failed_at"] = rng.uniform(started - 50, ended + 50)  # even out of range
        if rng.random() < 0.5:
            detail["hang_for_s"] = rng.uniform(0, 2000)
        if rng.random() < 0.5:
            detail["detection_s"] = rng.uniform(0, 500)
        for _ in range(rng.randint(0, 4)):
            ckpts.append(CheckpointRecord(
                id=len(ckpts), session_id=1, attempt_id=i, step=0, path="p",
                created=rng.uniform(started - 10, ended + 10), size_bytes=None,
                save_s=rng.choice([None, rng.uniform(0, 300)]),
                blocking_s=rng.choice([None, rng.uniform(0, 300)]), ok=rng.random() < 0.8))
        attempts.append(AttemptRecord(
            id=i, session_id=1, index=i, nodes=("n1",), started=started, ended=ended,
            status=status, automatic=True, resumed_from_step=None, failure_category=None,
            decision=None, excluded_nodes=(), exit_codes={}, startup_phases=phases, evidence=(),
            detail=detail))
        t = ended + rng.uniform(0, 200)
    return RunView(session, tuple(attempts), tuple(sorted(ckpts, key=lambda c: c.created)))


@pytest.mark.parametrize("seed", range(40))
def test_badput_identity_random(seed: int) -> None:
    run = _random_run(random.Random(seed))
    g = goodput(run, include_queue=seed % 2 == 0)
    assert g.productive_s >= 0 and g.badput.other_s >= 0
    assert g.productive_s + g.badput.total_s + g.unknown_s == pytest.approx(g.wall_s, abs=1e-6)
    assert g.badput.other_s == pytest.approx(0.0, abs=1e-6)  # sequential attempts: nothing left
    for a in run.attempts:
        t = attempt_time(run, a)
        parts = (t.productive_s, t.checkpoint_blocking_s, t.lost_progress_s, t.detection_s,
                 t.hang_s, t.unknown_s)
        assert all(p >= 0 for p in parts)
        assert sum(parts) == pytest.approx(t.window_s, abs=1e-6)
