"""Times given by users: unix seconds or ISO-8601, one parser for every entry point."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from trainguard.errors import ConfigError

__all__ = ["parse_timestamp"]


def parse_timestamp(value: object, what: str) -> float:
    """Unix seconds (a number or a numeric string) or ISO-8601 (naive = UTC, `Z` accepted).

    Anything else is a `ConfigError` that starts with `what` (a CLI option, `file:line: key`).

    >>> parse_timestamp("1970-01-01T00:01:00Z", "--start")
    60.0
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{what} must be unix seconds or ISO-8601, got {value!r}")
    if isinstance(value, str):
        try:
            t = float(value)
        except ValueError:
            try:
                dt = datetime.fromisoformat(value.strip())
            except ValueError as exc:
                raise ConfigError(f"{what} {value!r} is not unix seconds or ISO-8601") from exc
            if dt.tzinfo is None:
                dt = dt.replace(tzinfo=UTC)
            t = dt.timestamp()
    else:
        t = float(value)
    if not math.isfinite(t):
        raise ConfigError(f"{what} must be finite")
    return t
