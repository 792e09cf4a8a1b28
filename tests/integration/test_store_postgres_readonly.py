"""Read-only opens of a PostgreSQL store: an empty database is no store (and stays empty), and
the server itself refuses writes in a read-only session."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from trainguard.errors import StoreError
from trainguard.store import Store

pytestmark = pytest.mark.integration


def test_read_only_open_of_an_empty_database_creates_nothing(fresh_postgres_url: str) -> None:
    with pytest.raises(StoreError, match=r"no trainguard store at .*: the database is empty"):
        Store.open(fresh_postgres_url, readonly=True)
    engine = sa.create_engine(fresh_postgres_url.replace("postgresql://",
                                                         "postgresql+psycopg://"))
    try:
        assert sa.inspect(engine).get_table_names() == []
    finally:
        engine.dispose()


def test_read_only_session_refuses_writes_at_the_server(fresh_postgres_url: str) -> None:
    with Store.open(fresh_postgres_url) as store:
        store.upsert_node("node7", state="ok", seen=1.0)
    with Store.open(fresh_postgres_url, readonly=True) as store:
        assert [n.name for n in store.nodes()] == ["node7"]
        store._readonly = False  # past the store's own guard, the server refuses
        with pytest.raises(StoreError, match="read-only transaction"):
            store.upsert_node("node8")
    with Store.open(fresh_postgres_url) as store:
        assert [n.name for n in store.nodes()] == ["node7"]
