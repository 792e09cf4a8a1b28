"""Start and end events paired into faults, per node and kind, in the order of the file.

The rules (each refused event keeps its line and a one-line reason; the rest still pair):

- a node's events must come in time order: an event earlier than the same node's previous
  (accepted) event is refused;
- a start of a node and kind that already has an open fault is refused (one node cannot have
  two overlapping faults of the same kind); starts of other kinds are fine;
- an end pairs with the open start of the same node and kind (first in, first out); an end with
  no open start is refused;
- a start still open at the end of the file is a fault without an end (``end`` None).

    >>> events = [Occurrence(1, "n1", "GPU", 0.0, True, "fault_start", "0"),
    ...           Occurrence(2, "n1", "GPU", 5.0, False, "fault_end", "5"),
    ...           Occurrence(3, "n1", "GPU", 6.0, False, "fault_end", "6")]
    >>> spans, refused = pair_events(events)
    >>> spans, [str(r) for r in refused]
    ([Span(line=1, node='n1', kind='GPU', start=0.0, end=5.0)], \
['line 3: fault_end of node n1 (GPU) has no open fault_start'])
"""

from __future__ import annotations

from collections.abc import Iterable

from trainguard.history.extract import Occurrence, Span, shown
from trainguard.history.result import Refusal


def pair_events(events: Iterable[Occurrence], start_word: str = "start") -> \
        tuple[list[Span], list[Refusal]]:
    """Faults (closed ones in the order they close, then the open ones by line) and the
    refused events. ``start_word`` names a start in a refusal until the stream spells one."""
    last: dict[str, tuple[float, int]] = {}
    open_: dict[tuple[str, str], Occurrence] = {}
    spans: list[Span] = []
    refused: list[Refusal] = []
    for event in events:
        node = event.node
        previous = last.get(node)
        if previous is not None and event.time < previous[0]:
            refused.append(Refusal(event.line, f"event of node {shown(node)} at {event.stamp} is "
                                   f"earlier than its previous event (line {previous[1]}): a "
                                   "node's events must be in time order"))
            continue
        key = (node, event.kind)
        if event.start:
            held = open_.get(key)
            if held is not None:
                refused.append(Refusal(event.line, f"node {shown(node)} already has an open "
                                       f"{shown(event.kind)!r} fault since line {held.line}"))
                continue
            open_[key] = event
            start_word = event.value
        else:
            opened = open_.pop(key, None)
            if opened is None:
                refused.append(Refusal(event.line, f"{shown(event.value)} of node {shown(node)} "
                                       f"({shown(event.kind)}) has no open {start_word}"))
                continue
            spans.append(Span(opened.line, node, event.kind, opened.time, event.time))
        last[node] = (event.time, event.line)
    still_open = sorted(open_.values(), key=lambda e: e.line)
    spans.extend(Span(e.line, e.node, e.kind, e.time, None) for e in still_open)
    return spans, refused


__all__ = ["pair_events"]
