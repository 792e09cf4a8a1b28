"""Documented bounds on telemetry input, so hostile or broken files fail fast with one clear line.

Reading is streamed, but a few things would still cost time or memory without bound; each has a
limit here, checked where the input enters:

- sample timestamps must be finite unix seconds in [2000-01-01, 2100-01-01); other samples are
  dropped and counted by reason (milliseconds mistaken for seconds are named as such);
- an OpenMetrics line is at most `MAX_LINE_BYTES` and a label value at most
  `MAX_LABEL_VALUE_CHARS` (longer lines are skipped as malformed, never held in memory whole);
- a gzip file may decompress to at most `MAX_GZIP_RATIO` times its size (a floor of
  `GZIP_RATIO_FLOOR_BYTES` first): more is a decompression bomb, not a metrics dump;
- dense matrices (series x time steps, and the detector's node x node peer comparison) are
  estimated before they are allocated and refused above `DEFAULT_MAX_MEMORY_BYTES`
  (`trainguard detect --max-memory` raises it).

    >>> check_memory(1 << 20, 8 << 30, "telemetry matrices", "")  # fits: returns None
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from trainguard.errors import TelemetryError
from trainguard.telemetry.frame import FloatArray

__all__ = [
    "DEFAULT_MAX_MEMORY_BYTES",
    "EPOCH_MAX_S",
    "EPOCH_MIN_S",
    "GZIP_RATIO_FLOOR_BYTES",
    "MAX_GZIP_RATIO",
    "MAX_LABEL_VALUE_CHARS",
    "MAX_LINE_BYTES",
    "MemoryLimitError",
    "check_memory",
    "format_bytes",
    "time_rejections",
]

EPOCH_MIN_S = 946_684_800.0
"""2000-01-01T00:00Z: earliest sample time accepted (unix seconds)."""
EPOCH_MAX_S = 4_102_444_800.0
"""2100-01-01T00:00Z: samples at or after this are rejected."""

MAX_LINE_BYTES = 64 << 10
"""Longest OpenMetrics line read; a real exporter line is a few hundred bytes."""
MAX_LABEL_VALUE_CHARS = 4096
"""Longest label value accepted (a Kubernetes annotation is far below this)."""

MAX_GZIP_RATIO = 250
"""Most a gzip file may expand (metrics text compresses 10-40x; gzip's own maximum is ~1000x)."""
GZIP_RATIO_FLOOR_BYTES = 64 << 20
"""A gzip file may always decompress to this much, whatever its ratio."""

DEFAULT_MAX_MEMORY_BYTES = 8 << 30
"""Default bound on the dense matrices `trainguard detect` builds (`--max-memory` to change)."""


class MemoryLimitError(TelemetryError):
    """A dense matrix would exceed the memory limit; the message says what to do instead."""


def format_bytes(n: float) -> str:
    """`1.5 GiB`, `12.0 MiB`, `300 B`."""
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n:.0f} B"


def check_memory(need_bytes: float, limit_bytes: int | None, what: str, advice: str) -> None:
    """Raise `MemoryLimitError` when `need_bytes` exceeds `limit_bytes` (None: no limit)."""
    if limit_bytes is None or need_bytes <= limit_bytes:
        return
    raise MemoryLimitError(
        f"{what} would need about {format_bytes(need_bytes)}, more than the "
        f"{format_bytes(limit_bytes)} limit; {advice}raise the limit with --max-memory")


def time_rejections(bad: FloatArray, lo: float, hi: float) -> dict[str, np.ndarray]:
    """Masks over rejected timestamps `bad` (outside [lo, hi) or not finite), keyed by the
    reason reported to the user; only reasons that occur."""
    finite = np.isfinite(bad)
    out = {"with a timestamp that is not a finite number": ~finite}
    rest = finite.copy()
    for unit, div in (("milliseconds", 1e3), ("microseconds", 1e6), ("nanoseconds", 1e9)):
        with np.errstate(invalid="ignore"):
            hit = rest & (bad / div >= lo) & (bad / div < hi)
        out[f"with timestamps that look like {unit}, not seconds"] = hit
        rest &= ~hit
    out[f"with a timestamp outside {_year(lo)}..{_year(hi)}"] = rest
    return {k: v for k, v in out.items() if v.any()}


def _year(t: float) -> str:
    try:
        return str(datetime.fromtimestamp(t, UTC).year)
    except (OverflowError, OSError, ValueError):
        return "any"
