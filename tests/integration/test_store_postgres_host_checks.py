"""Host checks in a real PostgreSQL store (see conftest.postgres_server)."""

from __future__ import annotations

import pytest
from host_checks_contract import CHECKS, Check, check_id

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_host_checks_postgres(check: Check, fresh_postgres_url: str) -> None:
    check(fresh_postgres_url)
