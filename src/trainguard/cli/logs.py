"""`trainguard logs ...`: classify failure evidence in log files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from trainguard.cli.console import err, fail, out, stderr_is_tty, warn
from trainguard.cli.options import duration_option, year_option
from trainguard.cli.tables import print_table
from trainguard.errors import TrainguardError
from trainguard.evidence import (
    FailureEvent,
    Incident,
    ScanOptions,
    TimeKind,
    correlate,
    load_rules,
    scan_paths,
)
from trainguard.evidence.aggregate import repeats
from trainguard.evidence.clocks import BOOT_TIME_NOTE, boot_time_files
from trainguard.evidence.incidents import DEFAULT_WINDOW_S
from trainguard.evidence.inputs import DEFAULT_MAX_BYTES
from trainguard.textsafe import terminal_safe

app = typer.Typer(help="Classify failure evidence in logs.", no_args_is_help=True)

_PROGRESS_MIN_BYTES = 64 << 20
_SHOWN_SUSPICIOUS = 4
_SHOWN_ALTERNATIVE_LINES = 2


@app.command("classify")
def classify(
    paths: Annotated[list[str], typer.Argument(
        help="Log files, directories (recursive), .gz files, or - for stdin.")],
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per incident.")] = False,
    rules: Annotated[list[Path] | None, typer.Option(
        "--rules", help="Extra signature file (TOML); tried before the built-in rules.")] = None,
    host_from_path: Annotated[bool, typer.Option(
        "--host-from-path", help="Name hosts after the file or its directory "
        "(node17.log, node17/kern.log) when lines carry none.")] = False,
    window: Annotated[float, duration_option(
        help="Time between events that still belong to one incident.", min=1.0)
    ] = DEFAULT_WINDOW_S,
    year: Annotated[int | None, year_option(
        help="Year for timestamps that carry none (syslog, glog); default: file mtime year.",
        min=1970, max=9999)] = None,
    show_all: Annotated[bool, typer.Option(
        "--all", help="Also list informational incidents (benign look-alikes).")] = False,
    limit: Annotated[int, typer.Option(help="Rows in the terminal table (0 = all).", min=0)] = 20,
    db: Annotated[str | None, typer.Option(
        "--db", help="Also record the events (and their hosts) in this store: a SQLite path or "
        "a postgresql:// URL. Without it, or with 'none', nothing is written.")] = None,
    max_gib: Annotated[float, typer.Option(
        "--max-gib", help="Read at most this many GiB from one .gz file (decompressed) or pipe; "
        "the rest is reported as not scanned.", min=1e-6)] = DEFAULT_MAX_BYTES / (1 << 30),
) -> None:
    """Classify failure logs into incidents (root cause, culprit, action), most important first.

    Exit status: 0 when input was read (incidents found or not), 2 when no input could be read
    (missing, unreadable or binary paths) and on usage errors.

    Directories are walked for regular files only (FIFOs, sockets and devices in them are
    skipped with a warning); a pipe named explicitly is read, a device is refused. Repeats of
    one event are folded into one row with a count.

    Lines that no signature explains but that carry failure words (error, fatal, killed,
    lost...) make an "unknown" incident with a low confidence and the lines that made it
    suspicious.

    Plain `dmesg` stamps lines with seconds since boot: such a file gets a warning, its events
    no date (JSON: "time" null, "since_boot_s"), and they join the other files' incident only
    when that is unambiguous (one incident on the wall clock, one on the boot clock).
    """
    try:
        ruleset = load_rules(rules or [])
    except TrainguardError as exc:
        fail(str(exc), 2)
    options = ScanOptions(host_from_path=host_from_path, default_year=year,
                          max_bytes=max(1, int(max_gib * (1 << 30))), merge_gap_s=window,
                          suspicious_lines=True)
    total = sum(Path(p).stat().st_size for p in paths if p != "-" and Path(p).is_file())
    show_progress = stderr_is_tty() and total >= _PROGRESS_MIN_BYTES
    if show_progress:
        with Progress(TextColumn("[bold]scanning[/] {task.fields[file]}"), BarColumn(),
                      DownloadColumn(), TransferSpeedColumn(), console=err,
                      transient=True) as progress:
            task = progress.add_task("scan", total=total, file="")
            events, stats = scan_paths(
                paths, ruleset, options,
                on_file=lambda name, _size: progress.update(task, file=name),
                on_progress=lambda n: progress.advance(task, n))
    else:
        events, stats = scan_paths(paths, ruleset, options)
    for w in stats.warnings:
        warn(terminal_safe(f"{w.path}: {w.message}"))
    for path in boot_time_files(events):
        warn(terminal_safe(f"{path}: {BOOT_TIME_NOTE}"))
    if stats.files_read == 0:
        fail("no input could be read", 2)
    incidents = correlate(events, ruleset, window_s=window, include_info=show_all)
    if db is not None:
        _record(db, events)
    if json_out:
        for inc in incidents:
            out.out(json.dumps(inc.to_dict(), ensure_ascii=False), highlight=False)
        return
    _print_table(incidents, limit)
    mb = stats.bytes_read / 1e6
    rate = mb / stats.seconds if stats.seconds > 0 else 0.0
    folded = f" ({len(events):,} after folding repeats)" if len(events) != stats.events else ""
    err.print(f"{stats.files_read} file(s), {stats.lines_read:,} lines, {mb:,.1f} MB in "
              f"{stats.seconds:.2f}s ({rate:,.0f} MB/s); {stats.events:,} event(s){folded} -> "
              f"{len(incidents)} incident(s)", highlight=False, markup=False)


def _record(db: str, events: list[FailureEvent]) -> None:
    from trainguard.store import Store, wants_no_store

    if wants_no_store(db):  # --db none: nothing recorded
        return
    try:
        last_seen: dict[str, float | None] = {}
        for e in events:
            if e.host:
                t = e.time if e.time_kind is TimeKind.ABSOLUTE else None
                prev = last_seen.get(e.host)
                last_seen[e.host] = t if prev is None else max(prev, t or prev)
        with Store.open(db) as store:
            for host in sorted(last_seen):
                store.upsert_node(host, seen=last_seen[host])
            n = store.add_events(events)
            err.print(f"recorded {n} event(s) in {store.url}", highlight=False)
    except TrainguardError as exc:  # --db unreachable or unwritable
        fail(str(exc), 2)


def _safe(text: str) -> str:
    """Log text for a Rich table cell: no escape sequences, no markup."""
    return escape(terminal_safe(text))


def _print_table(incidents: list[Incident], limit: int) -> None:
    if not incidents:
        out.print("No failure incidents found.")
        return
    table = Table(title="Failure incidents (most important first)", show_lines=True)
    for col in ("#", "category", "action", "sev/conf", "where", "root cause", "related"):
        table.add_column(col, overflow="fold")
    shown = incidents if limit == 0 else incidents[:limit]
    for n, inc in enumerate(shown, 1):
        where = " ".join(x for x in (
            inc.host or "",
            f"gpu {inc.gpu}" if inc.gpu else (f"gpu {inc.gpu_index}"
                                              if inc.gpu_index is not None else ""),
            f"rank {inc.rank}" if inc.rank is not None else "",
        ) if x) or "-"
        ev = inc.root_cause.evidence[0] if inc.root_cause.evidence else None
        # Summaries, hosts and paths come from the logs: no escape sequence may reach the tty.
        root = _safe(inc.root_cause.summary)
        if (times := repeats(inc.root_cause)) > 1:
            root += f" [dim](x{times:,})[/]"
        if inc.suspicious_lines:
            root += "".join(f"\n[dim]{_safe(e.path)}:{e.line_no}:[/] {_safe(e.text[:160])}"
                            for e in inc.suspicious_lines[:_SHOWN_SUSPICIOUS])
            if len(inc.suspicious_lines) > _SHOWN_SUSPICIOUS:
                root += f"\n[dim]... {len(inc.suspicious_lines) - _SHOWN_SUSPICIOUS} more[/]"
        elif ev is not None:
            root += f"\n[dim]{_safe(ev.path)}:{ev.line_no}[/]"
        for alt in inc.alternatives:
            root += f"\n[bold]likely {alt.category.value} {alt.confidence:.2f}[/]" + "".join(
                f"\n  [dim]{_safe(e.path)}:{e.line_no}:[/] {_safe(e.text[:160])}"
                for e in alt.lines[:_SHOWN_ALTERNATIVE_LINES])
        category, action = inc.category.value, inc.action.value
        if (guess := inc.inference.category) is not None:
            category += (f"\n[dim]inferred ({guess.model}) {guess.confidence:.2f}\n"
                         f"(rules: {guess.rule_category.value})[/]")
        if (how := inc.inference.action) is not None:
            action += (f"\n[dim]inferred {how.confidence:.2f}\n(rules: {how.rule_action.value};"
                       f" {', '.join(how.cues) or 'no cue'})[/]")
        table.add_row(str(n), category, action,
                      f"{inc.severity.value}\n{inc.root_cause.confidence:.2f}", _safe(where), root,
                      f"{inc.related_count:,} events, {len(inc.hosts)} hosts, "
                      f"{len(inc.ranks)} ranks")
    print_table(out, table)
    if len(shown) < len(incidents):
        out.print(f"... {len(incidents) - len(shown)} more (use --limit 0 or --json)")
