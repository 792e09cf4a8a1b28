"""The event store: what happened to training jobs, kept for the supervisor and for analytics."""

from __future__ import annotations

from trainguard import __version__
from trainguard.store.checks import ChecksMixin
from trainguard.store.connect import open_engine
from trainguard.store.fleet import FleetMixin
from trainguard.store.histories import HistoriesMixin
from trainguard.store.runs import RunsMixin


class Store(RunsMixin, FleetMixin, ChecksMixin, HistoriesMixin):
    """The event store (SQLite by default, PostgreSQL by URL).

        >>> with Store.open(":memory:") as store:
        ...     sid = store.create_session("llama-70b", backend="slurm", started=0.0)
        ...     [s.name for s in store.sessions()]
        ['llama-70b']

    Every method runs in its own transaction; errors from the database come out as
    :class:`~trainguard.errors.StoreError` with one readable line. The methods live in
    :mod:`.runs` (sessions, attempts, events, checkpoints), :mod:`.fleet` (nodes, alerts,
    exclusions), :mod:`.checks` (host checks) and :mod:`.histories` (imported fault histories,
    kept apart from what trainguard observed itself).
    """

    @classmethod
    def open(cls, db: str | None = None, *, readonly: bool = False) -> Store:
        """Open the store named by ``db`` (see :func:`resolve_db_url`), creating it if needed.

        A new SQLite store creates its file's own directory when missing, but no directory
        above it: ``/tmp/x/new.db`` works, ``/nonexistent/a/b.db`` is a `StoreError` and
        creates nothing. ``readonly=True`` (report, nodes, advise) never creates anything: a
        missing store is "no trainguard store at PATH", and writes fail. Either way another
        application's database (tables but no trainguard schema version) is refused untouched.
        """
        engine = open_engine(db, readonly=readonly, written_by=f"trainguard {__version__}")
        return cls(engine, readonly=readonly)


__all__ = ["Store"]
