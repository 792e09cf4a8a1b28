"""Fixtures: the fleet history of :mod:`analytics_fleet` in a fresh SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from analytics_fleet import populate

from trainguard.store import Store


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Store, dict[str, int]]]:
    with Store.open(str(tmp_path / "fleet.db")) as store:
        ids = populate(store)
        yield store, ids


@pytest.fixture
def fleet_db(tmp_path: Path) -> tuple[str, dict[str, int]]:
    db = str(tmp_path / "fleet.db")
    with Store.open(db) as store:
        ids = populate(store)
    return db, ids
