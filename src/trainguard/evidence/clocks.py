"""The clocks that log timestamps are on, and the time each event is correlated at.

Most lines carry wall-clock time (unix seconds, comparable across hosts and files). Plain
``dmesg`` prints seconds since the machine booted (``[86012.345678] NVRM: Xid ...``): a clock of
its own per machine, which cannot be placed on the wall clock without a boot time that the
excerpt does not carry. Such events keep their boot clock (their order and gaps among
themselves are real), are never given a date, and are linked to wall-clock events only where
that is unambiguous (``incidents.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from trainguard.evidence.events import FailureEvent, TimeKind

__all__ = ["BOOT_TIME_NOTE", "WALL_CLOCK", "anchor_times", "boot_clock", "boot_time_files",
           "hang_duration_s", "wall_time"]

WALL_CLOCK = "abs"
NO_CLOCK = "none"
BOOT_TIME_NOTE = (
    "timestamps are seconds since boot (plain `dmesg`), not wall-clock times: its events get "
    "no date and are linked to events of other files only when that is unambiguous "
    "(`dmesg -T` or `journalctl -k` print wall-clock times)")
"""What `trainguard logs classify` says once per file whose events carry seconds since boot."""


def boot_clock(ev: FailureEvent) -> str:
    """The clock of a seconds-since-boot time: its host's, else its file's (two files that
    name no host may come from two machines)."""
    if ev.host:
        return f"rel:{ev.host}"
    return f"rel-file:{ev.evidence[0].path if ev.evidence else ''}"


def wall_time(ev: FailureEvent) -> float:
    """Its absolute time; infinity for seconds since boot and no time (they sort last)."""
    return ev.time if ev.time is not None and ev.time_kind is TimeKind.ABSOLUTE \
        else float("inf")


def boot_time_files(events: Iterable[FailureEvent]) -> list[str]:
    """The files whose events carry seconds since boot, each once, in order of appearance."""
    return list(dict.fromkeys(ev.evidence[0].path for ev in events
                              if ev.time_kind is TimeKind.RELATIVE and ev.evidence))


def anchor_times(events: Sequence[FailureEvent]) -> list[tuple[float | None, str]]:
    """(anchor, clock) per event: its own time moved back by the hang a watchdog reports,
    or, for a line without a time, the time of the nearest timed event in the same file.
    The clock is :data:`WALL_CLOCK`, a boot clock (:func:`boot_clock`) or ``"none"``."""
    by_file: dict[str, list[int]] = defaultdict(list)
    for i, ev in enumerate(events):
        by_file[ev.evidence[0].path if ev.evidence else ""].append(i)
    out: list[tuple[float | None, str]] = [(None, NO_CLOCK)] * len(events)
    for idxs in by_file.values():
        idxs.sort(key=lambda i: events[i].evidence[0].line_no if events[i].evidence else 0)
        last: tuple[float | None, str] = (None, NO_CLOCK)
        pending: list[int] = []
        for i in idxs:
            ev = events[i]
            if ev.time is not None and ev.time_kind is not TimeKind.NONE:
                clock = WALL_CLOCK if ev.time_kind is TimeKind.ABSOLUTE else boot_clock(ev)
                out[i] = (ev.time - hang_duration_s(ev), clock)
                last = (ev.time, clock)
                for j in pending:  # untimed lines before the first timed one in this file
                    out[j] = last
                pending = []
            elif last[0] is not None:
                out[i] = last
            else:
                pending.append(i)
    return out


def hang_duration_s(ev: FailureEvent) -> float:
    """How long a watchdog says the operation hung (the hang started that long before)."""
    for key in ("ran_ms", "timeout_ms"):
        value = ev.field_value(key)
        if value and value.isdigit():
            return min(int(value) / 1000.0, 6 * 3600.0)
    return 0.0
