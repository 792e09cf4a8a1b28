"""Detection lead times: alerts on the culprit node in the window before the failure."""

from __future__ import annotations

import pytest
from analytics_fleet import T0

from trainguard.analytics import lead_time_summary, lead_times, load_runs
from trainguard.errors import ConfigError
from trainguard.store import Store


def test_lead_times_match_plain(fleet: tuple[Store, dict[str, int]]) -> None:
    store, ids = fleet
    runs = load_runs(store)
    leads = lead_times(runs, store.alerts())
    expected = []
    for a in store.attempts():
        failure = a.detail.get("failure") if a.detail else None
        if a.status != "failed" or not failure or not failure.get("culprit_nodes"):
            continue
        t = a.detail.get("failed_at") or a.ended
        starts = [al.start for al in store.alerts() if al.node in failure["culprit_nodes"]
                  and t - 86400 <= al.start < t]
        if starts:
            expected.append((a.id, t - min(starts)))
    assert [(x.attempt_id, x.lead_s) for x in leads] == expected
    assert [(x.attempt_id, x.node, x.lead_s, x.alert_kind, x.category) for x in leads] == [
        (ids["A0"], "n3", 3600.0, "predictive", "gpu_hardware"),
        (ids["A1"], "n5", 100.0, "hard", "nccl_timeout_hang"),
    ]


def test_summary_counts_missed(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    summary = lead_time_summary(load_runs(store), store.alerts())
    assert (summary.with_culprit, summary.predicted, summary.missed) == (3, 2, 1)
    assert summary.lead_median_s == pytest.approx(1850.0)


def test_window(fleet: tuple[Store, dict[str, int]]) -> None:
    store, _ = fleet
    runs = load_runs(store)
    assert [x.lead_s for x in lead_times(runs, store.alerts(), window_s=1000.0)] == [100.0]
    wide = lead_times(runs, store.alerts(), window_s=T0)
    assert wide[0].lead_s == pytest.approx(2600.0 + 200_000.0)  # the old alert now counts
    with pytest.raises(ConfigError, match="window_s"):
        lead_times(runs, store.alerts(), window_s=0.0)
