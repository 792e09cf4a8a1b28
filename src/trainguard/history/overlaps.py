"""Faults of one node that coincide: exact duplicates, same-kind overlaps, and merged outages.

Taken in the order of their lines:

- a fault equal to an accepted one (same node, kind, start and end) is an exact duplicate: merged
  into it and counted, not refused;
- a fault that overlaps an accepted fault of the same node *and kind* is refused, naming the
  other's line (one node cannot have the same fault twice at once); touching (one ends when the
  other starts) is not overlapping;
- faults of *different* kinds that overlap on one node are legitimate and accepted: the fleet
  analytics merge them into one outage (:func:`count_overlapping` counts them).

    >>> spans = [Span(1, "n1", "GPU", 0.0, 10.0), Span(2, "n1", "GPU", 0.0, 10.0),
    ...          Span(3, "n1", "GPU", 5.0, 20.0), Span(4, "n1", "NIC", 5.0, 20.0)]
    >>> kept, refused, duplicates = accept_spans(spans)
    >>> [s.line for s in kept], [str(r) for r in refused], duplicates
    ([1, 4], ["line 3: fault of node n1 ('GPU') overlaps the one at line 1"], 1)
    >>> count_overlapping(kept)
    2
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from trainguard.history.extract import Span, shown
from trainguard.history.result import Refusal
from trainguard.intervals import union_spans


def _end(span: Span) -> float:
    return math.inf if span.end is None else span.end


def _overlap(a: tuple[float, float, int], lo: float, hi: float) -> bool:
    return a[0] < hi and lo < a[1]


def accept_spans(spans: Sequence[Span]) -> tuple[list[Span], list[Refusal], int]:
    """The accepted faults (in line order), the refused ones, and how many exact duplicates
    were merged."""
    seen: set[tuple[str, str, float, float | None]] = set()
    placed: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
    kept: list[Span] = []
    refused: list[Refusal] = []
    duplicates = 0
    for span in sorted(spans, key=lambda s: s.line):
        exact = (span.node, span.kind, span.start, span.end)
        if exact in seen:
            duplicates += 1
            continue
        lo, hi = span.start, _end(span)
        accepted = placed[(span.node, span.kind)]
        at = bisect.bisect_left(accepted, (lo, hi, span.line))
        clash = next((other for other in accepted[max(at - 1, 0):at + 1]
                      if _overlap(other, lo, hi)), None)
        if clash is not None:
            refused.append(Refusal(span.line, f"fault of node {shown(span.node)} "
                                   f"({shown(span.kind)!r}) overlaps the one at line {clash[2]}"))
            continue
        accepted.insert(at, (lo, hi, span.line))
        seen.add(exact)
        kept.append(span)
    return kept, refused, duplicates


def count_overlapping(spans: Iterable[Span]) -> int:
    """How many faults overlap or touch another fault of the same node (any kind)."""
    per_node: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for span in spans:
        per_node[span.node].append((span.start, _end(span)))
    return sum(count for node_spans in per_node.values()
               for _, _, count in union_spans(node_spans) if count > 1)


__all__ = ["accept_spans", "count_overlapping"]
