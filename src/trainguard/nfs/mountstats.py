"""Parse ``/proc/self/mountstats`` (NFS client statistics) into frozen records.

The file lists every mount; NFS mounts (``fstype nfs``/``nfs4`` with ``statvers=``) carry a block
of counters, all cumulative since the mount::

    device srv:/export mounted on /mnt with fstype nfs statvers=1.1
        opts:   rw,vers=3,rsize=1048576,wsize=1048576,...,proto=tcp,nconnect=8,...
        age:    86400
        events: 27 counters (NFSIOS_*: revalidations, ..., delay, pnfs read/write)
        bytes:  8 counters (normal/direct read/write, server read/write, pages)
        RPC iostats version: 1.1  p/v: 100003/3 (nfs)
        xprt:   tcp srcport bind connect connect_time idle sends recvs bad_xids req_u bklog_u
                    max_slots sending_u pending_u               (one line per connection)
        per-op statistics
                WRITE: ops trans timeouts bytes_sent bytes_recv queue_ms rtt_ms execute_ms [errors]

Field positions follow the kernel (``net/sunrpc/xprtsock.c`` ``xs_*_print_stats``,
``net/sunrpc/stats.c`` ``rpc_count_iostats_metrics``). Non-NFS mounts are counted and skipped.
Malformed or truncated input raises one `TelemetryError` naming the line, except a block that
stops after its ``xprt:`` lines (a common partial paste): it is kept with ``per_op=False``
(the diagnosis says so), since the transport counters alone show RPC-slot saturation.

    >>> snap = parse_mountstats(open("/proc/self/mountstats").read())   # doctest: +SKIP
    >>> snap.mounts[0].op("WRITE").queue_ms                             # doctest: +SKIP
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from trainguard.errors import TelemetryError
from trainguard.nfs.paths import unescape_path

__all__ = [
    "EVENT_DELAY",
    "KNOWN_NFS_VERSIONS",
    "MAX_LINE_CHARS",
    "MountstatsSnapshot",
    "NfsMount",
    "OpStats",
    "Xprt",
    "parse_mountstats",
]

log = logging.getLogger(__name__)

KNOWN_NFS_VERSIONS = ("2", "3", "4", "4.0", "4.1", "4.2")
"""``vers=`` values this parser accepts (``4`` alone is NFSv4 with an unknown minor version)."""

EVENT_DELAY = 24
"""Index of NFSIOS_DELAY in ``events:``: replies NFS3ERR_JUKEBOX / NFS4ERR_DELAY ("try later")."""

MAX_LINE_CHARS = 65536
"""The longest line accepted. The kernel's longest is the ``device`` line: a device name and a
mount path (each at most PATH_MAX, 4096 bytes, up to 4x that once octal-escaped); a longer line
means the input is not mountstats, and is refused rather than matched."""

_NFS_FSTYPES = frozenset({"nfs", "nfs4"})
# The kernel octal-escapes whitespace in the device name and mount path (see `unescape_path`),
# so each is one \S+ run: unlike a lazy ".+?", that keeps matching a long line linear.
_DEVICE = re.compile(
    r"^\s*device\s+(?P<dev>\S+)\s+mounted on\s+(?P<mnt>\S+)\s+with fstype\s+(?P<fs>\S+)"
    r"(?:\s+statvers=(?P<sv>\S+))?\s*$")
# show_vfsstat prints "no device mounted on ..." for a mount without a device name.
_NO_DEVICE = re.compile(r"^\s*no device\s+mounted on\s+\S+\s+with fstype\s+\S+")
_OP = re.compile(r"^\s*(?P<name>[A-Z][A-Z0-9_]*|\d+):\s*(?P<rest>.*)$")
_STATVERS = re.compile(r"^\d+\.\d+$")
# Fields after the protocol name, by protocol: (statvers 1.0 count, 1.1 count, names).
_XPRT_FIELDS: dict[str, tuple[int, int, tuple[str, ...]]] = {
    "tcp": (10, 13, ("srcport", "bind_count", "connect_count", "connect_time", "idle_time_s",
                     "sends", "recvs", "bad_xids", "req_u", "bklog_u", "max_slots", "sending_u",
                     "pending_u")),
    "udp": (7, 10, ("srcport", "bind_count", "sends", "recvs", "bad_xids", "req_u", "bklog_u",
                    "max_slots", "sending_u", "pending_u")),
    "local": (9, 12, ("bind_count", "connect_count", "connect_time", "idle_time_s", "sends",
                      "recvs", "bad_xids", "req_u", "bklog_u", "max_slots", "sending_u",
                      "pending_u")),
    # RDMA: the ten common fields, then transport-specific ones (chunks, MRs, ...), kept raw.
    "rdma": (10, 10, ("srcport", "bind_count", "connect_count", "connect_time", "idle_time_s",
                      "sends", "recvs", "bad_xids", "req_u", "bklog_u")),
}
_OP_COUNTERS = 8
# NFSv2 and v3 print a fixed procedure list; its last entry closes a complete per-op section.
# (NFSv4's list grows with the kernel, so no such check is possible for it.)
_LAST_OP = {"2": ("STATFS", 18), "3": ("COMMIT", 22)}


@dataclass(frozen=True, slots=True)
class OpStats:
    """One ``per-op statistics`` line: counters cumulative since mount (or a delta of two).

    Times are summed milliseconds over all `ops`: queue = task creation to transmission (waiting
    for an RPC slot, a session slot or the socket), rtt = transmission to reply, execute = task
    creation to completion.
    """

    name: str
    ops: int
    trans: int
    """Transmissions; above `ops` when requests were retransmitted."""
    timeouts: int
    """Major timeouts ("server not responding")."""
    bytes_sent: int
    bytes_recv: int
    queue_ms: int
    rtt_ms: int
    execute_ms: int
    errors: int | None = None
    """Replies with an error status (9th field, kernels from 2018 on); None when absent."""


@dataclass(frozen=True, slots=True)
class Xprt:
    """One ``xprt:`` line: one RPC transport connection (``nconnect=N`` gives N of them).

    ``req_u``, ``bklog_u``, ``sending_u`` and ``pending_u`` are sums sampled at every send, so
    divided by ``sends`` they are the average requests outstanding, waiting for a slot (backlog),
    waiting to transmit, and waiting for a reply. ``max_slots`` is the most slots ever in use.
    """

    proto: str
    sends: int
    recvs: int
    bad_xids: int
    req_u: int
    bklog_u: int
    srcport: int | None = None
    bind_count: int | None = None
    connect_count: int | None = None
    connect_time: int | None = None
    idle_time_s: int | None = None
    max_slots: int | None = None
    """None for statvers 1.0 lines and for RDMA (which has no such field)."""
    sending_u: int | None = None
    pending_u: int | None = None
    extra: tuple[int, ...] = ()
    """Transport-specific trailing fields (RDMA chunk/MR counters), raw."""
    line: int = 0


@dataclass(frozen=True, slots=True)
class NfsMount:
    """One NFS mount's block.

        >>> m = parse_mountstats(SAMPLE).mounts[0]                        # doctest: +SKIP
        >>> (m.mountpoint, m.nfs_version, m.nconnect, m.op("WRITE").ops)  # doctest: +SKIP
        ('/mnt', '3', 1, 12)
    """

    device: str
    mountpoint: str
    fstype: str
    statvers: str
    nfs_version: str
    """One of `KNOWN_NFS_VERSIONS`."""
    opts: tuple[tuple[str, str], ...]
    """``opts:`` as (key, value) pairs in order; flags have an empty value."""
    age_s: int | None
    bytes: tuple[int, ...]
    events: tuple[int, ...]
    rpc_iostats_version: str | None
    xprts: tuple[Xprt, ...]
    ops: tuple[OpStats, ...]
    line: int
    """Line of the ``device`` header (1-based)."""
    per_op: bool = True
    """False when the block has ``xprt:`` lines but no (or an empty) ``per-op statistics``
    section, as in a partial paste: `ops` is empty and only the transport can be judged."""

    def option(self, key: str) -> str | None:
        """The value of mount option `key` (``""`` for a flag), None when absent."""
        for k, v in self.opts:
            if k == key:
                return v
        return None

    def op(self, name: str) -> OpStats | None:
        for op in self.ops:
            if op.name == name:
                return op
        return None

    @property
    def nconnect(self) -> int:
        value = self.option("nconnect")
        return int(value) if value and value.isdigit() else 1

    @property
    def proto(self) -> str:
        value = self.option("proto")
        if value:
            return value
        return self.xprts[0].proto if self.xprts else "unknown"

    def size_option(self, key: str) -> int | None:
        """``wsize`` / ``rsize`` in bytes, None when absent."""
        value = self.option(key)
        return int(value) if value and value.isdigit() else None

    @property
    def key(self) -> tuple[str, str]:
        return (self.device, self.mountpoint)


@dataclass(frozen=True, slots=True)
class MountstatsSnapshot:
    """Every NFS mount of one read of a mountstats file."""

    mounts: tuple[NfsMount, ...]
    non_nfs: int
    """Mounts that are not NFS (skipped)."""
    source: str
    notes: tuple[str, ...] = ()


def _fail(source: str, line: int, what: str) -> TelemetryError:
    return TelemetryError(f"{source}:{line}: {what}")


def _ints(tokens: list[str], source: str, line: int, what: str) -> list[int]:
    out: list[int] = []
    for tok in tokens:
        if not tok.isdigit():
            raise _fail(source, line, f"{what}: {tok!r} is not a counter (a non-negative "
                                      "integer); not a /proc/self/mountstats capture?")
        out.append(int(tok))
    return out


def _parse_opts(text: str) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for item in text.strip().rstrip(",").split(","):
        item = item.strip()
        if not item:
            continue
        key, _, value = item.partition("=")
        pairs.append((key, value))
    return tuple(pairs)


def _parse_xprt(rest: str, statvers: str, source: str, line: int) -> Xprt:
    tokens = rest.split()
    if not tokens:
        raise _fail(source, line, "xprt: line has no transport name (truncated?)")
    proto, fields = tokens[0], tokens[1:]
    if proto not in _XPRT_FIELDS:
        raise _fail(source, line, f"xprt: unknown transport {proto!r} (expected tcp, udp, rdma "
                                  "or local)")
    short, full, names = _XPRT_FIELDS[proto]
    values = _ints(fields, source, line, f"xprt: {proto}")
    # statvers=1.1 added max_slots, sending_u and pending_u to the socket transports (as the
    # Prometheus procfs parser also requires); RDMA prints the ten common fields, then its own.
    if proto == "rdma":
        expected: tuple[int, ...] = (full,)
        ok = len(values) >= full
    else:
        expected = (short,) if statvers == "1.0" else (full,) if statvers == "1.1" else (short,
                                                                                       full)
        ok = len(values) in expected
    if not ok:
        want = (f"at least {full}" if proto == "rdma"
                else " or ".join(str(n) for n in expected)
                + (f" for statvers={statvers}" if statvers in ("1.0", "1.1") else ""))
        raise _fail(source, line, f"xprt: {proto} line has {len(values)} fields, expected "
                                  f"{want} (truncated?)")
    n = min(len(values), len(names))
    named = dict(zip(names[:n], values[:n], strict=True))
    return Xprt(proto=proto, sends=named["sends"], recvs=named["recvs"],
                bad_xids=named["bad_xids"], req_u=named["req_u"], bklog_u=named["bklog_u"],
                srcport=named.get("srcport"), bind_count=named.get("bind_count"),
                connect_count=named.get("connect_count"), connect_time=named.get("connect_time"),
                idle_time_s=named.get("idle_time_s"), max_slots=named.get("max_slots"),
                sending_u=named.get("sending_u"), pending_u=named.get("pending_u"),
                extra=tuple(values[len(names):]), line=line)


def _parse_op(name: str, rest: str, source: str, line: int) -> tuple[OpStats, int]:
    """The op and how many counters its line had (8, or 9 with the error count)."""
    values = _ints(rest.split(), source, line, f"per-op line {name!r}")
    if len(values) < _OP_COUNTERS:
        raise _fail(source, line, f"per-op line {name!r} has {len(values)} counters, expected "
                                  f"{_OP_COUNTERS} or {_OP_COUNTERS + 1} (file truncated?)")
    errors = values[_OP_COUNTERS] if len(values) > _OP_COUNTERS else None
    ops, trans, timeouts, sent, recv, queue, rtt, execute = values[:_OP_COUNTERS]
    return (OpStats(name=name, ops=ops, trans=trans, timeouts=timeouts, bytes_sent=sent,
                    bytes_recv=recv, queue_ms=queue, rtt_ms=rtt, execute_ms=execute,
                    errors=errors), len(values))


def _version(opts: tuple[tuple[str, str], ...]) -> str | None:
    """NFS version from ``vers=`` (+ old kernels' separate ``minorversion=``); None if absent.

    The kernel always prints ``vers=`` (``nfs_show_mount_options``); the RPC ``p/v:`` line
    cannot stand in for it, since ``100003/4`` does not say which minor version (and so
    whether session slots bound the mount's concurrency).
    """
    d = dict(opts)
    vers = d.get("vers", d.get("nfsvers"))
    if vers is not None and vers == "4" and d.get("minorversion", "").isdigit():
        return f"4.{d['minorversion']}"
    return vers


@dataclass(slots=True)
class _Block:
    """A mount block being read."""

    device: str
    mountpoint: str
    fstype: str
    statvers: str
    line: int
    opts: tuple[tuple[str, str], ...] = ()
    opts_line: int = 0
    age_s: int | None = None
    bytes_: tuple[int, ...] = ()
    events: tuple[int, ...] = ()
    rpc_version: str | None = None
    per_op_line: int = 0
    last_line: int = 0
    xprts: list[Xprt] | None = None
    ops: list[OpStats] | None = None
    op_width: int = 0
    """Counters per per-op line (all lines of one block print the same number)."""
    op_line: int = 0
    """Line of the last per-op line."""

    @property
    def name(self) -> str:
        return f"NFS mount {self.mountpoint} ({self.device})"

    def add_op(self, ops: list[OpStats], op: OpStats, width: int, source: str,
               line: int) -> None:
        if self.op_width and width != self.op_width:
            raise _fail(source, line, f"per-op line {op.name!r} has {width} counters where the "
                                      f"lines above have {self.op_width} (line cut short?)")
        self.op_width = width
        self.op_line = line
        ops.append(op)

    def add_xprt(self, xprt: Xprt, source: str) -> None:
        if self.xprts is None:
            self.xprts = []
        if self.xprts and (len(xprt.extra), xprt.proto) != (len(self.xprts[0].extra),
                                                             self.xprts[0].proto):
            raise _fail(source, xprt.line, f"xprt: line does not match the connection above it "
                                           f"(line {self.xprts[0].line}): truncated?")
        self.xprts.append(xprt)

    def finish(self, source: str, at_eof: bool) -> NfsMount:
        name = self.name
        # A partial paste often stops after the xprt: lines: their slot and backlog sums are
        # the saturation signal, so such a block is kept (per_op=False) rather than refused.
        if not self.per_op_line and not self.xprts:
            raise _fail(source, self.line, f"{name} has neither 'xprt:' lines nor a 'per-op "
                                           f"statistics' section (its block ends at line "
                                           f"{self.last_line}): the capture is truncated or not "
                                           "from /proc/self/mountstats")
        if self.per_op_line and not self.ops and not self.xprts:
            raise _fail(source, self.per_op_line, f"{name}: the 'per-op statistics' section is "
                                                  "empty (file truncated?)")
        if not self.opts_line:
            raise _fail(source, self.line, f"{name} has no 'opts:' line, so its NFS version is "
                                           "unknown (edited or damaged capture?)")
        version = _version(self.opts)
        if version is None:
            raise _fail(source, self.opts_line, f"{name}: unknown NFS version: its opts: line "
                                                "has no vers= (the kernel always prints it; "
                                                "edited capture?)")
        if version not in KNOWN_NFS_VERSIONS:
            raise _fail(source, self.opts_line, f"{name}: unknown NFS version vers={version} "
                                                "(this tool reads NFSv2, v3 and v4.0-4.2)")
        last = _LAST_OP.get(version)
        if at_eof and last is not None and self.ops and self.ops[-1].name != last[0]:
            # Only the last block of a file can have been cut off; a block followed by another
            # mount was trimmed by hand, which is allowed.
            raise _fail(source, self.op_line, f"{name}: the per-op statistics stop after "
                                              f"{self.ops[-1].name} at the end of the file, but "
                                              f"NFSv{version} lists {last[1]} operations ending "
                                              f"with {last[0]}: the file is truncated")
        nconnect = dict(self.opts).get("nconnect")
        if nconnect is not None and (not nconnect.isdigit() or int(nconnect) < 1):
            raise _fail(source, self.opts_line, f"{name}: nconnect={nconnect!r} is not a "
                                                "positive integer")
        return NfsMount(device=self.device, mountpoint=self.mountpoint, fstype=self.fstype,
                        statvers=self.statvers, nfs_version=version, opts=self.opts,
                        age_s=self.age_s, bytes=self.bytes_, events=self.events,
                        rpc_iostats_version=self.rpc_version, xprts=tuple(self.xprts or ()),
                        ops=tuple(self.ops or ()), line=self.line, per_op=bool(self.ops))


def _header(line: str, source: str, lineno: int) -> re.Match[str] | None:
    """The ``device ... mounted on ...`` match; None for any other line."""
    head = _DEVICE.match(line)
    if head is None and line.lstrip().startswith("device "):
        raise _fail(source, lineno, "malformed 'device ... mounted on ... with fstype ...' line "
                                    "(truncated?)")
    return head


def _block_line(block: _Block, line: str, source: str, lineno: int) -> None:
    """One line inside an NFS mount's block."""
    stripped = line.strip()
    key, _, rest = stripped.partition(":")
    ops = block.ops
    if ops is not None:
        # Inside the per-op section every line is "NAME: counters" until the next mount.
        op = _OP.match(line)
        if op is None:
            raise _fail(source, lineno, f"{block.name}: {stripped[:40]!r} is not a per-op "
                                        "line ('NAME: counters'): the file is truncated or "
                                        "damaged")
        parsed, width = _parse_op(op["name"], op["rest"], source, lineno)
        block.add_op(ops, parsed, width, source, lineno)
        return
    if key == "opts":
        block.opts, block.opts_line = _parse_opts(rest), lineno
    elif key == "age":
        tokens = rest.split()
        if not tokens or not tokens[0].isdigit():
            raise _fail(source, lineno, "age: expected seconds since mount")
        block.age_s = int(tokens[0])
    elif key == "bytes":
        values = _ints(rest.split(), source, lineno, "bytes:")
        if len(values) < 8:
            raise _fail(source, lineno, f"bytes: has {len(values)} counters, expected 8 "
                                        "(truncated?)")
        block.bytes_ = tuple(values[:8])
    elif key == "events":
        values = _ints(rest.split(), source, lineno, "events:")
        if not values:
            raise _fail(source, lineno, "events: has no counters (truncated?)")
        block.events = tuple(values)
    elif key == "xprt":
        block.add_xprt(_parse_xprt(rest, block.statvers, source, lineno), source)
    elif stripped.startswith("RPC iostats version"):
        parts = stripped.split()
        block.rpc_version = parts[3] if len(parts) > 3 else None
    elif stripped.startswith("per-op statistics"):
        block.per_op_line = lineno
        block.ops = []
    elif _OP.match(line) and rest.split() and all(t.isdigit() for t in rest.split()):
        # Counters under an op name before the section header: a hand-trimmed capture.
        raise _fail(source, lineno, f"per-op line {key!r} before the 'per-op statistics' "
                                    "header")
    else:
        # caps:, sec:, nfsv4:, impl_id: (whose server name may wrap), fsc:, ... carry nothing
        # the diagnosis uses.
        log.debug("%s:%d: ignored %r", source, lineno, stripped[:40])


def parse_mountstats(text: str, source: str = "mountstats") -> MountstatsSnapshot:
    """Parse one read of a mountstats file; `source` names it in error messages.

    Raises `TelemetryError` (one line: ``source:line: what``) for an empty, malformed or
    truncated file, an unknown NFS version, or text with no ``device`` line at all.
    """
    if not text.strip():
        raise _fail(source, 1, "the file is empty: not a /proc/self/mountstats capture")
    mounts: list[NfsMount] = []
    notes: list[str] = []
    non_nfs = 0
    devices = 0
    block: _Block | None = None
    in_other = False  # inside a non-NFS (or stat-less) block: its lines are skipped

    lines = text.splitlines()
    for lineno, raw in enumerate(lines, start=1):
        if len(raw) > MAX_LINE_CHARS:
            raise _fail(source, lineno, f"line of {len(raw):,} characters (mountstats lines "
                                        f"are at most {MAX_LINE_CHARS:,}): not a "
                                        "/proc/self/mountstats capture")
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if _NO_DEVICE.match(line):
            if block is not None:
                mounts.append(block.finish(source, at_eof=False))
                block = None
            devices += 1
            non_nfs += 1
            in_other = True
            continue
        head = _header(line, source, lineno)
        if head is not None:
            if block is not None:
                mounts.append(block.finish(source, at_eof=False))
                block = None
            devices += 1
            fstype, statvers = head["fs"], head["sv"]
            device, mountpoint = unescape_path(head["dev"]), unescape_path(head["mnt"])
            if fstype not in _NFS_FSTYPES or statvers is None:
                non_nfs += 1
                in_other = True
                if fstype in _NFS_FSTYPES:
                    notes.append(f"{mountpoint}: NFS mount without statistics (no statvers=), "
                                 "skipped")
                continue
            if not _STATVERS.match(statvers):
                raise _fail(source, lineno, f"unknown statvers={statvers!r} (expected a "
                                            "version like 1.1)")
            in_other = False
            block = _Block(device=device, mountpoint=mountpoint, fstype=fstype,
                           statvers=statvers, line=lineno, last_line=lineno)
            continue
        if block is None:
            if not in_other:
                log.debug("%s:%d: line outside any mount block ignored", source, lineno)
            continue
        block.last_line = lineno
        _block_line(block, line, source, lineno)
    if block is not None:
        mounts.append(block.finish(source, at_eof=True))
        if not text.endswith("\n"):
            # /proc always ends with a newline; a file cut inside a number still parses.
            notes.append(f"{source} ends without a newline inside the statistics of "
                         f"{block.mountpoint}: if the file was cut, the last value (line "
                         f"{block.last_line}) may be short")
    if devices == 0:
        first = next((i for i, ln in enumerate(lines, start=1) if ln.strip()), 1)
        raise _fail(source, first, "no 'device ... mounted on ...' line: not a "
                                   "/proc/self/mountstats capture (wrong file?)")
    return MountstatsSnapshot(mounts=tuple(mounts), non_nfs=non_nfs, source=source,
                              notes=tuple(notes))
