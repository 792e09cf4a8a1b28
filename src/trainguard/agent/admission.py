"""Who may hold a connection to the hub before authenticating, and how a flood is logged.

A stranger costs the controller a file descriptor from its ``accept`` until the handshake
fails (at most :data:`~trainguard.agent.wire.HANDSHAKE_TIMEOUT_S`). Without a bound, a few
hundred idle connections exhaust the descriptors the run needs for its own records and rank
output. :class:`PreAuthGate` caps connections that have not authenticated yet, in all and per
peer address; one over the cap is closed at once. One remote address gets a quarter of the total
at most (each real host runs one agent, so one address has a handshake or two in flight), so a
single attacking address cannot take every place; loopback, where all the virtual nodes of one
machine dial from, gets up to the total. :class:`RateLog` turns a flood into one log
line per interval and key instead of one per connection.

    >>> gate = PreAuthGate(total=2, per_address=1)
    >>> gate.admit("10.0.0.1"), gate.admit("10.0.0.1"), gate.admit("10.0.0.2")
    (True, False, True)
    >>> gate.release("10.0.0.1"); gate.admit("10.0.0.1")
    True
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class PreAuthGate:
    """Counts connections that have not authenticated yet (not thread-safe: the hub's loop
    is its only user)."""

    total: int = 128
    """At most this many at once, from everyone."""
    per_address: int = 32
    """At most this many at once from one remote peer address."""
    per_loopback: int | None = None
    """At most this many at once from one loopback address (virtual nodes of this machine all
    come from there); None: ``per_address``."""
    _open: dict[str, int] = field(default_factory=dict)
    _count: int = 0

    def admit(self, address: str) -> bool:
        """Take a place for a new connection from ``address``; False when it must be refused."""
        if self._count >= self.total or self._open.get(address, 0) >= self.cap(address):
            return False
        self._open[address] = self._open.get(address, 0) + 1
        self._count += 1
        return True

    def release(self, address: str) -> None:
        """The connection authenticated or ended: its place is free."""
        left = self._open.get(address, 0) - 1
        if left < 0:
            return
        self._count -= 1
        if left:
            self._open[address] = left
        else:
            del self._open[address]

    def cap(self, address: str) -> int:
        """How many at once ``address`` may hold."""
        if self.per_loopback is not None and _loopback(address):
            return self.per_loopback
        return self.per_address

    @property
    def waiting(self) -> int:
        return self._count


def gate_for(fd_limit: int, agents: int = 0) -> PreAuthGate:
    """A gate that leaves most of ``fd_limit`` descriptors to the run itself, and lets
    ``agents`` agents (on loopback all from one address: virtual nodes of this machine)
    authenticate at once, twice over; one remote address gets at most a quarter of the total.

    >>> g = gate_for(1 << 20, agents=100); (g.total, g.per_address, g.per_loopback)
    (256, 64, 200)
    """
    total = max(8, min(256, fd_limit // 8), min(2 * agents, fd_limit // 4))
    return PreAuthGate(total=total, per_address=max(4, total // 4),
                       per_loopback=max(4, min(32, total // 2), min(2 * agents, total)))


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # not an IP address (a Unix socket, "?"): treat as remote
        return False


class RateLog:
    """At most one log line per ``key`` and ``interval_s``; the lines left out are counted and
    reported with the next one."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self._log = logger
        self.interval_s = interval_s
        self._clock = clock or time.monotonic
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def warning(self, key: str, message: str, *args: object) -> bool:
        """Log ``message`` unless ``key`` was logged within the interval; True when logged."""
        now = self._clock()
        if len(self._last) > 4096:  # keys from a flood of addresses: forget, stay bounded
            self._last.clear()
            self._quiet.clear()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._quiet[key] = self._quiet.get(key, 0) + 1
            return False
        self._last[key] = now
        quiet = self._quiet.pop(key, 0)
        suffix = f" (and {quiet} more like it in the last {now - last:.0f} s)" \
            if quiet and last is not None else ""
        self._log.warning(message + suffix, *args)
        return True


__all__ = ["PreAuthGate", "RateLog", "gate_for"]
