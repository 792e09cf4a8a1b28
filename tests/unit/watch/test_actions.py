"""Watch actions: opt-in, dry-run, and rate limits that hold under a burst."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.errors import ConfigError, LaunchError
from trainguard.evidence.rules import RuleSet
from trainguard.recover.watch import NodeWatch
from trainguard.store import Store
from trainguard.taxonomy import Action, Severity
from trainguard.watch.actions import (
    ActionExecutor,
    ActionPolicy,
    NodeAlert,
    Outcome,
    RateLimiter,
    alert_line,
)

POOL = [f"n{i:03d}" for i in range(100)]


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _alert(node: str, severity: str = "hard", confidence: float = 0.9) -> NodeAlert:
    return NodeAlert(node, severity, confidence, "XID 79 on GPU 3", 1_000_000.0,  # type: ignore[arg-type]
                     evidence=("DCGM_FI_DEV_XID_ERRORS=79",), score=4.0,
                     metrics=("DCGM_FI_DEV_XID_ERRORS",))


LIVE = ActionPolicy(enabled=True, dry_run=False, pool_size=63)


@pytest.mark.parametrize(("kwargs", "key"), [
    ({"min_confidence": 1.5}, "actions.min_confidence"),
    ({"max_nodes_per_hour": -1}, "actions.max_nodes_per_hour"),
    ({"max_pool_fraction": 2.0}, "actions.max_pool_fraction"),
    ({"pool_size": 0}, "actions.pool_size"),
    ({"cooldown_s": -1.0}, "actions.cooldown_s"),
    ({"min_severity": "soft"}, "actions.min_severity"),
])
def test_policy_validation_names_the_key(kwargs: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        ActionPolicy(**kwargs)  # type: ignore[arg-type]


def test_disabled_by_default(tmp_path: Path) -> None:
    drained: list[str] = []
    with Store.open(":memory:") as store:
        ex = ActionExecutor(ActionPolicy(), pool=POOL, store=store,
                            drain=lambda n, r: drained.append(n),
                            alerts_file=tmp_path / "alerts.jsonl")
        result = ex.handle(_alert("n001"))
        assert result.outcome is Outcome.DISABLED
        assert store.active_excluded_nodes() == set()
    assert drained == [] and not (tmp_path / "alerts.jsonl").exists()


def test_burst_on_many_nodes_acts_on_exactly_k(tmp_path: Path) -> None:
    # K=2 per hour, 5% of 63 = 3 excluded at most: a burst of 100 alerts acts on 2 nodes.
    clock = FakeClock()
    drained: list[str] = []
    with Store.open(":memory:") as store:
        ex = ActionExecutor(LIVE, pool=POOL[:63], store=store, clock=clock,
                            drain=lambda n, r: drained.append(n),
                            alerts_file=tmp_path / "alerts.jsonl")
        results = [ex.handle(_alert(n)) for n in POOL]
        outcomes = [r.outcome for r in results]
        assert outcomes.count(Outcome.DONE) == 2
        assert outcomes.count(Outcome.RATE_LIMITED) == 98
        assert store.active_excluded_nodes() == {"n000", "n001"}
        assert "max_nodes_per_hour=2" in results[2].reason
        # an hour later one more fits under the pool cap (3 of 63), then the cap holds
        clock.now += 3600.0
        later = [ex.handle(_alert(n)).outcome for n in POOL[2:50]]
        assert later.count(Outcome.DONE) == 1
        assert "max_pool_fraction" in ex.handle(_alert("n099")).reason
        clock.now += 10 * 3600.0
        assert ex.handle(_alert("n098")).outcome is Outcome.RATE_LIMITED
        assert len(store.active_excluded_nodes()) == 3
    assert drained == ["n000", "n001", "n002"]
    assert len((tmp_path / "alerts.jsonl").read_text().splitlines()) == 3


def test_window_slides() -> None:
    clock = FakeClock(0.0)
    lim = RateLimiter(ActionPolicy(enabled=True, max_nodes_per_hour=2, max_pool_fraction=1.0),
                      pool_size=100, clock=clock)
    assert lim.acquire("a").allowed
    clock.now = 1800.0
    assert lim.acquire("b").allowed
    assert not lim.acquire("c").allowed
    clock.now = 3599.0
    assert not lim.acquire("c").allowed
    clock.now = 3600.0  # "a" left the window, "b" has not
    assert lim.acquire("c").allowed
    assert not lim.acquire("d").allowed
    assert lim.granted_last_hour() == 2
    clock.now = 5400.0
    assert lim.acquire("d").allowed


def test_pool_fraction_counts_operator_exclusions_and_releases_free_capacity() -> None:
    clock = FakeClock()
    policy = ActionPolicy(enabled=True, dry_run=False, max_nodes_per_hour=10, pool_size=63)
    with Store.open(":memory:") as store:
        for n in ("n010", "n011"):
            store.add_exclusion(n, reason="operator", created=0.0, source="operator")
        ex = ActionExecutor(policy, store=store, clock=clock)
        assert ex.handle(_alert("n001")).outcome is Outcome.DONE
        limited = ex.handle(_alert("n002"))
        assert limited.outcome is Outcome.RATE_LIMITED and "3 of 63" in limited.reason
        store.release_exclusion("n010", released=clock.now)
        assert ex.handle(_alert("n002")).outcome is Outcome.DONE


def test_tiny_pool_never_acts() -> None:
    lim = RateLimiter(ActionPolicy(enabled=True), pool_size=10, clock=lambda: 0.0)
    assert lim.max_excluded == 0
    assert not lim.acquire("a").allowed


def test_already_excluded_is_a_noop_not_an_action() -> None:
    clock = FakeClock()
    with Store.open(":memory:") as store:
        store.add_exclusion("n001", reason="operator", created=0.0, source="operator")
        ex = ActionExecutor(LIVE, store=store, clock=clock)
        result = ex.handle(_alert("n001"))
        assert result.outcome is Outcome.SKIPPED and "already excluded" in result.reason
        assert len(store.exclusions()) == 1
        assert ex.limiter.granted_last_hour() == 0
        # the same node alerting again after our own exclusion: also a no-op
        assert ex.handle(_alert("n002")).outcome is Outcome.DONE
        assert ex.handle(_alert("n002")).outcome is Outcome.SKIPPED
        assert ex.limiter.granted_last_hour() == 1


def test_cooldown_after_release() -> None:
    clock = FakeClock()
    policy = ActionPolicy(enabled=True, dry_run=False, pool_size=63, cooldown_s=7200.0)
    with Store.open(":memory:") as store:
        ex = ActionExecutor(policy, store=store, clock=clock)
        assert ex.handle(_alert("n001")).outcome is Outcome.DONE
        store.release_exclusion("n001", released=clock.now)
        clock.now += 3700.0
        result = ex.handle(_alert("n001"))
        assert result.outcome is Outcome.RATE_LIMITED and "cooldown" in result.reason
        clock.now += 3600.0
        assert ex.handle(_alert("n001")).outcome is Outcome.DONE


@pytest.mark.parametrize(("severity", "confidence", "outcome"), [
    ("hard", 0.9, Outcome.DONE),
    ("hard", 0.5, Outcome.SKIPPED),
    ("predictive", 0.99, Outcome.SKIPPED),
])
def test_only_severe_confident_alerts(severity: str, confidence: float, outcome: Outcome) -> None:
    with Store.open(":memory:") as store:
        ex = ActionExecutor(LIVE, store=store, clock=FakeClock())
        assert ex.handle(_alert("n001", severity, confidence)).outcome is outcome


def test_dry_run_reports_what_live_would_do_and_changes_nothing(tmp_path: Path) -> None:
    drained: list[str] = []
    with Store.open(":memory:") as store:
        ex = ActionExecutor(ActionPolicy(enabled=True, pool_size=63), store=store,
                            drain=lambda n, r: drained.append(n),
                            alerts_file=tmp_path / "alerts.jsonl", clock=FakeClock())
        results = [ex.handle(_alert(n)) for n in POOL[:10]]
        assert [r.outcome for r in results[:2]] == [Outcome.DRY_RUN] * 2
        assert {r.outcome for r in results[2:]} == {Outcome.RATE_LIMITED}
        assert [s.action for s in results[0].steps] == ["exclude", "drain", "notify"]
        assert all(s.outcome is Outcome.DRY_RUN for s in results[0].steps)
        assert ex.handle(_alert("n000")).outcome is Outcome.SKIPPED  # simulated exclusion
        assert store.exclusions() == []
    assert drained == [] and not (tmp_path / "alerts.jsonl").exists()


def test_failing_drain_is_reported_and_other_steps_still_run(tmp_path: Path) -> None:
    def drain(node: str, reason: str) -> None:
        raise LaunchError("scontrol update: Invalid node name specified")

    with Store.open(":memory:") as store:
        ex = ActionExecutor(LIVE, store=store, drain=drain,
                            alerts_file=tmp_path / "alerts.jsonl", clock=FakeClock())
        result = ex.handle(_alert("n001"))
        assert result.outcome is Outcome.FAILED
        steps = {s.action: s for s in result.steps}
        assert steps["exclude"].outcome is Outcome.DONE
        assert steps["drain"].outcome is Outcome.FAILED
        assert "Invalid node name" in steps["drain"].detail
        assert steps["notify"].outcome is Outcome.DONE
        assert store.active_excluded_nodes() == {"n001"}
        ex_rec = store.exclusions()[0]
        assert ex_rec.source == "trainguard watch" and "XID 79" in ex_rec.reason
        # the failed attempt counted: one more action this hour, then the limit
        assert ex.handle(_alert("n002")).outcome is Outcome.FAILED
        assert ex.handle(_alert("n003")).outcome is Outcome.RATE_LIMITED
    assert result.to_dict()["outcome"] == "failed"


def test_failing_store_still_drains_and_counts_toward_the_pool(tmp_path: Path) -> None:
    drained: list[str] = []
    store = Store.open(":memory:")
    ex = ActionExecutor(ActionPolicy(enabled=True, dry_run=False, pool_size=40,
                                     max_nodes_per_hour=5),
                        store=store, drain=lambda n, r: drained.append(n), clock=FakeClock())
    store.close()  # every store call now fails
    result = ex.handle(_alert("n001"))
    assert result.outcome is Outcome.FAILED
    assert [(s.action, s.outcome) for s in result.steps] == [
        ("exclude", Outcome.FAILED), ("drain", Outcome.DONE)]
    assert drained == ["n001"]
    # 5% of 40 = 2: the unrecorded exclusion still counts
    assert ex.handle(_alert("n002")).outcome is Outcome.FAILED
    assert ex.handle(_alert("n003")).outcome is Outcome.RATE_LIMITED


def test_notification_is_read_by_nodewatch(tmp_path: Path) -> None:
    alerts = tmp_path / "alerts.jsonl"
    alerts.touch()
    watch = NodeWatch({"n001": tmp_path / "kern.log"}, RuleSet([]), alerts_file=alerts)
    with Store.open(":memory:") as store:
        ex = ActionExecutor(LIVE, store=store, alerts_file=alerts, clock=FakeClock())
        assert ex.handle(_alert("n001")).outcome is Outcome.DONE
    events = watch.poll(1_000_001.0)
    assert len(events) == 1
    ev = events[0]
    assert ev.host == "n001" and ev.action is Action.EXCLUDE_NODE
    assert ev.severity is Severity.FATAL
    assert "DCGM_FI_DEV_XID_ERRORS" in ev.summary
    rec = json.loads(alert_line(_alert("n001")))
    assert rec["kind"] == "hard" and rec["source"] == "trainguard watch"
