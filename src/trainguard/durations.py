"""Durations as reports print them: one adaptive formatter for every summary, chart title and
table, so the same number never reads "0.5 s" in one place and "0.0 min" in another.

    >>> format_duration(0.012), format_duration(0.5), format_duration(754.0)
    ('12 ms', '500 ms', '12.6 min')
"""

from __future__ import annotations

import math

__all__ = ["format_duration"]

_STEPS = ((120.0, 1.0, "s", 1), (2 * 3600.0, 60.0, "min", 1), (2 * 86400.0, 3600.0, "h", 2))


def format_duration(seconds: float) -> str:
    """``12 ms``, ``4.3 s``, ``12.5 min``, ``3.20 h``, ``2.5 d``; ``never`` for infinity.

    The unit is chosen so that the number keeps at least two significant digits: below one
    second milliseconds, then seconds up to 2 min, minutes up to 2 h, hours up to 2 days.

    >>> format_duration(0.0), format_duration(7199.0), format_duration(3 * 86400.0)
    ('0 ms', '120.0 min', '3.0 d')
    """
    if math.isnan(seconds):
        return "n/a"
    if math.isinf(seconds):
        return "never" if seconds > 0 else "-never"
    sign, s = ("-", -seconds) if seconds < 0 else ("", seconds)
    if s < 1.0:
        return f"{sign}{s * 1000:.0f} ms"
    for limit, div, unit, digits in _STEPS:
        if s < limit:
            return f"{sign}{s / div:.{digits}f} {unit}"
    return f"{sign}{s / 86400.0:.1f} d"
