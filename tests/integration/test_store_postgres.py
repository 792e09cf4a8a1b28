"""The event store against a real PostgreSQL server (see conftest.postgres_server)."""

from __future__ import annotations

import threading

import pytest
from store_contract import CHECKS, T0, Check, check_id, full_event

from trainguard.errors import StoreError
from trainguard.store import SCHEMA_VERSION, Store

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
def test_contract_postgres(check: Check, fresh_postgres_url: str) -> None:
    check(fresh_postgres_url)


def test_postgres_url_opens_with_psycopg(postgres_url: str) -> None:
    with Store.open(postgres_url) as store:
        assert store.backend == "postgresql"
        assert store.url.startswith("postgresql+psycopg://postgres@127.0.0.1:")
        assert store.schema_version() == SCHEMA_VERSION


def test_password_masked_in_url_and_errors(fresh_postgres_url: str) -> None:
    # trust auth ignores the password, so the URL works and we can see how it is displayed
    url = fresh_postgres_url.replace("postgres@", "postgres:s3cr3t@")
    with Store.open(url) as store:
        assert "s3cr3t" not in store.url
        assert ":***@" in store.url
        with pytest.raises(StoreError) as info:
            store.finish_session(42, status="failed", ended=T0)
    assert "s3cr3t" not in str(info.value)


def test_concurrent_first_open_creates_schema_once(fresh_postgres_url: str) -> None:
    errors: list[BaseException] = []

    def open_and_write(i: int) -> None:
        try:
            with Store.open(fresh_postgres_url) as store:
                store.add_events([full_event(rank=i)])
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=open_and_write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with Store.open(fresh_postgres_url) as store:
        assert sorted(ev.rank or 0 for ev in store.events()) == [0, 1, 2, 3]


def test_missing_database_is_one_line_store_error(postgres_url: str) -> None:
    url = postgres_url.rsplit("/", 1)[0] + "/no_such_db"
    with pytest.raises(
        StoreError, match=r'cannot open store .*database "no_such_db" does not exist'
    ):
        Store.open(url)
