"""The union of time spans: overlapping or touching spans ``[lo, hi)`` become one.

    >>> union_spans([(5.0, 6.0), (0.0, 2.0), (2.0, 3.0), (1.0, 1.5)])
    [(0.0, 3.0, 3), (5.0, 6.0, 1)]
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["union_spans"]


def union_spans(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float, int]]:
    """Sorted ``(lo, hi, n)``: each maximal union of spans that overlap or touch (the next
    starts at or before the current one ends), with how many spans it merged."""
    out: list[tuple[float, float, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            cur_lo, cur_hi, n = out[-1]
            out[-1] = (cur_lo, max(cur_hi, hi), n + 1)
        else:
            out.append((lo, hi, 1))
    return out
