"""The span an imported history covers.

A fault record says when faults happened, not how long it was kept: the window is the span the
rates are divided by. Defaults (stated in the docs): the window starts at the relative origin
(time 0) when times are relative, else at the first event; it ends at the last event. An
operator who knows the record's true span passes ``--window-start``/``--window-end`` in the
file's own time convention (with relative times, a number in their unit: ``348`` days).

The window is half-open, as every fleet figure takes it: a fault counts when it starts before the
window's end. A fault that starts exactly at the end (with the default end: one still open at the
last event of the file) is stored but counted by no analysis of the window;
:func:`starting_at_end` finds them so that the import can say so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from trainguard.errors import HistoryError
from trainguard.fleet.events import FleetWindow
from trainguard.history.times import TimeSpec, TimeValueError, unit_seconds

__all__ = ["history_window", "starting_at_end", "window_bound"]


def window_bound(value: str, times: TimeSpec, option: str) -> float:
    """Unix seconds of a window bound given in the file's time convention."""
    try:
        return times.seconds(value)
    except TimeValueError as exc:
        raise HistoryError(f"{option} {value!r}: {exc} (the same convention as the file's "
                           "times)") from None


def history_window(first: float | None, last: float | None, times: TimeSpec, *,
                   fleet_size: int, start: str | None = None,
                   end: str | None = None) -> FleetWindow:
    """The window of an import (module docstring for the defaults); every event of the file
    must lie inside it."""
    if first is None or last is None:
        raise HistoryError("the file has no usable fault: nothing to import")
    if start is not None:
        lo = window_bound(start, times, "--window-start")
    else:
        lo = (times.origin or 0.0) if times.relative else first
    hi = last if end is None else window_bound(end, times, "--window-end")
    if first < lo:
        raise HistoryError(f"the window starts after the first event (at {_as_given(first, times)})"
                           "; give an earlier --window-start (the window is the span the whole "
                           "record covers)")
    if last > hi:
        raise HistoryError(f"the window ends before the last event (at {_as_given(last, times)}); "
                           "give a later --window-end (the window is the span the whole record "
                           "covers)")
    if not hi > lo:
        raise HistoryError("the window is empty (it ends where it starts): give --window-end, "
                           "the end of the span the record covers")
    return FleetWindow(lo, hi, fleet_size)


def _as_given(t: float, times: TimeSpec) -> str:
    """An instant in the file's own convention, for a message: ``348.98 days`` or ISO 8601.

    >>> _as_given(86400.0 * 1.5, TimeSpec(unit="days"))
    '1.5 days'
    """
    if times.relative and times.unit is not None:
        value = (t - (times.origin or 0.0)) / unit_seconds(times.unit)
        return f"{value:.6g} {times.unit}"
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")


def starting_at_end(starts: Iterable[float], window: FleetWindow) -> int:
    """How many of the faults starting at ``starts`` begin at (or after) the window's end, so
    that no figure of the window counts them.

    >>> starting_at_end([0.0, 5.0, 10.0], FleetWindow(0.0, 10.0, 3))
    1
    """
    return sum(1 for start in starts if start >= window.end)
