"""The counters a diagnosis looks at: the difference of two snapshots, or one since mount.

``diff(before, after)`` pairs mounts by (device, mount point, occurrence), subtracts every
counter and takes the interval from the caller's clock or the ``age:`` delta. A mount whose
counters went backwards (remounted, or the host rebooted between captures) falls back to the
second capture's since-mount counters and says so; a mount that appeared in between is taken
whole. ``max_slots`` is a high-water mark, not a counter: the window keeps the later value.

    >>> windows = diff(parse_mountstats(a), parse_mountstats(b), interval_s=5.0)  # doctest: +SKIP
    >>> windows.windows[0].op("WRITE").ops                                       # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from trainguard.errors import TelemetryError
from trainguard.nfs.mountstats import MountstatsSnapshot, NfsMount, OpStats, Xprt

__all__ = [
    "Basis",
    "MountWindow",
    "TransportGroup",
    "WindowSet",
    "cumulative",
    "diff",
    "shared_transports",
    "transport_groups",
]


class Basis(StrEnum):
    """What a window's counters cover."""

    INTERVAL = "interval"
    """The difference of two samples."""
    SINCE_MOUNT = "since-mount"
    """One sample's counters, cumulative since the mount."""


@dataclass(frozen=True, slots=True)
class MountWindow:
    """One mount's counters over a window; `mount` is the later sample (options, high-water
    marks)."""

    mount: NfsMount
    ops: tuple[OpStats, ...]
    xprts: tuple[Xprt, ...]
    events: tuple[int, ...]
    bytes: tuple[int, ...]
    duration_s: float | None
    """Length of the window; None when unknown (two captures of the same second, no age)."""
    basis: Basis
    reset: bool = False
    """Counters went backwards between the samples; these are the later since-mount ones."""
    notes: tuple[str, ...] = ()
    per_op: bool = True
    """False when a sample had no per-op statistics (partial capture): `ops` is empty."""

    def op(self, name: str) -> OpStats | None:
        for op in self.ops:
            if op.name == name:
                return op
        return None


@dataclass(frozen=True, slots=True)
class WindowSet:
    """The windows of every NFS mount, plus what could not be paired."""

    windows: tuple[MountWindow, ...]
    notes: tuple[str, ...] = ()


def cumulative(mount: NfsMount) -> MountWindow:
    """A mount's since-mount counters as a window (duration = ``age:``)."""
    duration = float(mount.age_s) if mount.age_s else None
    return MountWindow(mount=mount, ops=mount.ops, xprts=mount.xprts, events=mount.events,
                       bytes=mount.bytes, duration_s=duration, basis=Basis.SINCE_MOUNT,
                       per_op=mount.per_op)


def _op_delta(a: OpStats, b: OpStats) -> OpStats:
    errors = (b.errors - a.errors) if a.errors is not None and b.errors is not None else None
    # Time sums may step backwards (a kernel that summed a negative interval); the diagnosis
    # drops an op whose time deltas are negative, so they are kept as they are here.
    return OpStats(name=b.name, ops=b.ops - a.ops, trans=b.trans - a.trans,
                   timeouts=b.timeouts - a.timeouts, bytes_sent=b.bytes_sent - a.bytes_sent,
                   bytes_recv=b.bytes_recv - a.bytes_recv, queue_ms=b.queue_ms - a.queue_ms,
                   rtt_ms=b.rtt_ms - a.rtt_ms, execute_ms=b.execute_ms - a.execute_ms,
                   errors=errors)


def _opt_delta(a: int | None, b: int | None) -> int | None:
    return b - a if a is not None and b is not None else None


def _xprt_delta(a: Xprt, b: Xprt) -> Xprt:
    return replace(b, sends=b.sends - a.sends, recvs=b.recvs - a.recvs,
                   bad_xids=b.bad_xids - a.bad_xids, req_u=b.req_u - a.req_u,
                   bklog_u=b.bklog_u - a.bklog_u, sending_u=_opt_delta(a.sending_u, b.sending_u),
                   pending_u=_opt_delta(a.pending_u, b.pending_u),
                   extra=tuple(y - x for x, y in zip(a.extra, b.extra, strict=False)))


def _went_backwards(a: NfsMount, b: NfsMount) -> bool:
    """True when the later sample cannot follow the earlier one (remount, reboot)."""
    if a.age_s is not None and b.age_s is not None and b.age_s < a.age_s:
        return True
    before = {op.name: op for op in a.ops}
    for op in b.ops:
        old = before.get(op.name)
        if old is not None and (op.ops < old.ops or op.trans < old.trans):
            return True
    return any(y.sends < x.sends for x, y in zip(a.xprts, b.xprts, strict=False))


def _window(a: NfsMount, b: NfsMount, interval_s: float | None) -> MountWindow:
    if _went_backwards(a, b):
        return replace(cumulative(b), reset=True, notes=(
            "counters went backwards between the samples (remounted, rebooted, or the captures "
            "given in the wrong order): using the second sample's since-mount counters",))
    notes: list[str] = []
    before = {op.name: op for op in a.ops}
    per_op = a.per_op and b.per_op
    # Without both samples' per-op lines there is no per-op difference to take (one sample's
    # since-mount counters would pass for the interval's).
    ops = (tuple(_op_delta(before[op.name], op) if op.name in before else op for op in b.ops)
           if per_op else ())
    xprts = [_xprt_delta(x, y) for x, y in zip(a.xprts, b.xprts, strict=False)]
    if len(b.xprts) != len(a.xprts):
        notes.append(f"transport connections changed from {len(a.xprts)} to {len(b.xprts)} "
                     "between the samples")
        xprts.extend(b.xprts[len(a.xprts):])  # new connections: all their traffic is new
    events = tuple(y - x for x, y in zip(a.events, b.events, strict=False))
    bytes_ = tuple(y - x for x, y in zip(a.bytes, b.bytes, strict=False))
    duration = interval_s
    if duration is None and a.age_s is not None and b.age_s is not None:
        duration = float(b.age_s - a.age_s) or None
        if duration is None:
            notes.append("both samples have the same age: no interval, so no rates (give "
                         "--interval)")
    return MountWindow(mount=b, ops=ops, xprts=tuple(xprts), events=events, bytes=bytes_,
                       duration_s=duration, basis=Basis.INTERVAL, notes=tuple(notes),
                       per_op=per_op)


def _keyed(snapshot: MountstatsSnapshot) -> dict[tuple[str, str, int], NfsMount]:
    """Mounts by (device, mount point, occurrence): the same export may be mounted twice."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[tuple[str, str, int], NfsMount] = {}
    for m in snapshot.mounts:
        n = seen.get(m.key, 0)
        seen[m.key] = n + 1
        out[(*m.key, n)] = m
    return out


def diff(before: MountstatsSnapshot, after: MountstatsSnapshot,
         interval_s: float | None = None) -> WindowSet:
    """Counter deltas per mount from `before` to `after`.

    `interval_s` is the measured time between the reads (live sampling); without it the
    ``age:`` difference is used (one-second resolution). Raises `TelemetryError` when both
    captures hold NFS mounts but none in common: they are not two samples of one client.
    """
    if interval_s is not None and interval_s <= 0:
        interval_s = None
    old = _keyed(before)
    new = _keyed(after)
    if old and new and not old.keys() & new.keys():
        def names(keys: dict[tuple[str, str, int], NfsMount]) -> str:
            return ", ".join(sorted({k[1] for k in keys}))
        raise TelemetryError(f"{before.source} and {after.source} have no NFS mount in common "
                             f"({names(old)} vs {names(new)}): give two captures of the same "
                             "client, taken a few seconds apart")
    windows: list[MountWindow] = []
    notes: list[str] = []
    for key, mount in new.items():
        prev = old.get(key)
        if prev is None:
            windows.append(replace(cumulative(mount), notes=(
                "mounted between the samples: using its since-mount counters",)))
        else:
            windows.append(_window(prev, mount, interval_s))
    for key in old:
        if key not in new:
            notes.append(f"{key[1]} ({key[0]}) was unmounted between the samples")
    return WindowSet(windows=tuple(windows), notes=tuple(notes))


@dataclass(frozen=True, slots=True)
class TransportGroup:
    """Mounts whose ``xprt:`` lines are identical: one server's client transport(s), shared.

        >>> [(g.number, g.mountpoints) for g in transport_groups(windows)]  # doctest: +SKIP
        [(1, ('/nasbox/music', '/nasbox/newmovies'))]
    """

    number: int
    """1-based, in the order of the group's first mount."""
    members: tuple[int, ...]
    """Positions of the group's windows in the sequence given, first one first."""
    mountpoints: tuple[str, ...]


_NAMED_SHARERS = 3
"""A shared-transport note names the other mounts up to this many, else counts them: with
thousands of mounts on one server, naming every other mount under each one would make the
report quadratic in the input."""


def _transport_key(w: MountWindow) -> tuple[Xprt, ...] | None:
    xprts = tuple(replace(x, line=0) for x in w.mount.xprts)
    return xprts if xprts and sum(x.sends for x in xprts) > 0 else None


def transport_groups(windows: Sequence[MountWindow]) -> tuple[TransportGroup, ...]:
    """The groups of two or more windows that share their transport (see `shared_transports`).

    One pass over the windows: linear in their number, however many share one transport.
    """
    by_key: dict[tuple[Xprt, ...], list[int]] = {}
    for i, w in enumerate(windows):
        k = _transport_key(w)
        if k is not None:
            by_key.setdefault(k, []).append(i)
    shared = [members for members in by_key.values() if len(members) > 1]
    return tuple(TransportGroup(number=n, members=tuple(members),
                                mountpoints=tuple(windows[i].mount.mountpoint for i in members))
                 for n, members in enumerate(shared, start=1))


def shared_transports(windows: Sequence[MountWindow]) -> tuple[MountWindow, ...]:
    """The windows, each noting the other mounts whose ``xprt:`` lines are identical to its own.

    Mounts of one server share the client's RPC transport(s), so their ``xprt:`` counters
    (backlog, queue lengths, max slots) are the same numbers printed under each mount: slot
    evidence then covers the traffic of all of them, while the per-op counters are per mount.
    The note names up to three other mounts; past that it counts them and names the transport
    group (`transport_groups`), which a report lists once.
    """
    out = list(windows)
    for g in transport_groups(windows):
        for i in g.members:
            others = len(g.members) - 1
            if others <= _NAMED_SHARERS:
                who = ", ".join(mp for j, mp in zip(g.members, g.mountpoints, strict=True)
                                if j != i)
                who += " (same server)"
            else:
                who = (f"{others} other mounts of the same server (transport group "
                       f"{g.number})")
            out[i] = replace(out[i], notes=(*out[i].notes, f"transport counters (xprt:) are "
                                            f"shared with {who}: the slot and queue figures "
                                            "cover their traffic too"))
    return tuple(out)
