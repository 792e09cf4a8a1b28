"""What one `trainguard watch` round did, and the one line that tells a person.

The service logs one line per round (a warning when something went wrong, else at INFO for
``--verbose``), never one per query, series or error: a Prometheus that stays unusable for an
hour is 120 lines at the default interval, not thousands. Times are ISO 8601 (UTC), in detector
time (the simulated clock in a replay), and while the detector still learns its baselines the
line says how far it is (``warm-up: 3/15 blocks``).

    >>> r = RoundReport(fetched_to=1731888240, samples=96, changes=(), events=0, errors=(),
    ...                 fetched_from=1731888000, warmup=(3, 15))
    >>> r.line()
    'scored 2024-11-18T00:00:00Z to 2024-11-18T00:04:00Z (96 samples); warm-up: 3/15 blocks'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from trainguard.watch.alerts import Change

__all__ = ["RoundReport", "iso", "warmup_blocks"]


def iso(t: float) -> str:
    """Unix seconds as ISO 8601 UTC, to the second (to the millisecond when not whole).

        >>> iso(1731888000), iso(1731888000.25)
        ('2024-11-18T00:00:00Z', '2024-11-18T00:00:00.250Z')
    """
    if not math.isfinite(t):
        return str(t)
    when = datetime.fromtimestamp(t, UTC)
    spec = "seconds" if float(t).is_integer() else "milliseconds"
    return when.isoformat(timespec=spec).replace("+00:00", "Z")


def warmup_blocks(first_t: float | None, scored_until: float | None, *, step_s: int,
                  block_s: int, warmup_s: float) -> tuple[int, int] | None:
    """The detector's warm-up as (scoring blocks seen, blocks it needs); None once it is over.

    `first_t` is the first sample time, `scored_until` the end of what was scored (exclusive).
    Blocks are whole detector blocks (``block_s`` rounded to the step), counted from the block
    holding `first_t`, as the detector cuts them.

        >>> warmup_blocks(0, 360, step_s=30, block_s=120, warmup_s=1800)
        (3, 15)
        >>> warmup_blocks(0, 1800, step_s=30, block_s=120, warmup_s=1800) is None
        True
    """
    period = max(1, round(block_s / step_s)) * step_s
    need = max(1, math.ceil(warmup_s / period))
    if first_t is None or scored_until is None:
        return (0, need)
    seen = max(0, int((scored_until - first_t // period * period) // period))
    return None if seen >= need else (seen, need)


@dataclass(frozen=True, slots=True)
class RoundReport:
    """What one round did."""

    fetched_to: int | None
    """Detector time scored up to (None: nothing new)."""
    samples: int
    changes: tuple[Change, ...]
    events: int
    """Kernel-log events stored."""
    errors: tuple[str, ...]
    """What went wrong, one line each (``stage: problem``); not logged by the round itself."""
    fetched_from: int | None = None
    """First detector time fetched this round (None: nothing new)."""
    warmup: tuple[int, int] | None = None
    """The detector's warm-up after the round: (blocks seen, blocks needed); None when over."""
    prometheus_problem: str | None = None
    """Why Prometheus cannot be used at all, when a query failed so (no connection, or an
    answer that is not the Prometheus API's: a wrong ``--prometheus``); ``watch --once`` exits
    2 with this line."""

    @property
    def failed(self) -> bool:
        """Something in the round went wrong (a query, scoring, the store, Alertmanager, the
        state): ``watch --once`` exits 1."""
        return bool(self.errors)

    def line(self) -> str:
        """The round in one line: the span scored (ISO), the warm-up progress, the problems."""
        if self.fetched_to is not None and self.fetched_from is not None:
            parts = [f"scored {iso(self.fetched_from)} to {iso(self.fetched_to)} "
                     f"({_count(self.samples, 'sample')})"]
        else:
            parts = ["nothing new to score"]
        if self.warmup is not None:
            parts.append(f"warm-up: {self.warmup[0]}/{self.warmup[1]} blocks")
        if self.changes:
            parts.append(_count(len(self.changes), "alert change"))
        if self.events:
            parts.append(_count(self.events, "kernel-log event"))
        if self.errors:
            parts.append(f"{_count(len(self.errors), 'problem')}: {'; '.join(self.errors)}")
        return "; ".join(parts)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")
