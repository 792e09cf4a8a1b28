"""Build /proc/self/mountstats text for constructed NFS cases, in the kernel's layout.

A `Mount` holds cumulative counters; `Mount.after(seconds, ...)` adds a window's traffic, so a
test writes the before/after pair of a two-sample diagnosis from per-call averages::

    before = Mount(vers="3")
    after = before.after(10, ops={"WRITE": Op.avg(20000, queue=80, rtt=6, kib=1024)},
                         conns=[Conn.avg(20000, inflight=12, backlog=44, max_slots=128)])
    text_a, text_b = render(before), render(after)

Field order follows the kernel: per-op ``ops trans timeouts bytes_sent bytes_recv queue rtt
execute errors`` (net/sunrpc/stats.c) and ``xprt: tcp srcport bind connect connect_time idle
sends recvs bad_xids req_u bklog_u max_slots sending_u pending_u`` (net/sunrpc/xprtsock.c).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

V3_OPS = ("NULL", "GETATTR", "SETATTR", "LOOKUP", "ACCESS", "READLINK", "READ", "WRITE",
          "CREATE", "MKDIR", "SYMLINK", "MKNOD", "REMOVE", "RMDIR", "RENAME", "LINK", "READDIR",
          "READDIRPLUS", "FSSTAT", "FSINFO", "PATHCONF", "COMMIT")
V4_OPS = ("NULL", "READ", "WRITE", "COMMIT", "OPEN", "OPEN_CONFIRM", "OPEN_NOATTR",
          "OPEN_DOWNGRADE", "CLOSE", "SETATTR", "FSINFO", "RENEW", "SETCLIENTID",
          "SETCLIENTID_CONFIRM", "LOCK", "LOCKT", "LOCKU", "ACCESS", "GETATTR", "LOOKUP",
          "LOOKUP_ROOT", "REMOVE", "RENAME", "LINK", "SYMLINK", "CREATE", "PATHCONF", "STATFS",
          "READLINK", "READDIR", "SERVER_CAPS", "DELEGRETURN", "GETACL", "SETACL",
          "FS_LOCATIONS", "RELEASE_LOCKOWNER", "SECINFO", "FSID_PRESENT", "EXCHANGE_ID",
          "CREATE_SESSION", "DESTROY_SESSION", "SEQUENCE", "GET_LEASE_TIME", "RECLAIM_COMPLETE",
          "LAYOUTGET", "GETDEVICEINFO", "LAYOUTCOMMIT", "LAYOUTRETURN", "SECINFO_NO_NAME",
          "TEST_STATEID", "FREE_STATEID", "GETDEVICELIST", "BIND_CONN_TO_SESSION",
          "DESTROY_CLIENTID", "SEEK", "ALLOCATE", "DEALLOCATE", "LAYOUTSTATS", "CLONE", "COPY",
          "OFFLOAD_CANCEL", "LOOKUPP", "LAYOUTERROR", "COPY_NOTIFY", "GETXATTR", "SETXATTR",
          "LISTXATTRS", "REMOVEXATTR", "READ_PLUS")
EVENT_DELAY = 24  # NFSIOS_DELAY


@dataclass(frozen=True)
class Op:
    """One per-op line's counters."""

    ops: int = 0
    trans: int = 0
    timeouts: int = 0
    sent: int = 0
    recv: int = 0
    queue_ms: int = 0
    rtt_ms: int = 0
    execute_ms: int = 0
    errors: int = 0

    @classmethod
    def avg(cls, ops: int, *, queue: float = 0.0, rtt: float = 0.5,
            execute: float | None = None, kib: float = 0.0, read: bool = False,
            retrans: int = 0, timeouts: int = 0) -> Op:
        """`ops` calls with these per-call averages (ms); `kib` payload per call."""
        payload = int(ops * kib * 1024)
        small = ops * 200
        total = queue + rtt if execute is None else execute
        return cls(ops=ops, trans=ops + retrans, timeouts=timeouts,
                   sent=small if read else payload + small, recv=payload + small if read else small,
                   queue_ms=round(ops * queue), rtt_ms=round(ops * rtt),
                   execute_ms=round(ops * total))

    def __add__(self, other: Op) -> Op:
        return Op(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))


def _fields(op: Op) -> tuple[int, ...]:
    return (op.ops, op.trans, op.timeouts, op.sent, op.recv, op.queue_ms, op.rtt_ms,
            op.execute_ms, op.errors)


@dataclass(frozen=True)
class Conn:
    """One ``xprt:`` line (a connection); `max_slots` is a high-water mark, not summed."""

    sends: int = 0
    recvs: int = 0
    bad_xids: int = 0
    req_u: int = 0
    bklog_u: int = 0
    max_slots: int = 0
    sending_u: int = 0
    pending_u: int = 0
    srcport: int = 871

    @classmethod
    def avg(cls, sends: int, *, inflight: float = 1.0, backlog: float = 0.0,
            sending: float = 0.0, max_slots: int = 2) -> Conn:
        """`sends` transmissions seeing these averages at each send."""
        return cls(sends=sends, recvs=sends, req_u=round(sends * inflight),
                   bklog_u=round(sends * backlog), max_slots=max_slots,
                   sending_u=round(sends * sending),
                   pending_u=round(sends * max(inflight - 1.0, 0.0)))

    def __add__(self, other: Conn) -> Conn:
        return Conn(sends=self.sends + other.sends, recvs=self.recvs + other.recvs,
                    bad_xids=self.bad_xids + other.bad_xids, req_u=self.req_u + other.req_u,
                    bklog_u=self.bklog_u + other.bklog_u,
                    max_slots=max(self.max_slots, other.max_slots),
                    sending_u=self.sending_u + other.sending_u,
                    pending_u=self.pending_u + other.pending_u, srcport=self.srcport)


def _baseline(vers: str) -> dict[str, Op]:
    """A little history since mount: metadata calls at a 0.4 ms round trip."""
    base = {"NULL": Op.avg(1, rtt=0.0), "GETATTR": Op.avg(500, rtt=0.4),
            "ACCESS": Op.avg(300, rtt=0.4), "LOOKUP": Op.avg(200, rtt=0.4)}
    if vers in ("4.1", "4.2"):
        base["SEQUENCE"] = Op.avg(100, rtt=0.4)
    return base


@dataclass(frozen=True)
class Mount:
    """One NFS mount's block; counters are cumulative since mount."""

    vers: str = "3"
    device: str = "filer:/ckpt"
    mountpoint: str = "/mnt/ckpt"
    proto: str = "tcp"
    nconnect: int = 1
    wsize: int = 1048576
    rsize: int = 1048576
    age: int = 3600
    sec: str = "sys"
    ops: dict[str, Op] = field(default_factory=dict)
    conns: tuple[Conn, ...] = ()
    delay_events: int = 0

    def __post_init__(self) -> None:
        if not self.ops:
            object.__setattr__(self, "ops", _baseline(self.vers))
        if not self.conns:
            sends = sum(op.trans for op in self.ops.values())
            object.__setattr__(self, "conns", tuple(
                Conn.avg(sends // self.nconnect, max_slots=2) for _ in range(self.nconnect)))

    def after(self, seconds: int, ops: dict[str, Op] | None = None,
              conns: list[Conn] | None = None, delay_events: int = 0) -> Mount:
        """This mount `seconds` later, with `ops` and `conns` traffic added."""
        merged = dict(self.ops)
        for name, op in (ops or {}).items():
            merged[name] = merged.get(name, Op()) + op
        added = conns or [Conn.avg(sum(o.trans for o in (ops or {}).values()) // self.nconnect)
                          for _ in range(self.nconnect)]
        if len(added) != len(self.conns):
            raise ValueError("give one Conn per connection (nconnect)")
        return replace(self, age=self.age + seconds, ops=merged,
                       conns=tuple(a + b for a, b in zip(self.conns, added, strict=True)),
                       delay_events=self.delay_events + delay_events)


def _opts(m: Mount) -> str:
    parts = ["rw", f"vers={m.vers}", f"rsize={m.rsize}", f"wsize={m.wsize}", "namlen=255",
             "acregmin=3", "acregmax=60", "acdirmin=30", "acdirmax=60", "hard", f"proto={m.proto}"]
    if m.nconnect > 1:
        parts.append(f"nconnect={m.nconnect}")
    parts += ["timeo=600", "retrans=2", f"sec={m.sec}"]
    if m.vers.startswith("4"):
        parts.append("clientaddr=10.0.0.5")
    else:
        parts += ["mountaddr=10.0.0.2", "mountvers=3", "mountport=20048", "mountproto=udp"]
    parts.append("local_lock=none")
    return ",".join(parts)


def render_mount(m: Mount) -> str:
    v4 = m.vers.startswith("4")
    events = [0] * 27
    events[EVENT_DELAY] = m.delay_events
    written = sum(op.sent for name, op in m.ops.items() if name == "WRITE")
    read = sum(op.recv for name, op in m.ops.items() if name == "READ")
    lines = [
        f"device {m.device} mounted on {m.mountpoint} with fstype "
        f"{'nfs4' if v4 else 'nfs'} statvers=1.1",
        f"\topts:\t{_opts(m)}",
        f"\tage:\t{m.age}",
        "\tcaps:\tcaps=0x3fcf,wtmult=4096,dtsize=1048576,bsize=0,namlen=255",
    ]
    if v4:
        lines.append("\tnfsv4:\tbm0=0xfdffbfff,bm1=0x40f9be3e,bm2=0x803,acl=0x3,"
                     + ("sessions," if m.vers != "4.0" else "") + "pnfs=not configured")
    lines += [
        "\tsec:\tflavor=1,pseudoflavor=1",
        "\tevents:\t" + " ".join(str(e) for e in events) + " ",
        f"\tbytes:\t{read} {written} 0 0 {read} {written} {read // 4096} {written // 4096} ",
        f"\tRPC iostats version: 1.1  p/v: 100003/{4 if v4 else 3} (nfs)",
    ]
    for c in m.conns:
        if m.proto == "rdma":
            lines.append(f"\txprt:\trdma 0 0 1 0 0 {c.sends} {c.recvs} {c.bad_xids} {c.req_u} "
                         f"{c.bklog_u}" + " 0" * 17)
        else:
            lines.append(f"\txprt:\t{m.proto} {c.srcport} 1 1 0 0 {c.sends} {c.recvs} "
                         f"{c.bad_xids} {c.req_u} {c.bklog_u} {c.max_slots} {c.sending_u} "
                         f"{c.pending_u}")
    lines.append("\tper-op statistics")
    for name in V4_OPS if v4 else V3_OPS:
        op = m.ops.get(name, Op())
        lines.append(f"\t{name:>12}: " + " ".join(str(v) for v in _fields(op)))
    return "\n".join(lines) + "\n"


NON_NFS = ("device proc mounted on /proc with fstype proc\n"
           "device /dev/nvme0n1p1 mounted on / with fstype xfs\n"
           "device sunrpc mounted on /var/lib/nfs/rpc_pipefs with fstype rpc_pipefs\n")


def render(*mounts: Mount) -> str:
    """A whole mountstats file: a few local mounts, then each NFS mount's block."""
    return NON_NFS + "".join(render_mount(m) + "\n" for m in mounts)
