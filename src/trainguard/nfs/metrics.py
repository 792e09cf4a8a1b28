"""Per-op and per-transport averages of a `MountWindow`: the numbers a diagnosis cites.

Formulas (per op, over the window):

* avg queue / RTT / execute = summed milliseconds / ops; queue share = queue / execute;
* other = execute - queue - RTT (time after the reply: decode, page-cache work, scheduling);
* MB/s = payload bytes / window (WRITE: bytes sent, READ: bytes received, others both);
* retransmissions = transmissions - ops.

Per transport connection, from the sums the kernel adds at every send: requests outstanding =
req_u / sends, waiting for an RPC slot (backlog) = bklog_u / sends, waiting to transmit =
sending_u / sends, waiting for a reply = pending_u / sends.

A time sum at or above 2**63 is a negative interval the kernel printed unsigned (seen in real
captures for ACCESS); such an op keeps its counts but has no averages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainguard.nfs.mountstats import OpStats, Xprt

__all__ = [
    "DATA_OPS",
    "LIGHT_OPS",
    "ConnSummary",
    "OpSummary",
    "TransportSummary",
    "summarize_op",
    "summarize_transport",
]

DATA_OPS = ("WRITE", "READ", "COMMIT", "READ_PLUS")
"""Operations that move file data (the ones a checkpoint save or a data loader waits on)."""
LIGHT_OPS = frozenset({"GETATTR", "ACCESS", "LOOKUP", "LOOKUPP", "SEQUENCE", "FSSTAT",
                       "FSINFO", "PATHCONF", "STATFS", "RENEW", "READLINK"})
"""Small metadata calls: their RTT is the network round trip plus a cheap server lookup."""

_WRAP = 2**63


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True, slots=True)
class OpSummary:
    """Averages of one operation over a window (times in ms per op)."""

    name: str
    ops: int
    retrans: int
    timeouts: int
    errors: int | None
    payload_bytes: int
    ops_per_s: float | None
    mb_per_s: float | None
    """Payload megabytes (1e6) per second; None without a window length."""
    kb_per_op: float | None
    queue_ms: float | None
    rtt_ms: float | None
    execute_ms: float | None
    """None when the op had no calls or its time sums are not usable."""
    total_execute_ms: float
    """Summed execute time: where the wall time of the RPCs went."""

    @property
    def timed(self) -> bool:
        return self.execute_ms is not None

    @property
    def queue_share(self) -> float | None:
        if self.queue_ms is None or not self.execute_ms:
            return None
        return min(self.queue_ms / self.execute_ms, 1.0)

    @property
    def other_ms(self) -> float | None:
        if self.execute_ms is None or self.queue_ms is None or self.rtt_ms is None:
            return None
        return max(self.execute_ms - self.queue_ms - self.rtt_ms, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.name, "ops": self.ops, "ops_per_s": _r(self.ops_per_s),
                "mb_per_s": _r(self.mb_per_s), "kb_per_op": _r(self.kb_per_op, 1),
                "queue_ms": _r(self.queue_ms), "rtt_ms": _r(self.rtt_ms),
                "execute_ms": _r(self.execute_ms), "queue_share": _r(self.queue_share),
                "retrans": self.retrans, "timeouts": self.timeouts, "errors": self.errors}


def summarize_op(op: OpStats, duration_s: float | None) -> OpSummary:
    if op.name == "WRITE":
        payload = op.bytes_sent
    elif op.name in ("READ", "READ_PLUS"):
        payload = op.bytes_recv
    else:
        payload = op.bytes_sent + op.bytes_recv
    times = (op.queue_ms, op.rtt_ms, op.execute_ms)
    usable = op.ops > 0 and all(0 <= t < _WRAP for t in times)

    def per(total: int) -> float | None:
        return total / op.ops if usable else None

    rate = duration_s if duration_s else None
    return OpSummary(
        name=op.name, ops=op.ops, retrans=max(op.trans - op.ops, 0),
        timeouts=max(op.timeouts, 0), errors=op.errors, payload_bytes=max(payload, 0),
        ops_per_s=op.ops / rate if rate else None,
        mb_per_s=max(payload, 0) / rate / 1e6 if rate else None,
        kb_per_op=payload / op.ops / 1024 if op.ops > 0 else None,
        queue_ms=per(op.queue_ms), rtt_ms=per(op.rtt_ms), execute_ms=per(op.execute_ms),
        total_execute_ms=float(op.execute_ms) if usable else 0.0)


@dataclass(frozen=True, slots=True)
class ConnSummary:
    """One transport connection (``xprt:`` line) over the window."""

    index: int
    proto: str
    sends: int
    inflight: float | None
    """Average requests outstanding on this connection when one was sent."""
    backlog: float | None
    """Average requests waiting for an RPC slot at each send."""
    sending: float | None
    pending: float | None
    max_slots: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "proto": self.proto, "sends": self.sends,
                "inflight": _r(self.inflight), "backlog": _r(self.backlog),
                "sending": _r(self.sending), "pending": _r(self.pending),
                "max_slots": self.max_slots}


@dataclass(frozen=True, slots=True)
class TransportSummary:
    """All connections of a mount together (send-weighted averages) and one by one."""

    connections: int
    active: int
    """Connections that sent anything in the window."""
    proto: str
    sends: int
    inflight: float | None
    backlog: float | None
    sending: float | None
    pending: float | None
    max_slots: int | None
    """Most slots ever in use on any one connection (a high-water mark since mount)."""
    bad_xids: int
    per_conn: tuple[ConnSummary, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"connections": self.connections, "active": self.active, "proto": self.proto,
                "sends": self.sends, "inflight": _r(self.inflight),
                "backlog": _r(self.backlog), "sending": _r(self.sending),
                "pending": _r(self.pending), "max_slots": self.max_slots,
                "bad_xids": self.bad_xids, "per_connection": [c.to_dict() for c in self.per_conn]}


def _ratio(total: int | None, sends: int) -> float | None:
    if total is None or sends <= 0 or total < 0:
        return None
    return total / sends


def summarize_transport(xprts: tuple[Xprt, ...]) -> TransportSummary | None:
    if not xprts:
        return None
    per: list[ConnSummary] = []
    for i, x in enumerate(xprts):
        per.append(ConnSummary(index=i, proto=x.proto, sends=max(x.sends, 0),
                               inflight=_ratio(x.req_u, x.sends),
                               backlog=_ratio(x.bklog_u, x.sends),
                               sending=_ratio(x.sending_u, x.sends),
                               pending=_ratio(x.pending_u, x.sends), max_slots=x.max_slots))
    sends = sum(max(x.sends, 0) for x in xprts)

    def total(name: str) -> int | None:
        values = [getattr(x, name) for x in xprts]
        return None if any(v is None for v in values) else sum(values)

    slots = [x.max_slots for x in xprts if x.max_slots is not None]
    return TransportSummary(
        connections=len(xprts), active=sum(1 for x in xprts if x.sends > 0),
        proto=xprts[0].proto, sends=sends, inflight=_ratio(total("req_u"), sends),
        backlog=_ratio(total("bklog_u"), sends), sending=_ratio(total("sending_u"), sends),
        pending=_ratio(total("pending_u"), sends), max_slots=max(slots) if slots else None,
        bad_xids=sum(max(x.bad_xids, 0) for x in xprts), per_conn=tuple(per))
