"""Where an NFS mount's RPC latency goes: client queueing, the network, the server, the client
after the reply; or nowhere worth fixing. Pure: a `MountWindow` in, a `MountDiagnosis` out.

Every RPC's execute time splits into queue (task created -> transmitted: waiting for an RPC
slot, an NFSv4.1 session slot or the socket), RTT (transmitted -> reply: wire + server) and the
rest. The diagnosis picks the data operation (WRITE, READ, COMMIT) that holds the most RPC
time and attributes its latency, in this order (the first rule that holds is the attribution,
the others that hold are listed as further findings):

1. network / link-saturated: payload at or above `link_saturated` of ``--link-gbps``;
2. network / retransmissions: the data operations' RPC retransmissions or major timeouts at or
   above their thresholds (a retransmitted RPC's wait also shows up as queue time);
3. client-queue: queue >= `queue_min_ms` and >= `queue_share` of execute, and either queue >=
   `queue_over_rtt` x RTT or RPC-slot evidence (backlog >= `backlog_min` per send, or a
   connection at the slot limit). The mechanism: rpc-slots (slot backlog or at the limit),
   transmit-queue (>= `sending_min` requests waiting for the socket per send), session-slots
   (NFSv4.1+, where the session slot table, not the transport, bounds concurrency), else
   unexplained. When the server's "try later" replies (NFS3ERR_JUKEBOX / NFS4ERR_DELAY, whose
   retry wait counts as queue time) explain >= `delay_share` of the queue time and there is
   no slot backlog, the attribution is server / server-delay instead;
4. network / path-latency: metadata calls (GETATTR, ACCESS, LOOKUP, ...) take >=
   `light_rtt_high_ms` round trip;
5. server / data-rtt: RTT >= `server_rtt_share` of execute, >= `server_rtt_min_ms` and >=
   `server_rtt_ratio` x the metadata RTT;
6. client-other: execute - queue - RTT >= `other_min_ms` and >= `other_share` of execute;
7. network / retransmissions of any operation (metadata calls), when rule 2 did not hold;
8. underutilized: fewer than `inflight_low` RPCs in flight (and, with ``--link-gbps`` over an
   interval, under `link_low` of the link): nothing queues, the workload asks for too little;
9. healthy.

A mount with fewer than `min_data_ops` data operations in the window is idle (rules 1, 4 and
7 still apply to its metadata traffic).

A capture without per-op statistics (a partial paste that stops after the ``xprt:`` lines) is
judged from the transport alone: client-queue / rpc-slots or transmit-queue by the same
backlog, slot-limit and socket thresholds as rule 3; otherwise undetermined (no saturation,
but nothing to attribute latency with); idle when nothing was sent.

    >>> d = diagnose(cumulative(parse_mountstats(text).mounts[0]))   # doctest: +SKIP
    >>> d.attribution, d.mechanism                                    # doctest: +SKIP
    (<Attribution.CLIENT_QUEUE: 'client-queue'>, 'rpc-slots')
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainguard.nfs.metrics import (
    DATA_OPS,
    LIGHT_OPS,
    OpSummary,
    TransportSummary,
    summarize_op,
    summarize_transport,
)
from trainguard.nfs.model import Attribution, Environment, Finding, MountDiagnosis
from trainguard.nfs.mountstats import EVENT_DELAY, OpStats
from trainguard.nfs.recommend import recommend
from trainguard.nfs.thresholds import Thresholds
from trainguard.nfs.window import Basis, MountWindow

__all__ = ["Thresholds", "diagnose"]


@dataclass(slots=True)
class _Ctx:
    """Everything the rules read (built once per mount)."""

    window: MountWindow
    env: Environment
    t: Thresholds
    ops: dict[str, OpSummary]
    main: OpSummary | None
    light_rtt: float | None
    light_ops: int
    light_source: str
    transport: TransportSummary | None
    at_limit: int | None
    link_util: float | None
    concurrency: float | None
    delay_events: int | None
    notes: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        return self.window.mount.nfs_version

    @property
    def session_version(self) -> bool:
        """NFSv4.1+: one session slot table bounds concurrency; transports get unlimited
        slots (the client creates them with XPRT_CREATE_INFINITE_SLOTS)."""
        return self.version in ("4.1", "4.2")


def _fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "n/a"
    if abs(x) >= 100:
        return f"{x:,.0f}{unit}"
    if abs(x) >= 10:
        return f"{x:.1f}{unit}"
    return f"{x:.2f}{unit}"


def _light_rtt(ops: list[OpStats], t: Thresholds) -> tuple[float | None, int]:
    n = 0
    rtt = 0
    for op in ops:
        if op.name in LIGHT_OPS and op.ops > 0 and 0 <= op.rtt_ms < 2**63:
            n += op.ops
            rtt += op.rtt_ms
    return (rtt / n if n >= t.min_light_ops else None), n


def _concurrency(window: MountWindow, ops: dict[str, OpSummary],
                 transport: TransportSummary | None) -> float | None:
    """RPCs of the data ops in flight on average.

    Over an interval, Little's law: summed data-op execute time / window length. Since mount
    that would average in every idle hour, so it is the requests outstanding at each send
    times the connections that carried traffic (concurrency while busy, an upper bound).
    """
    if window.basis is Basis.INTERVAL and window.duration_s:
        busy = sum(ops[n].total_execute_ms for n in DATA_OPS if n in ops)
        return busy / (window.duration_s * 1000.0)
    if transport is not None and transport.inflight is not None:
        return transport.inflight * max(transport.active, 1)
    return None


def _link_util(window: MountWindow, env: Environment) -> float | None:
    if env.link_gbps is None or window.basis is not Basis.INTERVAL or not window.duration_s:
        return None
    sent = sum(max(op.bytes_sent, 0) for op in window.ops)
    recv = sum(max(op.bytes_recv, 0) for op in window.ops)
    return max(sent, recv) * 8.0 / window.duration_s / (env.link_gbps * 1e9)


def _context(window: MountWindow, env: Environment, t: Thresholds) -> _Ctx:
    notes: list[str] = []
    summaries = {op.name: summarize_op(op, window.duration_s) for op in window.ops}
    untimed = [s.name for s in summaries.values() if s.ops > 0 and not s.timed]
    if untimed:
        notes.append("time counters of " + ", ".join(untimed) + " are not usable (a negative "
                     "interval printed unsigned, or counters stepped back): left out of the "
                     "averages")
    candidates = [summaries[n] for n in DATA_OPS
                  if n in summaries and summaries[n].ops >= t.min_data_ops and summaries[n].timed]
    main = max(candidates, key=lambda s: s.total_execute_ms) if candidates else None

    light, light_n = _light_rtt(list(window.ops), t)
    light_source = "window"
    if light is None and window.basis is Basis.INTERVAL:
        light, light_n = _light_rtt(list(window.mount.ops), t)
        light_source = "since mount"
    transport = summarize_transport(window.xprts)
    at_limit: int | None = None
    limit_applies = (env.slot_limit is not None and transport is not None
                     and window.mount.nfs_version not in ("4.1", "4.2")
                     and (env.slot_limit_proto is None
                          or env.slot_limit_proto == transport.proto))
    if (limit_applies and transport is not None and env.slot_limit is not None
            and any(c.max_slots is not None for c in transport.per_conn)):
        at_limit = sum(1 for c in transport.per_conn
                       if c.max_slots is not None and c.max_slots >= env.slot_limit)
    delay: int | None = None
    if len(window.events) > EVENT_DELAY:
        delay = max(window.events[EVENT_DELAY], 0)
    return _Ctx(
        window=window, env=env, t=t, ops=summaries, main=main, light_rtt=light,
        light_ops=light_n, light_source=light_source, transport=transport, at_limit=at_limit,
        link_util=_link_util(window, env),
        concurrency=_concurrency(window, summaries, transport), delay_events=delay,
        notes=notes)


# --- rules: each returns a Finding when it holds ---------------------------------------------


def _link_saturated(c: _Ctx) -> Finding | None:
    if c.link_util is None or c.link_util < c.t.link_saturated or c.env.link_gbps is None:
        return None
    return Finding(Attribution.NETWORK, "link-saturated",
                   f"the mount moves {c.link_util:.0%} of the {c.env.link_gbps:g} Gbit/s link: "
                   "the link is the limit, queueing elsewhere follows from it",
                   (("link_util", c.link_util), ("link_gbps", c.env.link_gbps)))


def _retransmissions(c: _Ctx, data_only: bool) -> Finding | None:
    """Lost or timed-out RPCs: of the data ops (`data_only`), else of every op."""
    pool = [op for op in c.window.ops
            if op.ops > 0 and (not data_only or op.name in DATA_OPS)]
    rpcs = sum(op.ops for op in pool)
    if rpcs <= 0:
        return None
    retrans = sum(max(op.trans - op.ops, 0) for op in pool)
    timeouts = sum(max(op.timeouts, 0) for op in pool)
    frac = retrans / rpcs
    tfrac = timeouts / rpcs
    lossy = retrans >= c.t.retrans_min and frac >= c.t.retrans_fraction
    if not lossy and not (timeouts > 0 and tfrac >= c.t.timeout_fraction):
        return None
    worst = max(pool, key=lambda op: (max(op.trans - op.ops, 0) + max(op.timeouts, 0)) / op.ops)
    scope = "data RPCs (WRITE/READ/COMMIT)" if data_only else "RPCs"
    return Finding(Attribution.NETWORK, "retransmissions",
                   f"{frac:.1%} of {scope} were retransmitted and {timeouts} timed out (worst: "
                   f"{worst.name}, {max(worst.trans - worst.ops, 0)} of {worst.ops}): requests "
                   "or replies are lost, or the server stops answering for a full timeout",
                   (("retrans", retrans), ("rpcs", rpcs), ("retrans_fraction", frac),
                    ("major_timeouts", timeouts), ("timeout_fraction", tfrac),
                    ("worst_op", worst.name), ("scope", "data" if data_only else "all"),
                    ("bad_xids", c.transport.bad_xids if c.transport else None)))


def _client_queue(c: _Ctx) -> Finding | None:
    m, t = c.main, c.t
    if m is None or m.queue_ms is None or m.rtt_ms is None or m.execute_ms is None:
        return None
    share = m.queue_share or 0.0
    tr = c.transport
    backlog = tr.backlog if tr is not None else None
    slot_evidence = (backlog is not None and backlog >= t.backlog_min) or bool(c.at_limit)
    if not (m.queue_ms >= t.queue_min_ms and share >= t.queue_share
            and (m.queue_ms >= t.queue_over_rtt * m.rtt_ms or slot_evidence)):
        return None
    evidence: list[tuple[str, float | int | str | None]] = [
        ("op", m.name), ("queue_ms", m.queue_ms), ("rtt_ms", m.rtt_ms),
        ("execute_ms", m.execute_ms), ("queue_share", share)]
    if tr is not None:
        evidence += [("connections", tr.connections), ("inflight_per_send", tr.inflight),
                     ("backlog_per_send", backlog), ("sending_per_send", tr.sending),
                     ("max_slots", tr.max_slots)]
    if c.env.slot_limit is not None:
        evidence += [("slot_limit", c.env.slot_limit), ("connections_at_limit", c.at_limit)]
    if c.link_util is not None:
        evidence.append(("link_util", c.link_util))
    head = (f"{m.name} waits {_fmt(m.queue_ms, ' ms')} in the client queue per call, "
            f"{share:.0%} of its {_fmt(m.execute_ms, ' ms')} (RTT {_fmt(m.rtt_ms, ' ms')})")

    # Server "try later" replies: the retry wait is spent before the next transmission.
    if c.delay_events and not (backlog is not None and backlog >= t.backlog_min):
        per_delay_ms = 5000.0 if c.version in ("2", "3") else 100.0
        queue_total = sum(s.queue_ms * s.ops for s in c.ops.values() if s.queue_ms is not None)
        explained = (min(c.delay_events * per_delay_ms / queue_total, 1.0) if queue_total
                     else 0.0)
        if explained >= t.delay_share:
            return Finding(Attribution.SERVER, "server-delay",
                           f"{head}, but the server answered 'try later' (NFS3ERR_JUKEBOX / "
                           f"NFS4ERR_DELAY) {c.delay_events} times and the client's retry wait "
                           f"counts as queue time: that explains >= {explained:.0%} of it",
                           (*evidence, ("delay_replies", c.delay_events),
                            ("delay_explains", explained)))
    if slot_evidence:
        where = ""
        if c.at_limit:
            where = (f"; {c.at_limit} of {tr.connections if tr else '?'} connection(s) reached "
                     f"the {c.env.slot_limit}-slot limit")
        elif tr is not None and tr.max_slots is not None:
            where = f"; at most {tr.max_slots} slots were in use on a connection"
        return Finding(Attribution.CLIENT_QUEUE, "rpc-slots",
                       f"{head}: the RPC slot table is exhausted (on average "
                       f"{_fmt(backlog)} requests wait for a slot at each send{where})",
                       tuple(evidence))
    if tr is not None and tr.sending is not None and tr.sending >= t.sending_min:
        return Finding(Attribution.CLIENT_QUEUE, "transmit-queue",
                       f"{head}: requests wait for the connection's socket (on average "
                       f"{_fmt(tr.sending)} queued to transmit at each send over "
                       f"{tr.connections} connection(s)); one TCP stream cannot drain them",
                       tuple(evidence))
    if c.session_version:
        slots = f" (at most {tr.max_slots} RPCs were in flight)" if tr and tr.max_slots else ""
        return Finding(Attribution.CLIENT_QUEUE, "session-slots",
                       f"{head}: no transport backlog, so the wait is for NFSv{c.version} "
                       f"session slots{slots}", tuple(evidence))
    return Finding(Attribution.CLIENT_QUEUE, "unexplained",
                   f"{head}: no slot backlog or socket queue recorded; the wait is before "
                   "transmission (client CPU, RPC scheduling, security wrapping)",
                   tuple(evidence))


def _path_latency(c: _Ctx) -> Finding | None:
    if c.light_rtt is None or c.light_rtt < c.t.light_rtt_high_ms:
        return None
    return Finding(Attribution.NETWORK, "path-latency",
                   f"metadata calls (GETATTR, ACCESS, LOOKUP, ...) take {_fmt(c.light_rtt)} ms "
                   f"round trip over {c.light_ops} calls ({c.light_source}): the path to the "
                   "server is slow or congested",
                   (("light_rtt_ms", c.light_rtt), ("light_ops", c.light_ops),
                    ("light_rtt_from", c.light_source)))


def _server_rtt(c: _Ctx, m: OpSummary | None) -> Finding | None:
    t = c.t
    if m is None or m.rtt_ms is None or not m.execute_ms:
        return None
    if m.rtt_ms < t.server_rtt_min_ms or m.rtt_ms / m.execute_ms < t.server_rtt_share:
        return None
    if c.light_rtt is not None and m.rtt_ms < t.server_rtt_ratio * c.light_rtt:
        return None
    tr = c.transport
    evidence: list[tuple[str, float | int | str | None]] = [
        ("op", m.name), ("rtt_ms", m.rtt_ms), ("execute_ms", m.execute_ms),
        ("light_rtt_ms", c.light_rtt), ("kb_per_op", m.kb_per_op)]
    detail = ""
    if c.light_rtt is not None:
        detail = (f" while metadata calls take {_fmt(c.light_rtt)} ms "
                  f"({m.rtt_ms / max(c.light_rtt, 1e-3):.0f}x)")
    else:
        detail = " (no metadata calls to compare: it may also be the network path)"
    behind = ""
    if tr is not None and tr.inflight is not None and tr.inflight >= 2 and m.kb_per_op:
        per_conn = tr.inflight * m.kb_per_op * 1024 / (m.rtt_ms / 1000.0) / 1e6
        evidence += [("inflight_per_send", tr.inflight), ("implied_mb_per_s_per_conn", per_conn)]
        behind = (f"; with {_fmt(tr.inflight)} requests outstanding per connection each waits "
                  f"behind the others (about {_fmt(per_conn)} MB/s per connection: if that is "
                  "the link speed, the link is the limit)")
    return Finding(Attribution.SERVER, "data-rtt",
                   f"{m.name} takes {_fmt(m.rtt_ms)} ms round trip per call{detail}: the time "
                   f"is spent at the server (storage, execution){behind}", tuple(evidence))


def _client_other(c: _Ctx) -> Finding | None:
    m, t = c.main, c.t
    if m is None or m.other_ms is None or not m.execute_ms:
        return None
    other = m.other_ms
    if other < t.other_min_ms or other / m.execute_ms < t.other_share:
        return None
    return Finding(Attribution.CLIENT_OTHER, "post-reply",
                   f"{m.name} spends {_fmt(other)} ms per call after the reply arrived "
                   f"({other / m.execute_ms:.0%} of {_fmt(m.execute_ms)} ms): client-side "
                   "completion (CPU, RPC scheduling, decoding/unwrapping)",
                   (("op", m.name), ("other_ms", other), ("execute_ms", m.execute_ms),
                    ("queue_ms", m.queue_ms), ("rtt_ms", m.rtt_ms)))


_NO_PER_OP = ("the capture has no per-op statistics, so how much of each call's latency this "
              "costs is unknown")


def _transport_only(c: _Ctx) -> Finding:
    """The verdict from the ``xprt:`` counters alone (a capture without per-op statistics).

    Slot saturation is visible there (backlog per send, connections at the slot limit), and so
    is a socket that cannot drain; queue, round-trip and server time are not.
    """
    tr, t = c.transport, c.t
    if tr is None or tr.sends <= 0:
        return Finding(Attribution.IDLE, "no-traffic",
                       "no RPCs were sent on the transport in the window, and the capture has "
                       "no per-op statistics: nothing to attribute",
                       (("sends", 0 if tr is None else tr.sends), ("per_op", "missing")))
    evidence: list[tuple[str, float | int | str | None]] = [
        ("connections", tr.connections), ("sends", tr.sends),
        ("inflight_per_send", tr.inflight), ("backlog_per_send", tr.backlog),
        ("sending_per_send", tr.sending), ("max_slots", tr.max_slots), ("per_op", "missing")]
    if c.env.slot_limit is not None:
        evidence += [("slot_limit", c.env.slot_limit), ("connections_at_limit", c.at_limit)]
    backlog = tr.backlog
    if (backlog is not None and backlog >= t.backlog_min) or c.at_limit:
        where = ""
        if c.at_limit:
            where = (f"; {c.at_limit} of {tr.connections} connection(s) reached the "
                     f"{c.env.slot_limit}-slot limit")
        elif tr.max_slots is not None:
            where = f"; at most {tr.max_slots} slots were in use on a connection"
        return Finding(Attribution.CLIENT_QUEUE, "rpc-slots",
                       f"the RPC slot table is exhausted: on average {_fmt(backlog)} requests "
                       f"wait for a slot at each send over {tr.connections} connection(s)"
                       f"{where} ({_NO_PER_OP})", tuple(evidence))
    if tr.sending is not None and tr.sending >= t.sending_min:
        return Finding(Attribution.CLIENT_QUEUE, "transmit-queue",
                       f"requests wait for the connection's socket: on average "
                       f"{_fmt(tr.sending)} queued to transmit at each send over "
                       f"{tr.connections} connection(s) ({_NO_PER_OP})", tuple(evidence))
    session = (f"; NFSv{c.version} session-slot waits do not show in the transport counters"
               if c.session_version else "")
    return Finding(Attribution.UNDETERMINED, "transport-only",
                   f"no RPC slot saturation: on average {_fmt(tr.inflight)} requests in flight "
                   f"and {_fmt(backlog)} waiting for a slot at each send over "
                   f"{tr.connections} connection(s); without per-op statistics the queue, "
                   f"round-trip and server time cannot be attributed{session}",
                   tuple(evidence))


def _quiet(c: _Ctx) -> Finding:
    """No problem rule held: idle, underutilized or healthy."""
    m, t = c.main, c.t
    data_ops = sum(c.ops[n].ops for n in DATA_OPS if n in c.ops)
    if m is None:
        other = sum(s.ops for s in c.ops.values() if s.name not in DATA_OPS)
        return Finding(Attribution.IDLE, "no-data-traffic",
                       f"only {data_ops} data operations (WRITE/READ/COMMIT) in the window, "
                       f"fewer than {t.min_data_ops}, and {other:,} other RPCs: no file data "
                       "to attribute; measure while the workload writes or reads",
                       (("data_ops", data_ops), ("min_data_ops", t.min_data_ops),
                        ("other_rpcs", other)))
    evidence: tuple[tuple[str, float | int | str | None], ...] = (
        ("op", m.name), ("queue_ms", m.queue_ms), ("rtt_ms", m.rtt_ms),
        ("execute_ms", m.execute_ms), ("concurrency", c.concurrency),
        ("link_util", c.link_util))
    low_link = c.link_util is None or c.link_util < t.link_low
    if c.concurrency is not None and c.concurrency < t.inflight_low and low_link:
        how = ("over the interval (Little's law)" if c.window.basis is Basis.INTERVAL
               else "at each send, while busy")
        return Finding(Attribution.UNDERUTILIZED, "low-concurrency",
                       f"{m.name} latency is low ({_fmt(m.execute_ms)} ms, queue "
                       f"{_fmt(m.queue_ms)} ms) but only {_fmt(c.concurrency)} RPCs are in "
                       f"flight {how}: the workload asks for too little at a time",
                       evidence)
    return Finding(Attribution.HEALTHY, "ok",
                   f"{m.name}: queue {_fmt(m.queue_ms)} ms, RTT {_fmt(m.rtt_ms)} ms, execute "
                   f"{_fmt(m.execute_ms)} ms per call with {_fmt(c.concurrency)} in flight: "
                   "no bottleneck on the client or the path", evidence)


def _secondary(c: _Ctx, found: list[Finding]) -> list[Finding]:
    """Findings that add to the attribution: slot waits, other slow data ops, delays."""
    out: list[Finding] = []
    seen = {(f.category, f.mechanism) for f in found}
    tr = c.transport
    if (tr is not None and tr.backlog is not None and tr.backlog >= c.t.backlog_min
            and not any(f.category is Attribution.CLIENT_QUEUE for f in found)):
        worst = max(tr.per_conn, key=lambda x: x.backlog or 0.0)
        out.append(Finding(Attribution.CLIENT_QUEUE, "rpc-slot-waits",
                           f"requests waited for an RPC slot ({_fmt(tr.backlog)} per send on "
                           f"average; connection {worst.index}: {_fmt(worst.backlog)}), though "
                           "queueing is not where most of the time goes",
                           (("backlog_per_send", tr.backlog), ("worst_connection", worst.index),
                            ("worst_backlog", worst.backlog))))
    for name in DATA_OPS:
        s = c.ops.get(name)
        if s is None or s is c.main or s.ops < c.t.min_data_ops:
            continue
        f = _server_rtt(c, s)
        if f is not None and (f.category, f.mechanism) not in seen:
            out.append(f)
            seen.add((f.category, f.mechanism))
    if c.delay_events and not any(f.mechanism == "server-delay" for f in found):
        out.append(Finding(Attribution.SERVER, "delay-replies",
                           f"the server answered 'try later' (NFS3ERR_JUKEBOX / NFS4ERR_DELAY) "
                           f"{c.delay_events} times; each retry waits before resending",
                           (("delay_replies", c.delay_events),)))
    m = c.main
    if (m is not None and found and found[0].category is Attribution.CLIENT_QUEUE
            and m.rtt_ms is not None and m.rtt_ms >= c.t.server_rtt_min_ms
            and (c.light_rtt is None or m.rtt_ms >= c.t.server_rtt_ratio * c.light_rtt)):
        out.append(Finding(Attribution.SERVER, "rtt-also-high",
                           f"{m.name} RTT is high too ({_fmt(m.rtt_ms)} ms vs metadata "
                           f"{_fmt(c.light_rtt)} ms): each connection's path or the server is "
                           "slow as well; if RTT rises as much as concurrency after the fix, "
                           "the server is the limit",
                           (("rtt_ms", m.rtt_ms), ("light_rtt_ms", c.light_rtt))))
    return out


def _from_ops(c: _Ctx) -> list[Finding]:
    """The rules over the per-op statistics, in order (see the module docstring)."""
    # Lost data RPCs outrank everything but a full link (a retransmission's wait also inflates
    # queue time); losses elsewhere (metadata) only explain the mount when nothing else does.
    data_loss = _retransmissions(c, data_only=True) if c.main is not None else None
    problems = [f for f in (_link_saturated(c), data_loss, _client_queue(c), _path_latency(c),
                            _server_rtt(c, c.main), _client_other(c),
                            None if data_loss else _retransmissions(c, data_only=False))
                if f is not None]
    findings = problems or [_quiet(c)]
    return findings + _secondary(c, findings)


def diagnose(window: MountWindow, env: Environment | None = None,
             thresholds: Thresholds | None = None) -> MountDiagnosis:
    """Attribute one mount's latency and recommend fixes (see the module docstring)."""
    env = env or Environment()
    t = thresholds or Thresholds()
    c = _context(window, env, t)
    if window.per_op:
        findings = _from_ops(c)
    else:
        findings = [f for f in (_link_saturated(c),) if f is not None] + [_transport_only(c)]
    mount = window.mount
    notes = [*window.notes, *c.notes]
    if not window.per_op:
        notes.append("the capture has no per-op statistics (a partial paste?): per-op latency "
                     "(queue, RTT, execute) is missing; only the transport's slot and backlog "
                     "counters (xprt:) are judged")
    if window.basis is Basis.SINCE_MOUNT:
        notes.append("cumulative since mount: averages include every busy and idle period of "
                     "the mount's life; sample twice (--interval) to see the workload now")
    if c.light_rtt is not None and c.light_source != "window":
        notes.append(f"metadata RTT baseline taken {c.light_source} (too few metadata calls "
                     "in the interval)")
    sec = mount.option("sec")
    if sec in ("krb5i", "krb5p") and findings[0].category is Attribution.CLIENT_QUEUE:
        notes.append(f"sec={sec}: each RPC is checksummed/encrypted before transmission, and "
                     "that CPU time counts as queue time")
    if env.slot_limit is None:
        notes.append("RPC slot limit unknown (pass --slot-limit or run on the client): slot "
                     "exhaustion is judged from the backlog alone")
    ops = sorted((s for s in c.ops.values() if s.ops > 0 or s.name in ("WRITE", "READ")),
                 key=lambda s: (s.name not in DATA_OPS,
                                DATA_OPS.index(s.name) if s.name in DATA_OPS else 0,
                                -s.total_execute_ms, -s.ops))
    diag = MountDiagnosis(
        device=mount.device, mountpoint=mount.mountpoint, nfs_version=mount.nfs_version,
        proto=mount.proto, nconnect=mount.nconnect, wsize=mount.size_option("wsize"),
        rsize=mount.size_option("rsize"), sec=sec, basis=window.basis,
        duration_s=window.duration_s, age_s=mount.age_s, reset=window.reset, ops=tuple(ops),
        transport=c.transport, findings=tuple(findings), recommendations=(),
        notes=tuple(notes), link_util=c.link_util, concurrency=c.concurrency,
        per_op=window.per_op)
    return replace(diag, recommendations=recommend(diag, env))
