"""Option value types every command shares: durations and years.

One convention for the whole command line: a duration option takes a plain number of seconds
(``90``, ``0.5``) or a number with a unit (``500ms``, ``30s``, ``5m``, ``6h``, ``1d``, also
``1m30s``), read by :func:`trainguard.timeparse.parse_duration`; its help shows ``DURATION``
and its default with a unit. A ``--year`` takes the same range everywhere.

    timeout: Annotated[float, duration_option("--timeout", min=1.0, help="...")] = 30.0
"""

from __future__ import annotations

import math
from typing import Any

import typer

from trainguard.errors import ConfigError
from trainguard.timeparse import (
    YEAR_MAX,
    YEAR_MIN,
    check_year,
    compact_duration,
    parse_duration,
)

__all__ = ["DURATION", "YEAR", "Duration", "duration_option", "parse_year",
           "show_duration_defaults", "year_option"]

DURATION = "DURATION"
"""The metavar of every duration option."""
YEAR = "YYYY"
_UNITS = "seconds, or with a unit: 500ms, 30s, 5m, 6h, 1d"


class Duration:
    """A typer ``parser``: seconds (a float; an int with ``whole``) from a duration, at least
    ``min_s`` and at most ``max_s``. A bad value is a ``ValueError`` naming the value, which
    typer reports as a usage error of the option (exit 2).

        >>> Duration(min_s=1)("5m"), Duration()("90"), Duration(whole=True)("2m")
        (300.0, 90.0, 120)
    """

    def __init__(self, min_s: float | None = None, max_s: float | None = None, *,
                 whole: bool = False) -> None:
        self.min_s, self.max_s, self.whole = min_s, max_s, whole

    def __call__(self, value: object) -> float | int:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"{value!r} is not a duration ({_UNITS})")
        try:
            seconds = float(value)  # a default, or a plain number (also 1e-3, as before)
        except ValueError:
            try:
                seconds = parse_duration(str(value), "")
            except ConfigError:
                raise ValueError(f"{value!r} is not a duration ({_UNITS})") from None
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"{value!r} is not a duration ({_UNITS})")
        if self.min_s is not None and seconds < self.min_s:
            raise ValueError(f"{value!r} is shorter than {compact_duration(self.min_s)}")
        if self.max_s is not None and seconds > self.max_s:
            raise ValueError(f"{value!r} is longer than {compact_duration(self.max_s)}")
        if self.whole:
            if seconds != int(seconds):
                raise ValueError(f"{value!r} is not a whole number of seconds")
            return int(seconds)
        return seconds


def parse_year(value: object) -> int:
    """A typer ``parser`` for ``--year``: a year within ``timeparse.YEAR_MIN``..``YEAR_MAX``
    (the range :func:`~trainguard.timeparse.check_year` enforces for library callers too)."""
    try:
        return check_year(int(str(value).strip()), "--year")
    except (ValueError, ConfigError):
        raise ValueError(f"{value!r} is not a year from {YEAR_MIN} to {YEAR_MAX}") from None


def duration_option(*param_decls: str, min: float | None = None, max: float | None = None,
                    whole: bool = False, **kwargs: Any) -> Any:
    """``typer.Option`` for a duration, in seconds (``whole``: an int); ``min`` and ``max`` in
    seconds as for a number option. The other arguments are ``typer.Option``'s."""
    return typer.Option(*param_decls, parser=Duration(min, max, whole=whole), metavar=DURATION,
                        **kwargs)


def year_option(*param_decls: str, **kwargs: Any) -> Any:
    """``typer.Option`` for ``--year``: the same name, metavar and range for every command."""
    return typer.Option(*(param_decls or ("--year",)), parser=parse_year, metavar=YEAR,
                        **kwargs)


def show_duration_defaults(command: Any) -> None:
    """Defaults of `command`'s duration options (recursively) as help shows them: ``5m``, not
    ``300.0``. The option reads the spelling back through its parser, so the value is the same.

    Typer keeps an option's ``parser`` on its ``type_descriptor.parameter_info``; an option
    without one is left as it is."""
    for param in command.params:
        info = getattr(getattr(param, "type_descriptor", None), "parameter_info", None)
        default = param.default
        if (isinstance(getattr(info, "parser", None), Duration)
                and isinstance(default, int | float) and not isinstance(default, bool)):
            param.default = compact_duration(float(default))
    for sub in getattr(command, "commands", {}).values():
        show_duration_defaults(sub)

