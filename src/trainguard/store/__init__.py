"""The event store: sessions, attempts, failure events, alerts, exclusions, checkpoints, host
checks, and imported fault histories (kept apart from what trainguard observed itself).

SQLite by default (``--db PATH`` / ``$TRAINGUARD_DB`` / ``./trainguard.db``), PostgreSQL by URL
for shared deployments (``pip install 'trainguard[postgres]'``).

    >>> from trainguard.store import Store
    >>> with Store.open(":memory:") as store:
    ...     store.add_exclusion("node-7", reason="XID 79", created=0.0)
    ...     sorted(store.active_excluded_nodes())
    1
    ['node-7']
"""

from __future__ import annotations

from trainguard.store.connect import DB_ENV, DEFAULT_DB, NO_STORE, resolve_db_url, wants_no_store
from trainguard.store.histories import HistoryExists, UnknownHistory
from trainguard.store.records import (
    ALERT_KINDS,
    CHECK_CONTEXTS,
    AlertRecord,
    AttemptRecord,
    CheckpointRecord,
    ExclusionRecord,
    FaultHistoryRecord,
    HostCheckRecord,
    NodeRecord,
    SessionRecord,
)
from trainguard.store.runs import RUNNING
from trainguard.store.schema import SCHEMA_VERSION
from trainguard.store.store import Store

__all__ = [
    "ALERT_KINDS",
    "CHECK_CONTEXTS",
    "DB_ENV",
    "DEFAULT_DB",
    "NO_STORE",
    "RUNNING",
    "SCHEMA_VERSION",
    "AlertRecord",
    "AttemptRecord",
    "CheckpointRecord",
    "ExclusionRecord",
    "FaultHistoryRecord",
    "HistoryExists",
    "HostCheckRecord",
    "NodeRecord",
    "SessionRecord",
    "Store",
    "UnknownHistory",
    "resolve_db_url",
    "wants_no_store",
]
