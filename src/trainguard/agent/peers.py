"""What the hub keeps per node's agent, and what it hands the controller: :class:`Inbound`
messages and a :class:`PeerView` of each agent; and the rule for an agent's sequence numbers.

    >>> sequence_verdict(5, 6), sequence_verdict(5, 5), sequence_verdict(5, 2 ** 62)
    ('new', 'seen', 'refused')
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from trainguard.agent.wire import Channel

SEQ_WINDOW = 1 << 24
"""How far past the last accepted one an agent's sequence number may jump (its outbox may
have dropped messages, never this many)."""


@dataclass(frozen=True, slots=True)
class Inbound:
    """One message from an agent, in arrival order."""

    node: str
    attempt: int
    msg: Mapping[str, Any]
    at: float


@dataclass(frozen=True, slots=True)
class PeerView:
    """What the hub knows of one node's agent."""

    connected: bool
    last_seen: float
    """When anything last arrived from it (or when it was expected, before it connected)."""
    ever_connected: bool
    closed_reason: str | None = None
    connection: int = 0
    """How many times it connected (a new number after each reconnect)."""


class Peer:
    """One expected node's agent, as the hub's loop tracks it (under the hub's lock)."""

    def __init__(self, node: str, attempt: int, since: float) -> None:
        self.node = node
        self.attempt = attempt
        self.seq = 0
        self.last_seen = since
        self.writer: asyncio.StreamWriter | None = None
        self.channel: Channel | None = None
        self.instance: bytes | None = None
        """The agent process that owns this node's session (see :mod:`~trainguard.agent.hub`)."""
        self.ever = False
        self.closed_reason: str | None = None
        self.connections = 0
        self.held = 0
        """Its readers (the current connection's, a replaced one's) waiting for room in the
        hub's inbox (backpressure): not silent, held."""


def sequence_verdict(last: int, seq: object) -> Literal["new", "seen", "refused"]:
    """A message numbered ``seq`` after ``last`` was accepted: ``new`` (take it, the new
    high-water mark), ``seen`` (a resend after a reconnect: drop it quietly) or ``refused``
    (not a positive integer, or beyond :data:`SEQ_WINDOW`: drop it and say so; it never becomes
    the high-water mark, so a forged huge number cannot silence the agent)."""
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= 0 or seq > last + SEQ_WINDOW:
        return "refused"
    return "seen" if seq <= last else "new"


__all__ = ["SEQ_WINDOW", "Inbound", "Peer", "PeerView", "sequence_verdict"]
