"""Imported fault histories in a real PostgreSQL store (see conftest.postgres_server); the same
checks run on SQLite in tests/unit/store/test_store_histories.py."""

from __future__ import annotations

import time

import pytest
from history_store_contract import CHECKS, DAY, T0, Check, check_id, faults_of, many_faults

from trainguard.store import Store

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_histories_postgres(check: Check, fresh_postgres_url: str) -> None:
    check(fresh_postgres_url)


def test_ten_thousand_faults_are_one_round_trip(fresh_postgres_url: str) -> None:
    """A year of faults for a few hundred nodes goes in and comes out well inside the issue's
    5 s budget for import and analysis (the rows go in batches, not one statement each)."""
    events = many_faults(10_000)
    with Store.open(fresh_postgres_url) as store:
        started = time.perf_counter()
        hid = store.add_fault_history("big", source="trace.csv", fmt="csv", fleet_size=300,
                                      window_start=T0, window_end=T0 + 366 * DAY, origin=None,
                                      counts={}, meta={}, faults=faults_of(events))
        assert len(store.history_events(hid)) == 10_000
        elapsed = time.perf_counter() - started
    assert elapsed < 2.5, elapsed
