"""Host clocks: ages on a host are judged on that host's own clock, and each host's offset from
the controller's clock is measured and recorded.

- **The run's start, on the host.** The controller's launch message says how long ago the run
  started (``elapsed_s``: a duration on the controller's clock, so free of any offset between
  the clocks). The agent places the start on its own clock (:func:`run_start_on_host`); the
  kernel-log history window ("lines of the 10 minutes before the run started") is then compared
  with the host's own timestamps. A controller an hour behind a host no longer makes a
  40-minute-old XID of that host look recent.
- **The offset.** The controller asks each agent for its wall-clock time (a ``clock`` message
  with the controller's send time ``t0``; the agent answers with ``t0`` and ``host``, its own
  time) and keeps, per host, the sample with the smallest round trip, as NTP does:
  ``offset = host - (t0 + t3) / 2`` within ``± rtt / 2``, where ``t3`` is when the answer
  arrived. :class:`ClockOffsets` is that bookkeeping (pure: the times are passed in); the
  offsets go into each attempt's record in ``summary.json`` (``host_clocks``).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

PROBE_BURST = 5
"""Samples taken right after an agent connects, :data:`PROBE_BURST_GAP_S` apart."""
PROBE_BURST_GAP_S = 1.0
PROBE_EVERY_S = 30.0
"""Then one sample this often (a clock that steps or drifts shows up)."""
WARN_OFFSET_S = 1.0
"""An offset beyond this, net of its uncertainty, is logged once per host (a sample with a long
round trip, e.g. from a controller that stalled, proves no offset)."""
_OUTSTANDING = 8


def finite_reading(value: object) -> float | None:
    """A clock reading from a message: a finite number (not a bool) as a float, else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) \
            and math.isfinite(value):
        return float(value)
    return None


def run_start_on_host(msg: Mapping[str, Any], host_now: float) -> float:
    """When the run started, on this host's clock (pure): ``host_now - elapsed_s`` from the
    launch message; a controller that sends no ``elapsed_s`` gives its own ``since``.

    >>> run_start_on_host({"elapsed_s": 30.0, "since": 1.0}, 5000.0)
    4970.0
    >>> run_start_on_host({"since": 1000.0}, 5000.0)
    1000.0
    """
    elapsed = finite_reading(msg.get("elapsed_s"))
    if elapsed is not None and elapsed >= 0:
        return host_now - elapsed
    since = finite_reading(msg.get("since"))
    return since if since is not None else host_now


def clock_reply(msg: Mapping[str, Any], host_now: float) -> dict[str, Any] | None:
    """The agent's answer to a ``clock`` request (None for a malformed one; pure)."""
    t0 = finite_reading(msg.get("t0"))
    return None if t0 is None else {"t": "clock", "t0": t0, "host": host_now}


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """One host's clock against the controller's: its best (smallest round trip) sample."""

    offset_s: float
    """Host clock minus controller clock."""
    rtt_s: float
    """The round trip of that sample: the offset is known within ``± rtt_s / 2``."""
    samples: int
    """Answers received in all."""

    def to_dict(self) -> dict[str, float | int]:
        return {"offset_s": round(self.offset_s, 6), "uncertainty_s": round(self.rtt_s / 2, 6),
                "samples": self.samples}


def clearly_off(sample: ClockOffset) -> bool:
    """Whether the host's clock is off by more than :data:`WARN_OFFSET_S` whatever the sample's
    uncertainty (pure).

    >>> clearly_off(ClockOffset(-3.9, 8.0, 1))  # within +- 4 s: maybe not off at all
    False
    >>> clearly_off(ClockOffset(-3.9, 0.002, 1))
    True
    """
    return abs(sample.offset_s) - sample.rtt_s / 2 > WARN_OFFSET_S


class ClockOffsets:
    """When to ask each host for its time, and the best answer so far (see the module
    docstring). Not thread-safe: the controller's poll loop owns it."""

    def __init__(self) -> None:
        self._best: dict[str, ClockOffset] = {}
        self._asked: dict[str, deque[float]] = {}
        self._count: dict[str, int] = {}
        self._next: dict[str, float] = {}
        self._probes: dict[str, int] = {}
        self._warned: set[str] = set()

    def due(self, node: str, now: float) -> bool:
        """Whether to send ``node`` a ``clock`` request now (then call :meth:`sent`)."""
        return now >= self._next.get(node, -math.inf)

    def sent(self, node: str, t0: float) -> None:
        self._asked.setdefault(node, deque(maxlen=_OUTSTANDING)).append(t0)
        probes = self._probes[node] = self._probes.get(node, 0) + 1
        self._next[node] = t0 + (PROBE_BURST_GAP_S if probes < PROBE_BURST else PROBE_EVERY_S)

    def reply(self, node: str, t0: object, host: object, t3: float) -> ClockOffset | None:
        """Take an answer (``t0`` as sent, the host's time, arrival time ``t3``); the node's
        best sample now, or None when the answer is not one of ours or malformed."""
        sent, at = finite_reading(t0), finite_reading(host)
        asked = self._asked.get(node)
        if sent is None or at is None or not asked or sent not in asked or t3 < sent:
            return None
        asked.remove(sent)
        rtt = t3 - sent
        count = self._count.get(node, 0) + 1
        self._count[node] = count
        best = self._best.get(node)
        if best is None or rtt < best.rtt_s:
            best = ClockOffset(at - (sent + t3) / 2, rtt, count)
            if node not in self._warned and clearly_off(best):
                self._warned.add(node)
                log.warning("%s's clock is %+.3f s off the controller's (± %.3f s); its "
                            "kernel-log ages are judged on its own clock", node,
                            best.offset_s, rtt / 2)
        else:
            best = ClockOffset(best.offset_s, best.rtt_s, count)
        self._best[node] = best
        return best

    def offsets(self) -> dict[str, ClockOffset]:
        return dict(self._best)


__all__ = ["PROBE_EVERY_S", "ClockOffset", "ClockOffsets", "clearly_off", "clock_reply",
           "finite_reading", "run_start_on_host"]
