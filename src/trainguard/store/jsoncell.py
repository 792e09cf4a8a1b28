"""Reading a JSON cell without letting one bad cell fail a whole query.

SQLAlchemy decodes a JSON column while it builds each row, so a cell that is not JSON raises
out of the query and every good row is lost with it. The engines therefore read JSON with
:func:`lenient_json_loads`, which gives :data:`UNREADABLE` for such a cell; the row decoders
(:mod:`trainguard.store.codec`) then skip that one row with a warning.
"""

from __future__ import annotations

import json
from typing import Any


class _Unreadable:
    """The value of a JSON cell that is not JSON."""

    def __repr__(self) -> str:
        return "UNREADABLE"


UNREADABLE: Any = _Unreadable()
"""What :func:`lenient_json_loads` gives for a cell that is not JSON (a single object)."""


def lenient_json_loads(text: str | bytes) -> Any:
    """``json.loads``, or :data:`UNREADABLE` where it would raise (the engines'
    ``json_deserializer``, on SQLite and on PostgreSQL's psycopg)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return UNREADABLE


__all__ = ["UNREADABLE", "lenient_json_loads"]
