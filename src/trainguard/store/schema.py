"""The event store's tables (SQLAlchemy Core) and their version.

Conventions, so analytics can be written as plain SQL on either backend:

- times are unix seconds as ``DOUBLE`` (``started``/``ended``/``created``/``released``/``time``);
- everything a later query filters, groups or joins on is a real column (node, category, status,
  step, durations); attempt membership and per-attempt exclusions are rows of
  ``attempt_nodes``, not JSON;
- strings have no length limit (PostgreSQL would reject what SQLite silently accepts);
- ``JSON`` columns hold only open-ended payloads (per-rank exit codes, startup phases, alert
  signals, evidence lines, rule-extracted fields, free-form config/detail/attrs).

Bump :data:`SCHEMA_VERSION` on any change to these tables that an older store cannot simply gain;
a store refuses to open a database whose recorded version is newer than the one it was built with.
A new table is not such a change: a writer's open creates the tables that are missing
(``create_all(checkfirst=True)`` in :func:`trainguard.store.connect.ensure_schema`), and readers
of a store that lacks one get nothing from it (``host_checks``, ``fault_histories`` and
``history_faults`` were added this way to version 1).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

SCHEMA_VERSION = 1
"""Version of the tables below, recorded in ``schema_version`` when a database is created."""

# 64-bit ids on PostgreSQL; SQLite only auto-increments a column declared exactly INTEGER.
_Id = BigInteger().with_variant(Integer(), "sqlite")
# ``none_as_null``: a Python None is SQL NULL, not the JSON text 'null'.
_Json = JSON(none_as_null=True)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _fk(target: str) -> ForeignKey:
    return ForeignKey(target, ondelete="CASCADE")


schema_version = Table(
    "schema_version",
    metadata,
    # A single row (id = 1) so concurrent openers cannot record two versions.
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("version", Integer, nullable=False),
    Column("written", Double, nullable=False),
    Column("written_by", String, nullable=False),
    CheckConstraint("id = 1", name="single_row"),
)

nodes = Table(
    "nodes",
    metadata,
    Column("name", String, primary_key=True),
    Column("state", String),
    Column("attrs", _Json),
    Column("first_seen", Double),
    Column("last_seen", Double),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("name", String, nullable=False),
    Column("backend", String, nullable=False),
    Column("external_id", String),
    Column("status", String, nullable=False),
    Column("started", Double, nullable=False),
    Column("ended", Double),
    Column("config", _Json),
    Index(None, "started"),
    Index(None, "external_id"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("session_id", _Id, _fk("sessions.id"), nullable=False),
    Column("attempt_index", Integer, nullable=False),
    Column("automatic", Boolean, nullable=False),
    Column("status", String, nullable=False),
    Column("started", Double, nullable=False),
    Column("ended", Double),
    Column("resumed_from_step", BigInteger),
    Column("failure_category", String),
    Column("decision", String),
    Column("exit_codes", _Json),
    Column("startup_phases", _Json),
    Column("evidence", _Json),
    Column("detail", _Json),
    UniqueConstraint("session_id", "attempt_index"),
    Index(None, "started"),
    Index(None, "failure_category"),
)

attempt_nodes = Table(
    "attempt_nodes",
    metadata,
    Column("attempt_id", _Id, _fk("attempts.id"), primary_key=True),
    # 'member': the attempt ran on the node; 'excluded': the attempt's outcome excluded it.
    Column("role", String, primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("node", String, nullable=False),
    Index(None, "node"),
)

events = Table(
    "events",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("session_id", _Id, _fk("sessions.id")),
    Column("attempt_id", _Id, _fk("attempts.id")),
    Column("category", String, nullable=False),
    Column("action", String, nullable=False),
    Column("severity", String, nullable=False),
    Column("signature", String, nullable=False),
    Column("summary", Text, nullable=False),
    Column("time", Double),
    Column("time_kind", String, nullable=False),
    Column("host", String),
    Column("gpu_pci", String),
    Column("gpu_index", Integer),
    Column("rank", Integer),
    Column("xid", Integer),
    Column("caused_by_xid", Integer),
    Column("confidence", Double, nullable=False),
    Column("fields", _Json),
    Column("evidence", _Json),
    Index(None, "host", "time"),
    Index(None, "time"),
    Index(None, "category"),
    Index(None, "session_id"),
)

alerts = Table(
    "alerts",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("node", String, nullable=False),
    Column("kind", String, nullable=False),
    Column("source", String, nullable=False),
    Column("started", Double, nullable=False),
    Column("ended", Double),
    Column("peak_score", Double, nullable=False),
    Column("signals", _Json),
    Index(None, "node", "started"),
    Index(None, "started"),
)

exclusions = Table(
    "exclusions",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("node", String, nullable=False),
    Column("reason", Text, nullable=False),
    Column("source", String, nullable=False),
    Column("created", Double, nullable=False),
    Column("released", Double),
    Column("session_id", _Id, _fk("sessions.id")),
    Column("attempt_id", _Id, _fk("attempts.id")),
    Column("evidence", _Json),
    Index(None, "node", "released"),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("session_id", _Id, _fk("sessions.id")),
    Column("attempt_id", _Id, _fk("attempts.id")),
    Column("step", BigInteger, nullable=False),
    Column("path", Text, nullable=False),
    Column("created", Double, nullable=False),
    Column("size_bytes", BigInteger),
    Column("save_s", Double),
    Column("blocking_s", Double),
    Column("ok", Boolean, nullable=False),
    Index(None, "session_id", "step"),
)

host_checks = Table(
    "host_checks",
    metadata,
    # One row per host per check (``trainguard check``, a run's pre-flight or stop-time check,
    # ``nodes release --verify``); the check's start and length are the whole check's.
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("host", String, nullable=False),
    Column("checked_at", Double, nullable=False),
    Column("duration_s", Double, nullable=False),
    Column("level", String, nullable=False),
    Column("reason", Text, nullable=False),
    Column("context", String, nullable=False),
    Column("session_id", _Id, _fk("sessions.id")),
    Column("findings", _Json),
    Column("figures", _Json),
    Index(None, "host", "checked_at"),
    Index(None, "session_id"),
)

fault_histories = Table(
    "fault_histories",
    metadata,
    # A fault record imported from elsewhere (``trainguard history import``): kept apart from
    # what trainguard observed itself (events, alerts, exclusions), which never read it.
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("name", String, nullable=False),
    Column("source", Text, nullable=False),
    Column("fmt", String, nullable=False),
    Column("fleet_size", Integer, nullable=False),
    Column("window_start", Double, nullable=False),
    Column("window_end", Double, nullable=False),
    Column("origin", Double),
    Column("imported", Double, nullable=False),
    Column("counts", _Json),
    Column("meta", _Json),
    UniqueConstraint("name"),
    CheckConstraint("fleet_size >= 1", name="fleet_size"),
    CheckConstraint("window_end > window_start", name="window"),
)

history_faults = Table(
    "history_faults",
    metadata,
    # One fault of an imported history; ``line`` is where the source file gave it.
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("history_id", _Id, _fk("fault_histories.id"), nullable=False),
    Column("node", String, nullable=False),
    Column("started", Double, nullable=False),
    Column("ended", Double),
    Column("kind", Text, nullable=False),
    Column("category", String, nullable=False),
    Column("line", Integer),
    Index(None, "history_id", "node", "started"),
)

__all__ = [
    "SCHEMA_VERSION",
    "alerts",
    "attempt_nodes",
    "attempts",
    "checkpoints",
    "events",
    "exclusions",
    "fault_histories",
    "history_faults",
    "host_checks",
    "metadata",
    "nodes",
    "schema_version",
    "sessions",
]
