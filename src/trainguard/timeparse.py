"""Times given by users, one parser each for every entry point: time stamps (unix seconds or
ISO-8601), durations (seconds, or a number with a unit) and years."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from trainguard.errors import ConfigError

__all__ = ["YEAR_MAX", "YEAR_MIN", "check_year", "compact_duration", "parse_duration",
           "parse_timestamp"]


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


_UNITS_DOWN = (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0))


def compact_duration(seconds: float) -> str:
    """The shortest exact spelling :func:`parse_duration` reads back: ``5m``, ``6h``, ``90s``,
    ``500ms``, ``1.5s``.

        >>> compact_duration(300.0), compact_duration(90), compact_duration(0.5)
        ('5m', '90s', '500ms')
    """
    for unit, size in _UNITS_DOWN:
        count = seconds / size
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    ms = seconds * 1000
    if 0 < seconds < 1 and ms == int(ms):
        return f"{int(ms)}ms"
    return f"{seconds:g}s"


YEAR_MIN, YEAR_MAX = 1970, 2100
"""The years a log line without one may be given (``--year``)."""


def check_year(year: int, what: str) -> int:
    """`year` when it is within :data:`YEAR_MIN`..:data:`YEAR_MAX`, else a `ConfigError`."""
    if not YEAR_MIN <= year <= YEAR_MAX:
        raise ConfigError(f"{what} must be between {YEAR_MIN} and {YEAR_MAX}, got {year}")
    return year
