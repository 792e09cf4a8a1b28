"""Byte sizes as people write them (``8GiB``, ``2GB``, ``512MiB``, ``100M``) and as reports print
them; one implementation for every command and config that takes a size.

    >>> parse_size("8GiB"), format_size(parse_size("512MiB"))
    (8589934592, '512.0 MiB')
"""

from __future__ import annotations

import re
from fractions import Fraction

from trainguard.errors import ConfigError

__all__ = ["format_size", "parse_size"]

_SIZE_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)", re.IGNORECASE)
_UNITS = {"": 1, "b": 1}
for _i, _letter in enumerate("kmgtpe", start=1):
    _UNITS[_letter] = _UNITS[_letter + "i"] = _UNITS[_letter + "ib"] = 1024**_i
    _UNITS[_letter + "b"] = 1000**_i


def parse_size(text: str) -> int:
    """Bytes in a size such as ``8GiB``, ``2GB``, ``512MiB``, ``100M``, ``1.5GiB`` or ``4096``.

    ``KiB MiB GiB TiB PiB`` (also ``Ki``..., and bare ``K M G T P`` as ``dd`` reads them) are
    powers of 1024; ``KB MB GB TB PB`` powers of 1000; case does not matter. `ConfigError` for
    anything else, and for a fractional number of bytes.

    >>> parse_size("8GiB"), parse_size("2GB"), parse_size("100M"), parse_size("1.5 KiB")
    (8589934592, 2000000000, 104857600, 1536)
    """
    match = _SIZE_RE.fullmatch(text.strip())
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ConfigError(f"bad size {text!r}: use e.g. 8GiB, 2GB, 512MiB, 100M or a number of "
                          "bytes")
    value = Fraction(match.group(1)) * unit
    if value.denominator != 1:
        raise ConfigError(f"bad size {text!r}: not a whole number of bytes")
    return int(value)


def format_size(nbytes: float) -> str:
    """``2.00 GiB``, ``512.0 MiB``, ``4.0 KiB``, ``100 B``."""
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(nbytes) >= 1 << shift:
            value = nbytes / (1 << shift)
            return f"{value:.2f} {unit}" if unit in ("GiB", "TiB", "PiB") else f"{value:.1f} {unit}"
    return f"{nbytes:.0f} B"
