"""Concrete fixes for a diagnosed NFS mount, most effective first (pure: diagnosis in)."""

from __future__ import annotations

import shlex

from trainguard.nfs.model import Attribution, Environment, Finding, MountDiagnosis, Recommendation
from trainguard.nfs.paths import escape_path

__all__ = ["MAX_NCONNECT", "recommend"]

MAX_NCONNECT = 16
"""The Linux client's cap on ``nconnect``."""
_ONE_MIB = 1048576
_TCP_SLOT_MAX = 65536  # RPC_MAX_SLOT_TABLE_LIMIT
_SESSION_SLOT_MAX = 1024  # NFS4_MAX_SLOT_TABLE


def _mount_command(d: MountDiagnosis, changes: dict[str, str]) -> str:
    # The device and mount path come from the mountstats file (decoded): quote them, so a path
    # with a space or a "$(...)" stays one argument and is never run.
    fstype = "nfs4" if d.nfs_version.startswith("4") else "nfs"
    opts = [f"vers={d.nfs_version}"]
    if d.proto == "rdma":
        opts.append("proto=rdma")
    opts += [f"{k}={v}" for k, v in changes.items()]
    mp = shlex.quote(d.mountpoint)
    return f"umount {mp} && mount -t {fstype} -o {','.join(opts)} {shlex.quote(d.device)} {mp}"


def _io_key(d: MountDiagnosis, op: str) -> tuple[str, int] | None:
    """(``wsize``/``rsize``, current) when the op's transfer size is below 1 MiB."""
    key = "rsize" if op in ("READ", "READ_PLUS") else "wsize"
    size = d.rsize if key == "rsize" else d.wsize
    return None if size is None or size >= _ONE_MIB else (key, size)


def _nconnect(d: MountDiagnosis, why: str, op: str) -> Recommendation | None:
    if d.nconnect >= MAX_NCONNECT or d.proto == "udp":
        return None
    target = 8 if d.nconnect < 8 else MAX_NCONNECT
    changes = {"nconnect": str(target)}
    io = _io_key(d, op)
    if io is not None:  # one remount for both changes
        changes[io[0]] = str(_ONE_MIB)
    return Recommendation(
        f"Mount with nconnect={target} (now {d.nconnect}; at most {MAX_NCONNECT}, Linux 5.3+); "
        "nconnect is fixed at mount time, so unmount and mount again",
        _mount_command(d, changes),
        f"{why} Mounts of the same server share one client and its connections: unmount every "
        "mount of that server first, or the existing connections are reused. Keep the mount's "
        f"other options (see `grep -F {shlex.quote(f' {escape_path(d.mountpoint)} ')} "
        "/proc/mounts`).")


def _io_size(d: MountDiagnosis, op: str, with_nconnect: bool = False) -> Recommendation | None:
    io = _io_key(d, op)
    if io is None:
        return None
    key, size = io
    return Recommendation(
        f"Mount with {key}=1048576 (now {size})",
        None if with_nconnect else _mount_command(d, {key: str(_ONE_MIB)}),
        f"{op}s of {size // 1024} KiB need {_ONE_MIB // size}x the RPCs (and slots) per byte "
        "of 1 MiB ones; the server may negotiate it down."
        + (" Included in the mount command above." if with_nconnect else ""))


def _slot_table(d: MountDiagnosis, env: Environment) -> Recommendation | None:
    tr = d.transport
    if d.proto == "udp":
        return Recommendation("Mount with proto=tcp", _mount_command(d, {"proto": "tcp"}),
                              "UDP transports have a small fixed slot table and no nconnect.")
    if d.nfs_version in ("4.1", "4.2") and d.proto != "rdma":
        return None  # NFSv4.1+ TCP transports get unlimited RPC slots: the sysctl does not apply
    current = env.slot_limit if env.slot_limit is not None else (tr.max_slots if tr else None)
    new = min(max(2 * (current or 128), 256), _TCP_SLOT_MAX)
    if d.proto == "rdma":
        return Recommendation(
            f"Raise the RPC/RDMA slot table: sysctl -w sunrpc.rdma_slot_table_entries={new}",
            f"sysctl -w sunrpc.rdma_slot_table_entries={new}",
            f"At most {current if current is not None else '?'} requests fit per connection and "
            "requests waited for one. Applies to connections made afterwards (remount); the "
            "server's credit grant caps it too. Persist it in /etc/sysctl.d/.")
    if current is not None and current >= _TCP_SLOT_MAX:
        return None
    limit = (f"the limit is {current} ({env.slot_limit_source})" if env.slot_limit is not None
             else f"at most {current if current is not None else '?'} slots were in use and "
                  "requests waited, so that is the effective limit")
    return Recommendation(
        f"Raise the RPC slot table: sysctl -w sunrpc.tcp_max_slot_table_entries={new}",
        f"sysctl -w sunrpc.tcp_max_slot_table_entries={new}",
        f"Each TCP connection holds at most that many requests; {limit}. Applies to connections "
        "made afterwards (remount); persist it in /etc/sysctl.d/. Servers that cap requests per "
        "connection (128 on NetApp ONTAP / Azure NetApp Files) push back instead: there, more "
        "connections (nconnect) is the lever.")


def _session_slots(d: MountDiagnosis) -> Recommendation:
    tr = d.transport
    seen = tr.max_slots if tr is not None else None
    if seen is not None and seen < 64:
        return Recommendation(
            "Raise the server's NFSv4.1 session slot count",
            None,
            f"At most {seen} RPCs were in flight although the Linux client asks for 64 session "
            "slots (nfs max_session_slots): the server granted fewer. Raise its per-session "
            "slot limit (see the server's documentation), or spread the writers over more "
            "mounts of different server addresses (separate sessions).")
    new = min(max(2 * (seen or 64), 128), _SESSION_SLOT_MAX)
    return Recommendation(
        f"Raise the client's NFSv4.1 session slots to {new} (nfs.max_session_slots, default 64)",
        f"echo {new} > /sys/module/nfs/parameters/max_session_slots && echo 'options nfs "
        f"max_session_slots={new}' > /etc/modprobe.d/trainguard-nfs.conf",
        "A new session is negotiated when every mount of that server has been unmounted and "
        "one is mounted again; the modprobe.d line keeps it across reboots. The server must "
        "grant the slots too. nconnect adds connections, not session slots.")


def _parallel(d: MountDiagnosis) -> Recommendation:
    inflight = d.concurrency
    now = f"only about {inflight:.1f}" if inflight is not None else "few"
    return Recommendation(
        "Use more parallel writers (or readers)",
        None,
        f"{now} RPCs are in flight, so the link and server idle between them. Write checkpoint "
        "shards from several threads or processes per node (one file each), keep buffered I/O "
        "so the client's writeback issues many WRITEs at once, and avoid a single O_DIRECT or "
        "O_SYNC stream.")


def _full_capture(d: MountDiagnosis) -> Recommendation:
    mp = shlex.quote(d.mountpoint)
    return Recommendation(
        "Capture the mount's whole mountstats block, per-op statistics included",
        f"trainguard nfs diagnose --mount {mp} --interval 30",
        "On the client, this samples /proc/self/mountstats twice; elsewhere, save the whole "
        "file (cat /proc/self/mountstats > mountstats.txt) and give it with --mountstats. The "
        "per-op lines split each call's time into queue, round trip and server.")


def _for_finding(f: Finding, d: MountDiagnosis, env: Environment) -> list[Recommendation | None]:
    op = next((str(v) for k, v in f.evidence if k == "op"), "WRITE")
    if f.category is Attribution.CLIENT_QUEUE:
        if f.mechanism in ("rpc-slots", "rpc-slot-waits"):
            more = _nconnect(d, "Each connection has its own RPC slot table, so N connections "
                                "hold N times the requests.", op)
            return [more, _slot_table(d, env), _io_size(d, op, more is not None)]
        if f.mechanism == "transmit-queue":
            more = _nconnect(d, "Requests queue for one connection's socket; more connections "
                                "transmit in parallel.", op)
            return [more,
                    Recommendation("Check the TCP path of the busy connection",
                                   "ss -tin state established '( dport = :2049 )'",
                                   "Look at cwnd, retransmits and send-queue; small "
                                   "net.ipv4.tcp_wmem or NIC drops (ethtool -S) keep it from "
                                   "draining."),
                    _io_size(d, op, more is not None)]
        if f.mechanism == "session-slots":
            return [_session_slots(d), _io_size(d, op)]
        return [Recommendation("Check the client's CPU and RPC threads while it is slow",
                               "mpstat -P ALL 1; top -H -p $(pgrep -d, -f 'rpciod|kworker')",
                               "Queue time without slot backlog or socket queue is spent "
                               "before transmission: CPU starvation, RPC scheduling, or "
                               "sec=krb5i/krb5p wrapping."),
                _nconnect(d, "More connections also spread the transmit work.", op)]
    if f.category is Attribution.NETWORK:
        if f.mechanism == "link-saturated":
            return [Recommendation("Add bandwidth or spread the load",
                                   None,
                                   "The link is full: a faster or bonded link, RDMA, or writers "
                                   "spread over more NFS server addresses. Client tuning cannot "
                                   "help past line rate.")]
        if f.mechanism == "retransmissions":
            recs: list[Recommendation | None] = [Recommendation(
                "Find where RPCs are lost",
                "ip -s link; ethtool -S <iface> | grep -i -E 'drop|err|discard'; "
                "dmesg | grep -i 'not responding'",
                "Retransmissions and major timeouts mean requests or replies are lost (NIC or "
                "switch drops, MTU mismatch) or the server stops answering for a full timeo.")]
            if d.proto == "udp":
                recs.append(Recommendation("Mount with proto=tcp",
                                           _mount_command(d, {"proto": "tcp"}),
                                           "UDP loses RPCs on any packet drop."))
            return recs
        return [Recommendation("Measure the path to the server",
                               "ping -c 20 <server>; mtr -rwc 50 <server>",
                               "Metadata calls are slow end to end: routing, congestion or "
                               "distance; keep clients and server on the same fabric.")]
    if f.category is Attribution.SERVER:
        if f.mechanism in ("server-delay", "delay-replies"):
            return [Recommendation("Find why the server asks clients to retry later",
                                   None,
                                   "NFS3ERR_JUKEBOX / NFS4ERR_DELAY come from the server: file "
                                   "recalls from tiered storage, overload, or conflicting "
                                   "delegations/locks. Check its logs and load; the client "
                                   "waits before each retry (5 s for NFSv3).")]
        if f.mechanism == "rtt-also-high":
            return []
        what = ("stable-storage flushes (COMMIT)" if op == "COMMIT"
                else f"{op} handling (storage latency, CPU, nfsd threads)")
        return [Recommendation("Look at the server side",
                               None,
                               f"The server's {what} is where the time goes: check its storage "
                               "latency and CPU, raise the nfsd thread count on a Linux server "
                               "(/etc/nfs.conf [nfsd] threads=), and spread checkpoint shards "
                               "over more servers or exports.")]
    if f.category is Attribution.CLIENT_OTHER:
        return [Recommendation("Check the client's CPU while RPCs complete",
                               "mpstat -P ALL 1",
                               "Time after the reply is client work: CPU saturation, "
                               "krb5i/krb5p unwrapping, page-cache and writeback pressure.")]
    if f.category is Attribution.UNDERUTILIZED:
        return [_parallel(d), _io_size(d, op)]
    if f.category is Attribution.IDLE:
        return [Recommendation("Measure while the workload runs",
                               f"trainguard nfs diagnose --mount {shlex.quote(d.mountpoint)} "
                               "--interval 30",
                               "Start it during a checkpoint save (or data loading) so the "
                               "window holds the traffic that matters.")]
    return []


def recommend(d: MountDiagnosis, env: Environment) -> tuple[Recommendation, ...]:
    """Numbered-list order: the attribution's fixes first, then packet-loss fixes when lost
    RPCs were found alongside."""
    recs = _for_finding(d.findings[0], d, env)
    for f in d.findings[1:]:
        if f.mechanism in ("retransmissions", "delay-replies"):
            recs += _for_finding(f, d, env)
    if not d.per_op:
        recs.append(_full_capture(d))
    out: list[Recommendation] = []
    for r in recs:
        if r is not None and r.action not in {x.action for x in out}:
            out.append(r)
    return tuple(out)
