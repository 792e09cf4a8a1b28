"""`trainguard nfs`: NFS client diagnosis from mountstats."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from trainguard.cli.console import err, fail, out, stderr_is_tty, warn
from trainguard.cli.options import duration_option
from trainguard.errors import TrainguardError
from trainguard.nfs import (
    DATA_OPS,
    Attribution,
    Environment,
    MountDiagnosis,
    MountstatsSnapshot,
    MountWindow,
    TransportGroup,
    cumulative,
    diagnose,
    diff,
    parse_mountstats,
    shared_transports,
    transport_groups,
)
from trainguard.nfs.source import (
    LIVE_MOUNTSTATS,
    environment,
    is_live,
    read_mountstats,
    sample_twice,
)
from trainguard.textsafe import terminal_safe

app = typer.Typer(help="Diagnose the NFS client path (mountstats).", no_args_is_help=True)

EXIT_NO_NFS = 2
"""Exit status when the input holds no NFS mount (nothing to diagnose): an input error."""
_DEFAULT_INTERVAL_S = 5.0
_MAX_OTHER_OPS = 6
_STYLE = {Attribution.CLIENT_QUEUE: "bold red", Attribution.NETWORK: "bold red",
          Attribution.SERVER: "bold red", Attribution.CLIENT_OTHER: "bold red",
          Attribution.UNDERUTILIZED: "bold yellow", Attribution.HEALTHY: "bold green",
          Attribution.IDLE: "dim", Attribution.UNDETERMINED: "bold yellow"}


@app.callback()
def _nfs() -> None:
    """Diagnose the NFS client path (mountstats)."""


def _clock() -> float:
    """The clock the two live reads are timed with (tests replace it, and `_wait`)."""
    return time.monotonic()


def _wait(seconds: float) -> None:
    """Sleep, with a countdown on stderr when it is a terminal."""
    if not stderr_is_tty():
        time.sleep(seconds)
        return
    with Progress(TextColumn("[bold]sampling mountstats[/]"), BarColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as bar:
        task = bar.add_task("wait", total=seconds)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(0.1, left))
            bar.update(task, completed=seconds - max(end - time.monotonic(), 0.0))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _num(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def _safe(text: str) -> str:
    """Text from the input (mount paths, device names) for Rich markup on a terminal."""
    return escape(terminal_safe(text))


def _wanted(mount: str) -> str:
    return mount.rstrip("/") or "/"


def _require_nfs(snap: MountstatsSnapshot, what: str, mount: str | None) -> None:
    """Refuse input with nothing to diagnose (no NFS mount, or not the --mount asked for):
    checked on the first read, before any wait."""
    points = sorted({m.mountpoint for m in snap.mounts})
    if not points:
        fail(f"no NFS mount in {what} ({snap.non_nfs} other mounts): nothing to diagnose", 2)
    if mount is not None and _wanted(mount) not in points:
        fail(f"no NFS mount at {mount} in {what} (NFS mounts: {', '.join(points)})", 2)


def _windows(paths: list[Path], interval: float | None,
             mount: str | None = None) -> tuple[list[MountWindow], list[str], str, bool, int]:
    """(windows, notes, what was read, live?, non-NFS mounts skipped)."""
    if len(paths) > 2:
        fail("give --mountstats once (one capture: since mount; a /proc path: sampled twice) "
             "or twice (before, after)", 2)
    live = not paths or (len(paths) == 1 and is_live(paths[0]))
    if live:
        path = paths[0] if paths else LIVE_MOUNTSTATS
        seconds = _DEFAULT_INTERVAL_S if interval is None else interval
        if seconds <= 0:
            snap = parse_mountstats(read_mountstats(path), str(path))
            _require_nfs(snap, str(path), mount)
            return ([cumulative(m) for m in snap.mounts], list(snap.notes), str(path), True,
                    snap.non_nfs)

        def check(text: str) -> None:
            _require_nfs(parse_mountstats(text, f"{path} (first read)"), str(path), mount)

        sample = sample_twice(path, seconds, wait=_wait, clock=_clock, check=check)
        before = parse_mountstats(sample.before, f"{path} (first read)")
        after = parse_mountstats(sample.after, f"{path} (second read)")
        _require_nfs(after, f"{path} (second read)", mount)
        ws = diff(before, after, interval_s=sample.interval_s)
        return (list(ws.windows), [*after.notes, *ws.notes],
                f"{path}, sampled {sample.interval_s:.1f} s apart", True, after.non_nfs)
    if len(paths) == 1:
        if interval is not None:
            warn("--interval is ignored for one capture file: its counters are since mount")
        snap = parse_mountstats(read_mountstats(paths[0]), str(paths[0]))
        _require_nfs(snap, str(paths[0]), mount)
        return ([cumulative(m) for m in snap.mounts], list(snap.notes), str(paths[0]), False,
                snap.non_nfs)
    before = parse_mountstats(read_mountstats(paths[0]), str(paths[0]))
    after = parse_mountstats(read_mountstats(paths[1]), str(paths[1]))
    _require_nfs(after, str(paths[1]), mount)
    ws = diff(before, after, interval_s=interval)
    return (list(ws.windows), [*after.notes, *ws.notes], f"{paths[0]} -> {paths[1]}", False,
            after.non_nfs)


def _print_transport(d: MountDiagnosis, env: Environment) -> None:
    tr = d.transport
    if tr is None:
        return
    limit = (f"limit {env.slot_limit} ({_safe(env.slot_limit_source)})"
             if env.slot_limit is not None else "slot limit unknown")
    out.print(f"  transport: {tr.connections} x {tr.proto}; per send on average "
              f"{_num(tr.inflight)} in flight, {_num(tr.backlog)} waiting for a slot, "
              f"{_num(tr.sending)} waiting to transmit; max slots {tr.max_slots or '-'} "
              f"({limit})")
    if tr.connections > 1:
        conns = Table(show_header=True, box=None, padding=(0, 2))
        for col in ("conn", "sends", "in flight", "backlog", "to transmit", "max slots"):
            conns.add_column(col, justify="right")
        for c in tr.per_conn:
            conns.add_row(str(c.index), f"{c.sends:,}", _num(c.inflight), _num(c.backlog),
                          _num(c.sending), str(c.max_slots or "-"))
        out.print(conns)


def _print_shared(d: MountDiagnosis, env: Environment, group: TransportGroup | None,
                  first: bool) -> None:
    """The transport once per group: under its first mount; the others point there."""
    if group is None or first:
        _print_transport(d, env)
    else:
        others = len(group.members) - 2
        more = f" and {others} other mount(s)" if others else ""
        out.print(f"  transport: shared with {_safe(group.mountpoints[0])}{more} (transport "
                  f"group {group.number}): its counters are shown under "
                  f"{_safe(group.mountpoints[0])}")


def _print_groups(groups: tuple[TransportGroup, ...]) -> None:
    """Each shared transport's mounts, listed once (the report stays linear in the mounts)."""
    for g in groups:
        out.print(f"transport group {g.number}: {len(g.members)} mounts share one transport "
                  f"(counters under {_safe(g.mountpoints[0])}): "
                  + ", ".join(_safe(mp) for mp in g.mountpoints))


def _print_mount(d: MountDiagnosis, env: Environment, group: TransportGroup | None = None,
                 first: bool = True) -> None:
    rate = d.basis == "interval" and d.duration_s is not None
    sizes = " ".join(f"{k}={v}" for k, v in (("wsize", d.wsize), ("rsize", d.rsize)) if v)
    basis = (f"interval {_duration(d.duration_s)}" if d.basis == "interval"
             else f"since mount (age {_duration(d.duration_s)})")
    if d.reset:
        basis += ", counters reset between samples"
    table = Table(title=f"[bold]{_safe(d.mountpoint)}[/]  {_safe(d.device)}  "
                        f"NFSv{d.nfs_version} {d.proto} nconnect={d.nconnect} {sizes}  "
                        f"[dim]({basis})[/]", title_justify="left")
    for col, right in (("op", False), ("ops/s" if rate else "calls", True),
                       ("MB/s" if rate else "MB", True), ("KB/op", True), ("queue ms", True),
                       ("RTT ms", True), ("exec ms", True), ("queue %", True),
                       ("retrans", True)):
        table.add_column(col, justify="right" if right else "left")
    others = [s for s in d.ops if s.name not in DATA_OPS and s.ops > 0]
    shown = [s for s in d.ops if s.name in DATA_OPS] + others[:_MAX_OTHER_OPS]
    if not d.per_op:
        table.add_row("(missing)", *["-"] * 8)
    for s in shown:
        volume = (s.mb_per_s if rate else s.payload_bytes / 1e6)
        table.add_row(s.name, _num(s.ops_per_s, 1) if rate else f"{s.ops:,}", _num(volume),
                      _num(s.kb_per_op, 1), _num(s.queue_ms), _num(s.rtt_ms),
                      _num(s.execute_ms),
                      "-" if s.queue_share is None else f"{s.queue_share:.0%}",
                      f"{s.retrans:,}")
    out.print(table)
    if len(others) > _MAX_OTHER_OPS:
        out.print(f"[dim]  (+{len(others) - _MAX_OTHER_OPS} more ops with calls)[/]")
    _print_shared(d, env, group, first)
    if d.link_util is not None and env.link_gbps is not None:
        out.print(f"  link: {d.link_util:.1%} of {env.link_gbps:g} Gbit/s")
    main = d.findings[0]
    out.print(f"  attribution: [{_STYLE[main.category]}]{main.category}[/] "
              f"({main.mechanism}): {_safe(main.summary)}")
    evidence = ", ".join(f"{k}={_num(v) if isinstance(v, float) else v}"
                         for k, v in main.evidence if v is not None)
    if evidence:
        out.print(f"  [dim]evidence: {_safe(evidence)}[/]")
    for f in d.findings[1:]:
        out.print(f"  also: {f.category} ({f.mechanism}): {_safe(f.summary)}")
    for i, r in enumerate(d.recommendations, start=1):
        out.print(f"  {i}. [bold]{_safe(r.action)}[/]")
        if r.command:
            out.print(f"     $ {_safe(r.command)}")
        if r.why:
            out.print(f"     [dim]{_safe(r.why)}[/]")
    for note in d.notes:
        out.print(f"  [dim]note: {_safe(note)}[/]")
    out.print()


def _doc(diags: list[MountDiagnosis], env: Environment, what: str, notes: list[str],
         non_nfs: int, groups: tuple[TransportGroup, ...] = ()) -> dict[str, Any]:
    return {"source": what, "slot_limit": env.slot_limit,
            "slot_limit_source": env.slot_limit_source, "link_gbps": env.link_gbps,
            "non_nfs_mounts_skipped": non_nfs, "notes": notes,
            "transport_groups": [{"group": g.number, "mounts": list(g.mountpoints)}
                                 for g in groups],
            "mounts": [d.to_dict() for d in diags]}


@app.command("diagnose")
def diagnose_cmd(
    mountstats: Annotated[list[Path] | None, typer.Option(
        "--mountstats", help="A mountstats capture (counters since mount), or two captures "
        "(before, after: the difference). A /proc path is sampled twice. Default: "
        "/proc/self/mountstats, sampled twice.")] = None,
    interval: Annotated[float | None, duration_option(
        "--interval", min=0.0, help="Seconds between the two live reads (default 5; 0 = one "
        "read, since mount). With two files: their interval, instead of the age: difference.")]
    = None,
    mount: Annotated[str | None, typer.Option(
        "--mount", help="Only this mount point.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    slot_limit: Annotated[int | None, typer.Option(
        "--slot-limit", min=1, help="RPC slots per connection (sunrpc.tcp_max_slot_table_"
        "entries); default: read from /proc/sys/sunrpc when live, else unknown.")] = None,
    link_gbps: Annotated[float | None, typer.Option(
        "--link-gbps", min=0.001, help="The client's link speed: report utilization and "
        "detect a saturated link (interval only).")] = None,
) -> None:
    """Attribute NFS RPC latency to client queueing (RPC or session slots, the socket), the
    network, the server, or the client after the reply, and recommend fixes.

    A capture without per-op statistics (a partial paste ending after the xprt: lines) is
    judged from its transport counters (RPC-slot saturation), its per-op figures shown as
    missing.

    Exit status: 0 diagnosed; 2 when the input cannot be diagnosed (unreadable or malformed,
    no NFS mount, no such --mount: checked before the live wait) or on a usage error.
    """
    paths = list(mountstats or [])
    try:
        windows, notes, what, live, non_nfs = _windows(paths, interval, mount)
        env = environment(slot_limit, link_gbps, live)
        if mount is not None:
            windows = [w for w in windows if w.mount.mountpoint == _wanted(mount)]
        groups = transport_groups(windows)
        diags = [diagnose(w, env) for w in shared_transports(windows)]
    except TrainguardError as exc:
        fail(str(exc), 2)  # fail() makes it terminal-safe: it may quote mount paths
    if not diags:  # _windows refused input without an NFS mount; kept as a guard
        fail(f"no NFS mount in {what} ({non_nfs} other mounts): nothing to diagnose", EXIT_NO_NFS)
    if json_out:
        # Plain json.dumps: Rich's print_json re-lexes the document, slow for thousands of mounts.
        typer.echo(json.dumps(_doc(diags, env, what, notes, non_nfs, groups), indent=2,
                              ensure_ascii=False))
        return
    err.print(f"{len(diags)} NFS mount(s) from {_safe(what)}; {non_nfs} non-NFS skipped")
    for note in notes:
        warn(terminal_safe(note))
    of = {i: g for g in groups for i in g.members}
    for i, d in enumerate(diags):
        g = of.get(i)
        _print_mount(d, env, g, g is None or g.members[0] == i)
    _print_groups(groups)


__all__ = ["EXIT_NO_NFS", "app", "diagnose_cmd"]
