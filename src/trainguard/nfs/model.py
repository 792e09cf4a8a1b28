"""What an NFS diagnosis says: the attribution categories, findings with their evidence,
recommendations, and the per-mount result (frozen; `to_dict` is the JSON form)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trainguard.errors import ConfigError
from trainguard.nfs.metrics import OpSummary, TransportSummary
from trainguard.nfs.window import Basis

__all__ = [
    "Attribution",
    "Environment",
    "Evidence",
    "Finding",
    "MountDiagnosis",
    "Recommendation",
]


class Attribution(StrEnum):
    """Where the latency of a mount's data operations goes."""

    CLIENT_QUEUE = "client-queue"
    NETWORK = "network"
    SERVER = "server"
    CLIENT_OTHER = "client-other"
    UNDERUTILIZED = "underutilized"
    HEALTHY = "healthy"
    IDLE = "idle"
    UNDETERMINED = "undetermined"
    """No slot saturation on the transport, but no per-op statistics (a partial capture) to
    attribute the latency with."""

    @property
    def is_problem(self) -> bool:
        return self in (Attribution.CLIENT_QUEUE, Attribution.NETWORK, Attribution.SERVER,
                        Attribution.CLIENT_OTHER)


@dataclass(frozen=True, slots=True)
class Environment:
    """What the counters cannot say: the client's slot limit and the link speed.

        >>> Environment(slot_limit=128, slot_limit_source="--slot-limit").slot_limit
        128
    """

    slot_limit: int | None = None
    """RPC slot table entries per connection (sunrpc.tcp_max_slot_table_entries)."""
    slot_limit_source: str = "unknown"
    """Where `slot_limit` came from, for the report ("--slot-limit", a /proc path, ...)."""
    slot_limit_proto: str | None = None
    """Transport the limit applies to ("tcp" for the tcp sysctl); None = any."""
    link_gbps: float | None = None
    """The client's link speed in Gbit/s, when known."""

    def __post_init__(self) -> None:
        if self.slot_limit is not None and self.slot_limit < 1:
            raise ConfigError("nfs.slot_limit must be >= 1")
        if self.link_gbps is not None and not (math.isfinite(self.link_gbps)
                                               and self.link_gbps > 0):
            raise ConfigError("nfs.link_gbps must be > 0")


Evidence = tuple[tuple[str, float | int | str | None], ...]


@dataclass(frozen=True, slots=True)
class Finding:
    """One attribution with the numbers that led to it."""

    category: Attribution
    mechanism: str
    summary: str
    evidence: Evidence = ()

    def to_dict(self) -> dict[str, Any]:
        return {"category": str(self.category), "mechanism": self.mechanism,
                "summary": self.summary,
                "evidence": {k: (round(v, 4) if isinstance(v, float) else v)
                             for k, v in self.evidence}}


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One concrete change, with the command when there is one."""

    action: str
    command: str | None = None
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "command": self.command, "why": self.why}


@dataclass(frozen=True, slots=True)
class MountDiagnosis:
    """The diagnosis of one NFS mount; `findings[0]` is the attribution."""

    device: str
    mountpoint: str
    nfs_version: str
    proto: str
    nconnect: int
    wsize: int | None
    rsize: int | None
    sec: str | None
    basis: Basis
    duration_s: float | None
    age_s: int | None
    reset: bool
    ops: tuple[OpSummary, ...]
    """Data ops first, then every other op with calls, busiest first."""
    transport: TransportSummary | None
    findings: tuple[Finding, ...]
    recommendations: tuple[Recommendation, ...]
    notes: tuple[str, ...] = ()
    link_util: float | None = None
    """Payload share of --link-gbps over the window (busier direction), when known."""
    concurrency: float | None = None
    """RPCs of the data ops in flight on average (see `_concurrency`)."""
    per_op: bool = True
    """False when the capture had no per-op statistics: `ops` is empty, the verdict comes from
    the transport (``xprt:``) counters alone."""

    @property
    def attribution(self) -> Attribution:
        return self.findings[0].category

    @property
    def mechanism(self) -> str:
        return self.findings[0].mechanism

    @property
    def summary(self) -> str:
        return self.findings[0].summary

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "mountpoint": self.mountpoint,
            "nfs_version": self.nfs_version, "proto": self.proto, "nconnect": self.nconnect,
            "wsize": self.wsize, "rsize": self.rsize, "sec": self.sec,
            "basis": str(self.basis), "duration_s": self.duration_s, "age_s": self.age_s,
            "counters_reset": self.reset, "attribution": str(self.attribution),
            "mechanism": self.mechanism, "summary": self.summary,
            "findings": [f.to_dict() for f in self.findings],
            "recommendations": [{"n": i, **r.to_dict()}
                                for i, r in enumerate(self.recommendations, start=1)],
            "link_util": None if self.link_util is None else round(self.link_util, 4),
            "concurrency": None if self.concurrency is None else round(self.concurrency, 2),
            "per_op_missing": not self.per_op,
            "ops": [o.to_dict() for o in self.ops],
            "transport": None if self.transport is None else self.transport.to_dict(),
            "notes": list(self.notes),
        }


