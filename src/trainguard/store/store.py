"""The event store: what happened to training jobs, kept for the supervisor and for analytics."""

from __future__ import annotations

from trainguard import __version__
from trainguard.store.connect import create_engine, ensure_schema, resolve_db_url
from trainguard.store.fleet import FleetMixin
from trainguard.store.runs import RunsMixin


class Store(RunsMixin, FleetMixin):
    """The event store (SQLite by default, PostgreSQL by URL).

        >>> with Store.open(":memory:") as store:
        ...     sid = store.create_session("llama-70b", backend="slurm", started=0.0)
        ...     [s.name for s in store.sessions()]
        ['llama-70b']

    Every method runs in its own transaction; errors from the database come out as
    :class:`~trainguard.errors.StoreError` with one readable line. The methods live in
    :mod:`.runs` (sessions, attempts, events, checkpoints) and :mod:`.fleet` (nodes, alerts,
    exclusions).
    """

    @classmethod
    def open(cls, db: str | None = None) -> Store:
        """Open (creating if needed) the store named by ``db``; see :func:`resolve_db_url`."""
        engine = create_engine(resolve_db_url(db))
        try:
            ensure_schema(engine, written_by=f"trainguard {__version__}")
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)


__all__ = ["Store"]
