"""NFS client diagnosis from ``/proc/self/mountstats``: parse, difference two samples, and
attribute RPC latency to client queueing (RPC/session slots, the socket), the network, the
server, or the client after the reply, with concrete fixes.

    >>> before = parse_mountstats(text_a)                       # doctest: +SKIP
    >>> after = parse_mountstats(text_b)                        # doctest: +SKIP
    >>> for w in diff(before, after, interval_s=5.0).windows:   # doctest: +SKIP
    ...     print(diagnose(w).attribution)
"""

from __future__ import annotations

from trainguard.nfs.diagnose import Thresholds, diagnose
from trainguard.nfs.metrics import (
    DATA_OPS,
    LIGHT_OPS,
    ConnSummary,
    OpSummary,
    TransportSummary,
    summarize_op,
    summarize_transport,
)
from trainguard.nfs.model import (
    Attribution,
    Environment,
    Finding,
    MountDiagnosis,
    Recommendation,
)
from trainguard.nfs.mountstats import (
    EVENT_DELAY,
    KNOWN_NFS_VERSIONS,
    MountstatsSnapshot,
    NfsMount,
    OpStats,
    Xprt,
    parse_mountstats,
)
from trainguard.nfs.paths import escape_path, unescape_path
from trainguard.nfs.recommend import MAX_NCONNECT, recommend
from trainguard.nfs.window import (
    Basis,
    MountWindow,
    TransportGroup,
    WindowSet,
    cumulative,
    diff,
    shared_transports,
    transport_groups,
)

__all__ = [
    "DATA_OPS",
    "EVENT_DELAY",
    "KNOWN_NFS_VERSIONS",
    "LIGHT_OPS",
    "MAX_NCONNECT",
    "Attribution",
    "Basis",
    "ConnSummary",
    "Environment",
    "Finding",
    "MountDiagnosis",
    "MountWindow",
    "MountstatsSnapshot",
    "NfsMount",
    "OpStats",
    "OpSummary",
    "Recommendation",
    "Thresholds",
    "TransportGroup",
    "TransportSummary",
    "WindowSet",
    "Xprt",
    "cumulative",
    "diagnose",
    "diff",
    "escape_path",
    "parse_mountstats",
    "recommend",
    "shared_transports",
    "summarize_op",
    "summarize_transport",
    "transport_groups",
    "unescape_path",
]
