"""`trainguard ckpt analyze`: checkpoint saves and loads in NFS telemetry, with link utilization."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trainguard.ckpt import analyze as analysis
from trainguard.ckpt.analyze import AnalyzeConfig, CheckpointAnalysis, Phase
from trainguard.ckpt.phases import PhaseConfig
from trainguard.cli.console import err, fail, out
from trainguard.cli.detect import (
    BasicAuth,
    End,
    PromUrl,
    Sources,
    Start,
    Step,
    Token,
    load_telemetry,
)
from trainguard.cli.options import duration_option
from trainguard.errors import ConfigError, TrainguardError

__all__ = ["analyze"]

_DEFAULTS = PhaseConfig()


def _fmt_t(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _fmt_dur(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.1f}min"


def _gbit(bps: float) -> str:
    return f"{8 * bps / 1e9:.2f}"


def _share(p: Phase) -> str:
    s = p.queue_share
    return "-" if s is None else f"{s:.0%}"


def _table(result: CheckpointAnalysis, limit: int) -> Table:
    phases = result.phases
    table = Table(title=f"{len(phases)} checkpoint phases (link {result.link_gbps:g} Gbit/s "
                  "per node)", title_justify="left")
    for col, right in (("#", True), ("kind", False), ("start (UTC)", False), ("duration", True),
                       ("nodes", True), ("GB", True), ("aggregate Gbit/s", True),
                       ("per node Gbit/s mean/peak", True), ("link % mean/peak", True),
                       ("queue share", True)):
        table.add_column(col, justify="right" if right else "left")
    shown = phases if limit == 0 else phases[:limit]
    for i, p in enumerate(shown, 1):
        table.add_row(str(i), p.kind.value, _fmt_t(p.start), _fmt_dur(p.duration_s),
                      str(len(p.nodes)), f"{p.nbytes / 1e9:,.1f}", _gbit(p.mean_bps),
                      f"{_gbit(p.node_mean_bps)} / {_gbit(p.node_peak_bps)}",
                      f"{p.util_mean_pct:.1f} / {p.util_peak_pct:.1f}", _share(p))
    if len(shown) < len(phases):
        table.caption = f"first {len(shown)} of {len(phases)}; --limit 0 shows all"
    return table


def _print(result: CheckpointAnalysis, limit: int) -> None:
    s = result.summary
    span_h = (result.end - result.start) / 3600
    sources = ", ".join(f"{what} from {src}" for what, src in (("saves", result.save_source),
                                                                ("loads", result.load_source))
                        if src is not None)
    out.print(f"{len(result.nodes)} nodes, {span_h:.1f} h at {result.step_s}s; "
              f"{escape(sources)}")
    if result.phases:
        out.print(_table(result, limit))
    else:
        out.print("no checkpoint save or load phases found")
    line = f"{s.saves} saves, {s.loads} loads"
    if s.median_save_s is not None:
        line += f"; median save {_fmt_dur(s.median_save_s)}, {s.save_bytes / 1e9:,.1f} GB saved"
    if s.save_util_min_pct is not None and s.save_util_max_pct is not None:
        line += (f"; saves used {s.save_util_min_pct:.1f}-{s.save_util_max_pct:.1f}% of each "
                 f"node's {result.link_gbps:g} Gbit/s link")
    if s.save_queue_share is not None:
        line += f"; WRITE queue share {s.save_queue_share:.0%}"
    out.print(line)
    hints = dict.fromkeys(p.hint for p in result.phases if p.hint)
    for hint in ([s.hint] if s.hint else list(hints)[:3]):
        out.print(f"hint: {escape(hint)}")


def analyze(
    ctx: typer.Context,
    sources: Sources = None,
    prometheus: PromUrl = None,
    start: Start = None,
    end: End = None,
    step: Step = None,
    bearer_token_file: Token = None,
    basic_auth: BasicAuth = None,
    link_gbps: Annotated[float, typer.Option(
        "--link-gbps", help="Each node's link bandwidth in Gbit/s (utilization is of this).")
    ] = 200.0,
    node: Annotated[list[str] | None, typer.Option(
        "--node", help="Only these nodes (repeatable; shell patterns like 'node0*').")] = None,
    min_duration: Annotated[float, duration_option(
        "--min-duration", help="Drop phases shorter than this many seconds.", min=0)
    ] = _DEFAULTS.min_duration_s,
    min_rate: Annotated[float, typer.Option(
        "--min-rate", help="A burst must exceed a node's baseline by at least this many MB/s.",
        min=0)] = _DEFAULTS.min_rate_bps / 1e6,
    mad_k: Annotated[float, typer.Option(
        "--mad-k", help="... and by this many robust standard deviations (1.4826 x MAD).",
        min=0)] = _DEFAULTS.k_mad,
    max_gap: Annotated[float, duration_option(
        "--max-gap", help="Merge bursts separated by at most this many seconds.", min=0)
    ] = _DEFAULTS.max_gap_s,
    net_device: Annotated[str | None, typer.Option(
        "--net-device", help="Without NFS mountstats counters, use this interface's "
        "node_network_{transmit,receive}_bytes_total (e.g. a storage-only NIC).")] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the phases and the summary as one JSON document (no table).")
    ] = False,
    limit: Annotated[int, typer.Option(help="Rows in the terminal table (0 = all).", min=0)] = 50,
) -> None:
    """Find checkpoint saves and loads in NFS telemetry; their bandwidth and link use.

    Reads node-exporter mountstats byte counters (a `trainguard simulate` directory, metrics
    files, or --prometheus URL --start --end) and lists each save (NFS write burst) and load
    (read burst) with bytes, bandwidth, utilization of --link-gbps per node and, where the
    per-operation timings exist, the share of NFS time spent queued on the client.
    """
    if not sources and not prometheus:
        err.print(ctx.get_usage())
        fail("give telemetry files/directories (e.g. a `trainguard simulate` output), or "
             "--prometheus URL", 2)
    try:
        cfg = AnalyzeConfig(
            link_gbps=link_gbps, net_device=net_device, nodes=tuple(node or ()),
            phases=PhaseConfig(k_mad=mad_k, min_rate_bps=min_rate * 1e6, max_gap_s=max_gap,
                               min_duration_s=min_duration))
    except ConfigError as exc:
        fail(str(exc), 2)
    try:
        tel = load_telemetry(sources, prometheus, start, end, step,
                             analysis.prometheus_selectors(net_device), bearer_token_file,
                             basic_auth)
        result = analysis.analyze(tel, cfg)
    except TrainguardError as exc:
        fail(str(exc))
    if json_out:
        typer.echo(json.dumps(result.to_dict(), indent=2))
        return
    _print(result, limit)
