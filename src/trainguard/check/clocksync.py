"""A host's clock offset from the controller's, from several request/reply samples, and the
verdict on it.

Each sample (:class:`ClockSample`) has four readings: the controller sent the request at
``t_send`` and had the reply at ``t_recv`` (its clock); the host had the request at
``t_host_recv`` and replied at ``t_host_send`` (its clock). Whatever the network and the
scheduling did, the one-way delays are not negative, so the offset (host minus controller) lies
in ``[t_host_send - t_recv, t_host_recv - t_send]``. Every sample bounds it so; the estimate is
the middle of the intersection of all the samples' intervals, its uncertainty half the width.
Where the intervals do not meet (a clock stepped between samples), the sample with the smallest
round trip is used as NTP does: ``offset = ((t_host_recv - t_send) + (t_host_send - t_recv))/2``,
``uncertainty = delay / 2``.

The controller collects replies by polling (every 20 ms), so a reply waits for the next poll:
the samples ask the host to hold its reply for different short times (:data:`HOLDS_S`), so
that one of them lands just before a poll and tightens the lower bound. One request/reply was
100-1,200 ms uncertain (the first request also imports the probes); several samples bring it
to a few milliseconds.

    >>> s = ClockSample(t_send=100.0, t_recv=100.020, t_host_recv=105.001, t_host_send=105.002)
    >>> e = estimate([s])
    >>> round(e.offset_s, 4), round(e.uncertainty_s, 4)
    (4.9915, 0.0095)

The verdict (:func:`offset_finding`): FAIL when the offset is beyond the limit by more than
its uncertainty, SKIPPED ("unknown") when the uncertainty alone exceeds the limit, FAIL when
there is no finite offset at all; PASS otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.agent.clock import finite_reading
from trainguard.check.model import Finding, Level

SAMPLES = 8
"""Clock requests per host in one check."""
HOLDS_S = (0.0, 0.0, 0.004, 0.008, 0.012, 0.016, 0.018, 0.019)
"""How long the host holds its reply in each sample (seconds)."""


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One request/reply: the controller's send and receive times, the host's receive and
    send times (each on its own clock)."""

    t_send: float
    t_recv: float
    t_host_recv: float
    t_host_send: float

    def valid(self) -> bool:
        """Finite readings, in order on each side."""
        return all(math.isfinite(v) for v in (self.t_send, self.t_recv, self.t_host_recv,
                                              self.t_host_send)) \
            and self.t_recv >= self.t_send and self.t_host_send >= self.t_host_recv

    @property
    def bounds(self) -> tuple[float, float]:
        """The offset's (lowest, highest) possible value given this sample."""
        return self.t_host_send - self.t_recv, self.t_host_recv - self.t_send

    @property
    def delay(self) -> float:
        """The round trip less the host's own time on it."""
        return max(0.0, (self.t_recv - self.t_send) - (self.t_host_send - self.t_host_recv))


@dataclass(frozen=True, slots=True)
class ClockEstimate:
    """A host's clock offset (host minus controller) and how sure it is, in seconds."""

    offset_s: float
    uncertainty_s: float
    samples: int


def estimate(samples: Sequence[ClockSample]) -> ClockEstimate | None:
    """The offset from the valid ``samples`` (see the module docstring); None when none is
    valid."""
    good = [s for s in samples if s.valid()]
    if not good:
        return None
    lo = max(s.bounds[0] for s in good)
    hi = min(s.bounds[1] for s in good)
    if lo <= hi:
        return ClockEstimate((lo + hi) / 2.0, (hi - lo) / 2.0, len(good))
    best = min(good, key=lambda s: s.delay)
    offset = ((best.t_host_recv - best.t_send) + (best.t_host_send - best.t_recv)) / 2.0
    return ClockEstimate(offset, best.delay / 2.0, len(good))


reading = finite_reading
"""A host's clock reading from its reply: a finite number, else None."""


def offset_finding(host: str, offset_s: float, uncertainty_s: float,
                   limit_s: float) -> Finding:
    """PASS; FAIL when the clock is off by more than ``limit_s`` beyond the uncertainty, or
    the offset is not a finite number; SKIPPED (unknown) when the uncertainty alone is more
    than ``limit_s``."""
    def finding(level: Level, reason: str, value: float | None) -> Finding:
        return Finding(host, "host", level, "clock", reason, "clock_offset_ms", value,
                       limit_s * 1000)

    if not (math.isfinite(offset_s) and math.isfinite(uncertainty_s)):
        return finding(Level.FAIL, f"clock offset not measured ({offset_s} +- "
                       f"{uncertainty_s} s; limit {limit_s * 1000:.0f} ms)", None)
    text = (f"clock offset {offset_s * 1000:+.1f} ms (+-{uncertainty_s * 1000:.1f} ms; "
            f"limit {limit_s * 1000:.0f} ms)")
    if abs(offset_s) - uncertainty_s > limit_s:
        return finding(Level.FAIL, text, offset_s * 1000)
    if uncertainty_s > limit_s:
        return finding(Level.SKIPPED, f"{text}: unknown (the uncertainty is more than the "
                       "limit)", offset_s * 1000)
    return finding(Level.PASS, text, offset_s * 1000)


def unmeasured_finding(host: str, limit_s: float) -> Finding:
    """FAIL: the host answered, but with no usable clock reading."""
    return Finding(host, "host", Level.FAIL, "clock",
                   "clock offset not measured: no finite clock reading in its replies",
                   "clock_offset_ms", None, limit_s * 1000)


__all__ = ["HOLDS_S", "SAMPLES", "ClockEstimate", "ClockSample", "estimate", "offset_finding",
           "reading", "unmeasured_finding"]
