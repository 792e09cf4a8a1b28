"""Times of a fault history: absolute or relative, and durations, all to unix seconds.

- **Absolute** (``unit`` None): ISO 8601 (``2024-03-30T08:15:00``, with ``Z`` or an offset such
  as ``+08:00``; without a zone it is in ``tz``, UTC when none is given), a number (or numeric
  string) of unix seconds, or of milliseconds, microseconds or nanoseconds with ``epoch_unit``
  ``ms``, ``us`` or ``ns``, or, with ``time_format``, a
  :func:`~datetime.datetime.strptime` format such as ``%m/%d/%Y %H:%M`` (again in ``tz``
  unless the format reads a zone). A number that is the year 5138 or later in its
  ``epoch_unit`` is refused: it counts a smaller unit (``1717400000000`` is milliseconds), and
  the reason names the ``--epoch-unit`` to pass; nothing is rescaled by guess.
- **Relative** (``unit`` set): a number of seconds, minutes, hours or days (``s``, ``m``, ``h``,
  ``d`` and the usual spellings) after ``origin`` (unix seconds; 0 when not given, which keeps
  the times relative: no calendar date).
- **Durations** are numbers in ``duration_unit`` (None: not said; the importer then takes the
  unit the duration field's name states, see :mod:`.names`, or stops).

An unknown unit or time zone is a :class:`~trainguard.errors.HistoryError` that names it; a value
that does not parse raises :class:`TimeValueError`, which the importer turns into a refusal of
that record.

    >>> TimeSpec(unit="days").seconds(1.5)
    129600.0
    >>> TimeSpec().seconds("1970-01-02T00:00:00+01:00")
    82800.0
    >>> TimeSpec(epoch_unit="ms").seconds(1717400000000)
    1717400000.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from trainguard.errors import HistoryError

UNITS: dict[str, float] = {}
"""Unit name or alias -> seconds."""
for _size, _names in ((0.001, ("ms", "msec", "msecs", "millisecond", "milliseconds")),
                      (1.0, ("s", "sec", "secs", "second", "seconds")),
                      (60.0, ("m", "min", "mins", "minute", "minutes")),
                      (3600.0, ("h", "hr", "hrs", "hour", "hours")),
                      (86400.0, ("d", "day", "days"))):
    for _name in _names:
        UNITS[_name] = _size

_UNIT_HINT = "use seconds, minutes, hours or days (or s, m, h, d; ms for milliseconds)"

EPOCH_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
"""What an absolute numeric time may count since the unix epoch (``epoch_unit``) -> seconds."""
EPOCH_LIMIT = 1e11
"""Unix seconds at or beyond this (the year 5138) are not a time of a fault record: such a
number counts a smaller unit (13 digits: milliseconds), which ``epoch_unit`` must say."""


class TimeValueError(ValueError):
    """One record's time or duration does not parse (the message says why, in one line)."""


def unit_seconds(unit: str, option: str = "--time-unit") -> float:
    """Seconds in one ``unit`` (an alias accepted, case ignored); HistoryError naming it if
    unknown."""
    size = UNITS.get(unit.strip().casefold())
    if size is None:
        raise HistoryError(f"unknown time unit {unit!r} ({option}): {_UNIT_HINT}")
    return size


def parse_zone(name: str) -> tzinfo:
    """``UTC``, an offset (``+08:00``, ``-0500``) or an IANA name (``Asia/Shanghai``)."""
    text = name.strip()
    if text.upper() in {"UTC", "Z"}:
        return UTC
    if text[:1] in {"+", "-"}:
        digits = text[1:].replace(":", "")
        if len(digits) == 4 and digits.isdigit() and int(digits[2:]) < 60 \
                and int(digits[:2]) < 24:
            delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
            return timezone(-delta if text[0] == "-" else delta)
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise HistoryError(f"unknown time zone {name!r} (--tz): use UTC, an offset such as "
                           "+08:00 or a zone name such as Europe/Berlin") from exc


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _finite(value: float, raw: object) -> float:
    if not math.isfinite(value):
        raise TimeValueError(f"{_quote(raw)} is not a finite time")
    return value


@dataclass(frozen=True, slots=True)
class TimeSpec:
    """How the history's times read (see the module docstring); checked when made."""

    unit: str | None = None
    origin: float | None = None
    time_format: str | None = None
    duration_unit: str | None = None
    tz: str | None = None
    epoch_unit: str = "s"
    _scale: float = field(init=False, repr=False, compare=False, default=1.0)
    _duration_scale: float | None = field(init=False, repr=False, compare=False, default=None)
    _epoch_scale: float = field(init=False, repr=False, compare=False, default=1.0)
    _zone: tzinfo = field(init=False, repr=False, compare=False, default=UTC)

    def __post_init__(self) -> None:
        if self.unit is not None:
            object.__setattr__(self, "_scale", unit_seconds(self.unit))
            if self.time_format is not None:
                raise HistoryError("--time-format reads absolute times, --time-unit relative "
                                   "ones: pass one or the other")
        if self.duration_unit is not None:
            object.__setattr__(self, "_duration_scale",
                               unit_seconds(self.duration_unit, "--duration-unit"))
        epoch = EPOCH_UNITS.get(self.epoch_unit.strip().casefold())
        if epoch is None:
            raise HistoryError(f"unknown epoch unit {self.epoch_unit!r} (--epoch-unit): use s, "
                               "ms, us or ns")
        if epoch != 1.0 and (self.unit is not None or self.time_format is not None):
            raise HistoryError("--epoch-unit reads absolute numeric times, "
                               + ("--time-unit relative ones" if self.unit is not None
                                  else "--time-format formatted ones") + ": pass one or the other")
        object.__setattr__(self, "_epoch_scale", epoch)
        if self.origin is not None and not math.isfinite(self.origin):
            raise HistoryError(f"origin must be finite unix seconds, got {self.origin}")
        if self.tz is not None:
            object.__setattr__(self, "_zone", parse_zone(self.tz))

    @property
    def relative(self) -> bool:
        return self.unit is not None

    def describe(self) -> str:
        """What a time must look like, for a refusal's reason."""
        if self.unit is not None:
            return f"a number of {self.unit}"
        if self.time_format is not None:
            return f"a time in format {self.time_format!r}"
        return "ISO 8601 or unix seconds" if self._epoch_scale == 1.0 else \
            f"ISO 8601 or unix time in {self.epoch_unit}"

    def seconds(self, value: object) -> float:
        """Unix seconds of one time value; TimeValueError when it does not parse."""
        number = _number(value)
        if self.unit is not None:
            if number is None:
                raise TimeValueError(f"{_quote(value)} is not {self.describe()}")
            return _finite((self.origin or 0.0) + number * self._scale, value)
        if not isinstance(value, str):
            if number is None:
                raise TimeValueError(f"{_quote(value)} is not {self.describe()}")
            return self._epoch(number, value)
        if number is not None and self.time_format is None:
            return self._epoch(number, value)
        text = value.strip()
        try:
            if self.time_format is not None:
                moment = datetime.strptime(text, self.time_format)
            else:
                moment = datetime.fromisoformat(text)
        except ValueError as exc:
            raise TimeValueError(f"{_quote(value)} is not {self.describe()}") from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=self._zone)
        return moment.timestamp()

    def _epoch(self, number: float, raw: object) -> float:
        """Unix seconds of a number of ``epoch_unit`` since the epoch; refused when too large
        for that unit (its reason names the unit the number looks like)."""
        seconds = _finite(number, raw) * self._epoch_scale
        if abs(seconds) < EPOCH_LIMIT:
            return seconds
        smaller = [name for name, scale in EPOCH_UNITS.items()
                   if scale < self._epoch_scale and abs(number * scale) < EPOCH_LIMIT]
        hint = f"pass --epoch-unit {smaller[0]}" if smaller else "not a time"
        unit = "seconds" if self.epoch_unit == "s" else self.epoch_unit
        raise TimeValueError(f"{_quote(raw)} is too large for unix {unit} (the year 5138 or "
                             f"later): {hint}")

    def duration(self, value: object) -> float:
        """Seconds of one duration value; TimeValueError when not a number or negative.
        ``duration_unit`` must be set (ValueError if not)."""
        if self._duration_scale is None:
            raise ValueError("TimeSpec.duration needs a duration_unit")
        number = _number(value)
        if number is None or not math.isfinite(number):
            raise TimeValueError(f"duration {_quote(value)} is not a number of "
                                 f"{self.duration_unit}")
        if number < 0:
            raise TimeValueError(f"negative duration {_quote(value)}")
        return number * self._duration_scale


def parse_origin(text: str, tz: str | None = None) -> float:
    """Unix seconds of an ``--origin`` given as unix seconds or ISO 8601 (naive = ``tz``/UTC)."""
    try:
        return TimeSpec(tz=tz).seconds(text)
    except TimeValueError as exc:
        raise HistoryError(f"--origin {text!r} is not ISO 8601 or unix seconds") from exc


__all__ = ["EPOCH_LIMIT", "EPOCH_UNITS", "UNITS", "TimeSpec", "TimeValueError", "parse_origin",
           "parse_zone", "unit_seconds"]
