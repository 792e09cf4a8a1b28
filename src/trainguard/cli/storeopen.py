"""Opening the event store for a command: a store that cannot be opened is bad input (exit 2)."""

from __future__ import annotations

from trainguard.cli.console import fail
from trainguard.errors import StoreError
from trainguard.store import Store

__all__ = ["open_store"]


def open_store(db: str | None, *, readonly: bool = False) -> Store:
    """`Store.open`, or one error line and exit 2 when ``--db`` names no usable store.

    Readers pass ``readonly=True``: a missing store is "no trainguard store at PATH" and
    nothing is created. A writer creates the store, and its file's own directory, but no
    directory above it. Either way the command could not start its work because of its input
    (a wrong path, another application's database, a newer schema, an unreachable server), so
    the exit status is 2; errors once the store is open are the command's own.
    """
    try:
        return Store.open(db, readonly=readonly)
    except StoreError as exc:
        fail(str(exc), 2)
