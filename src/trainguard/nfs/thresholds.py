"""The thresholds of the NFS attribution rules (how they combine: `trainguard.nfs.diagnose`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from trainguard.errors import ConfigError

__all__ = ["Thresholds"]


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The attribution thresholds (see the module docstring for how they combine).

        >>> Thresholds(queue_share=0.6).queue_share
        0.6
    """

    min_data_ops: int = 20
    """Fewer data operations (WRITE/READ/COMMIT) than this in the window: too little to judge."""
    min_light_ops: int = 10
    """Metadata calls needed for a metadata RTT baseline."""
    queue_min_ms: float = 1.0
    """Average queue time below this never counts as client queueing."""
    queue_share: float = 0.5
    """Queue / execute share at or above which client queueing dominates an op's latency."""
    queue_over_rtt: float = 2.0
    """Queue >= this x RTT is client queueing even without transport evidence."""
    backlog_min: float = 0.1
    """Average requests waiting for an RPC slot per send at or above which slots ran out."""
    sending_min: float = 1.0
    """Average requests waiting to transmit per send at or above which the socket is the wait."""
    delay_share: float = 0.5
    """Share of queue time explained by server "try later" retries for a server attribution."""
    light_rtt_high_ms: float = 5.0
    """Metadata RTT at or above this: the round trip itself is slow (network path)."""
    server_rtt_share: float = 0.5
    """RTT / execute share at or above which the round trip dominates an op's latency."""
    server_rtt_min_ms: float = 10.0
    """Data-op RTT below this is not called slow."""
    server_rtt_ratio: float = 4.0
    """Data-op RTT must be at least this x the metadata RTT to blame the server."""
    retrans_fraction: float = 0.01
    """Retransmitted RPCs / RPCs at or above which the network (or server) drops requests."""
    retrans_min: int = 3
    """... and at least this many retransmissions."""
    timeout_fraction: float = 0.001
    """Major timeouts / RPCs at or above which requests time out."""
    other_share: float = 0.5
    """(execute - queue - RTT) / execute share at or above which the client after the reply
    dominates."""
    other_min_ms: float = 1.0
    """... and at least this many ms per op."""
    inflight_low: float = 4.0
    """Fewer RPCs in flight than this: the workload does not push concurrency."""
    link_saturated: float = 0.8
    """Payload at or above this share of --link-gbps: the link is the limit."""
    link_low: float = 0.5
    """Under this share of --link-gbps (with few RPCs in flight) the mount is underutilized."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"nfs.thresholds.{f.name} must be a finite number >= 0 "
                                  f"(got {value})")
        for name in ("queue_share", "delay_share", "server_rtt_share", "retrans_fraction",
                     "timeout_fraction", "other_share", "link_saturated", "link_low"):
            if getattr(self, name) > 1:
                raise ConfigError(f"nfs.thresholds.{name} must be between 0 and 1")
