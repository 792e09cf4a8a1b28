"""Times given by users: unix seconds or ISO-8601, one parser for every entry point."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from trainguard.errors import ConfigError

__all__ = ["parse_duration", "parse_timestamp"]


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


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_PLAIN = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: str, what: str) -> float:
    """Seconds from ``500ms``, ``30s``, ``1.5m``, ``6h``, ``2d``, Prometheus' ``1m30s`` or a
    plain number of seconds.

        >>> parse_duration("1.5m", "x"), parse_duration("1m30s", "x"), parse_duration("30", "x")
        (90.0, 90.0, 30.0)
    """
    text = value.strip()
    if _PLAIN.fullmatch(text):
        return float(text)
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ConfigError(f"{what} {value!r} is not a duration (e.g. 500ms, 30s, 5m, 6h, 1d)")
    return sum(float(n) * _UNIT_S[u] for n, u in parts)
