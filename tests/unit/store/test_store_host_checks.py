"""Host checks in a SQLite store (the same checks run on PostgreSQL in tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest
from host_checks_contract import CHECKS, Check, check_id


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_host_checks_sqlite(check: Check, tmp_path: Path) -> None:
    check(str(tmp_path / "trainguard.db"))
