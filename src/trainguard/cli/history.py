"""`trainguard history ...`: a cluster's own fault record (tickets, repair logs, public traces)
and its Slurm job history into the event store, kept apart from what trainguard observed."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trainguard.cli.console import fail, out, stderr_is_tty, warn
from trainguard.cli.slurm import import_history_cmd
from trainguard.cli.storeopen import open_store
from trainguard.errors import TrainguardError
from trainguard.fleet.events import DAY_S, FleetWindow
from trainguard.history import (
    FieldSpec,
    ImportResult,
    TimeSpec,
    load_mapping,
    parse_origin,
    read_history,
)
from trainguard.history.window import history_window, starting_at_end
from trainguard.store.histories import check_history
from trainguard.textsafe import terminal_safe

app = typer.Typer(
    help="Fault histories: import a cluster's fault record (node fault events from tickets, "
    "repair logs or public traces) or its Slurm job history; list what was imported.",
    no_args_is_help=True)

DbOpt = Annotated[str | None, typer.Option(
    "--db", help="Event store: SQLite path or postgresql:// URL "
    "(default $TRAINGUARD_DB, else ./trainguard.db).")]

_SHOWN_REFUSALS = 20


@app.command("import")
def import_cmd(
    path: Annotated[Path, typer.Argument(
        help="The history file (JSON array, JSON lines or CSV); - reads standard input.",
        show_default=False)],
    fleet_size: Annotated[int | None, typer.Option(
        "--fleet-size", min=1, show_default=False,
        help="Nodes the fleet had over the window, including those that never failed "
        "(a trace lists only nodes with faults, so this is never guessed). Required.")] = None,
    name: Annotated[str | None, typer.Option(
        help="Name to store the history under (default: the file's name).")] = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="auto, json (an array), jsonl or csv.")] = "auto",
    node_field: Annotated[list[str] | None, typer.Option(
        help="Field naming the node (default: node, node_id, host, hostname, server...); "
        "repeat it when several fields name a node together, joined with '/' (LANL: "
        "--node-field System --node-field 'node number' gives 20/15).")] = None,
    time_field: Annotated[str | None, typer.Option(
        help="Field with an event's time, for start/end event streams.")] = None,
    start_field: Annotated[str | None, typer.Option(
        help="Field with a fault's start, for one row per fault.")] = None,
    end_field: Annotated[str | None, typer.Option(
        help="Field with a fault's end (repaired), for one row per fault.")] = None,
    duration_field: Annotated[str | None, typer.Option(
        help="Field with a fault's duration, instead of an end.")] = None,
    event_field: Annotated[str | None, typer.Option(
        help="Field saying whether an event starts or ends a fault.")] = None,
    start_value: Annotated[list[str] | None, typer.Option(
        help="Value of the event field that starts a fault (repeatable).")] = None,
    end_value: Annotated[list[str] | None, typer.Option(
        help="Value of the event field that ends a fault (repeatable).")] = None,
    type_field: Annotated[list[str] | None, typer.Option(
        help="Field(s) with the fault's type, top level first (repeat for a hierarchy: "
        "--type-field Level --type-field Class).")] = None,
    time_unit: Annotated[str | None, typer.Option(
        help="Times are relative, in days, hours, minutes or seconds from --origin "
        "(default: absolute times, ISO 8601 or unix seconds).")] = None,
    origin: Annotated[str | None, typer.Option(
        help="With --time-unit: the instant of time 0 (ISO 8601 date/time or unix seconds). "
        "Without it relative time 0 is the unix epoch and no calendar date is implied.")] = None,
    time_format: Annotated[str | None, typer.Option(
        help="strptime format of absolute times, e.g. '%m/%d/%Y %H:%M'.")] = None,
    epoch_unit: Annotated[str, typer.Option(
        help="What absolute numeric times count since the unix epoch: s, ms, us or ns "
        "(a 13-digit number is in ms: pass --epoch-unit ms).")] = "s",
    tz: Annotated[str | None, typer.Option(
        "--tz", help="Time zone of absolute times written without one (IANA name, e.g. "
        "America/Denver; default UTC).")] = None,
    type_labels: Annotated[bool, typer.Option(
        help="The type fields are one column per category (LANL's Hardware / Software / "
        "Network...): each non-empty one adds 'column / value' to the type.")] = False,
    duration_unit: Annotated[str | None, typer.Option(
        help="Unit of the duration field: s, min, h or d (or the words). Required unless the "
        "field's name says it (duration_min, 'Down Time (minutes)'); a name that says "
        "another unit stops the import.", show_default=False)] = None,
    mapping: Annotated[Path | None, typer.Option(
        "--map", help="TOML file mapping the source's types onto trainguard's failure "
        "taxonomy; unmapped types keep their own top level.", dir_okay=False)] = None,
    window_start: Annotated[str | None, typer.Option(
        help="Start of the span the record covers, in the file's time convention "
        "(default: --origin, else the first event).")] = None,
    window_end: Annotated[str | None, typer.Option(
        help="End of the span the record covers (default: the last event).")] = None,
    replace: Annotated[bool, typer.Option(
        help="Replace a stored history of the same name.")] = False,
    strict: Annotated[bool, typer.Option(
        help="Store nothing if any record is refused (exit 1).")] = False,
    dry_run: Annotated[bool, typer.Option(
        help="Read and check the file, print the counts; store nothing.")] = False,
    db: DbOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Import a node fault history: start/end events or one row per fault, with a node, times
    and a type (hierarchical types kept as given, e.g. 'Hardware Failure / GPU / GPU DBE').

    Records that cannot be used (an end without a start, overlapping faults of one node and
    type, times going backwards, unparseable fields) are refused with their line; the others
    are stored. Counts of what was read, merged and refused are always printed.
    """
    if fleet_size is None:
        fail("--fleet-size is required: how many nodes the fleet had, including those that "
             "never failed (the trace cannot tell)")
    started = time.perf_counter()
    text, source = _read_source(path)
    try:
        mapped = load_mapping(mapping) if mapping is not None else None
        times = TimeSpec(unit=time_unit, origin=parse_origin(origin, tz) if origin else None,
                         time_format=time_format, duration_unit=duration_unit, tz=tz,
                         epoch_unit=epoch_unit)
        fields = FieldSpec(node=tuple(node_field or ()), time=time_field, start=start_field,
                           end=end_field, duration=duration_field, event=event_field,
                           start_values=tuple(start_value or ()),
                           end_values=tuple(end_value or ()),
                           type_fields=tuple(type_field or ()), type_labels=type_labels)
        result = read_history(text, fmt=fmt, fields=fields, times=times, mapping=mapped,
                              source=source)
        if not result.faults and result.refused:
            first = result.refused[0]
            fail(f"{source}: no usable fault: all {len(result.refused)} record(s) refused; the "
                 f"first, line {first.line}: {first.reason}")
        window = history_window(result.first_time, result.last_time, times,
                                fleet_size=fleet_size,
                                start=window_start, end=window_end)
    except TrainguardError as exc:
        fail(str(exc))
    stored_name = name or (path.name if str(path) != "-" else "stdin")
    _check_storable(result, stored_name, fleet_size, window, times)
    refused = bool(result.refused)
    history_id: int | None = None
    url: str | None = None
    if not dry_run and not (strict and refused):
        try:
            with open_store(db) as store:
                history_id = store.add_fault_history(
                    stored_name, source=source, fmt=result.fmt, fleet_size=fleet_size,
                    window_start=window.start, window_end=window.end, origin=times.origin,
                    counts=_counts(result), meta=_meta(result, times, mapping),
                    faults=[(f.event, f.line) for f in result.faults], replace=replace)
                url = store.url
        except TrainguardError as exc:
            fail(str(exc))
    elapsed = time.perf_counter() - started
    if json_out:
        out.out(json.dumps({
            "name": stored_name, "source": source, "format": result.fmt, "stored": url is not None,
            "history_id": history_id, "store": url, "fleet_size": fleet_size,
            "window": {"start": window.start, "end": window.end, "days": window.days},
            "counts": _counts(result), "fields": _fields(result),
            "refused": [{"line": r.line, "reason": r.reason} for r in result.refused],
            "seconds": round(elapsed, 3)}), highlight=False)
    else:
        _print_import(result, stored_name, url, window.days, fleet_size, elapsed, mapping)
    uncounted = starting_at_end((f.event.start for f in result.faults), window)
    if uncounted:
        where = "" if window_end is not None else " (the last event of the file)"
        warn(f"{uncounted} fault{' starts' if uncounted == 1 else 's start'} at the window's "
             f"end{where} and so no figure of the window counts "
             f"{'it' if uncounted == 1 else 'them'} (a fault counts when it starts before the "
             "window's end): give --window-end, the end of the span the record covers")
    if strict and refused:
        if not json_out:
            warn(f"--strict: {len(result.refused)} record(s) refused, nothing stored")
        raise typer.Exit(1)


def _check_storable(result: ImportResult, name: str, fleet_size: int, window: FleetWindow,
                    times: TimeSpec) -> None:
    """What the store would refuse, refused before it is opened (also for --dry-run): more
    nodes with faults than the fleet has, an empty name."""
    nodes = {f.event.node for f in result.faults}
    if len(nodes) > fleet_size:
        fail(f"{len(nodes)} nodes have faults but --fleet-size is {fleet_size}: the fleet size "
             "counts every node, those with faults included")
    try:
        check_history(name, fleet_size=fleet_size, window_start=window.start,
                      window_end=window.end, origin=times.origin, nodes=sorted(nodes))
    except TrainguardError as exc:
        fail(str(exc))


def _read_source(path: Path) -> tuple[str, str]:
    if str(path) == "-":
        return typer.get_text_stream("stdin").read(), "<stdin>"
    try:
        return path.read_text(encoding="utf-8"), str(path)
    except FileNotFoundError:
        fail(f"no such file: {path}")
    except IsADirectoryError:
        fail(f"{path} is a directory, not a history file")
    except UnicodeDecodeError as exc:
        fail(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror}")


def _counts(result: ImportResult) -> dict[str, int]:
    c = result.counts
    return {"records": c.records, "faults": c.faults, "duplicates_merged": c.duplicates_merged,
            "overlaps_merged": c.overlaps_merged, "open_faults": c.open_faults,
            "refused": c.refused,
            "mapped": sum(1 for f in result.faults if f.mapped)}


def _fields(result: ImportResult) -> dict[str, object]:
    """The fields the import read (given or found), and the unit of its duration field."""
    f = result.fields
    return {"node": list(f.node), "time": f.time, "start": f.start, "end": f.end,
            "duration": f.duration, "duration_unit": result.duration_unit, "event": f.event,
            "type_fields": list(f.type_fields)}


def _fields_line(result: ImportResult) -> str:
    """The fields read, in one line: ``node 'host', start 'opened_at', ...``."""
    f = result.fields
    parts = ["node " + " + ".join(repr(n) for n in f.node)]
    for what, name in (("time", f.time), ("event", f.event), ("start", f.start),
                       ("end", f.end), ("duration", f.duration)):
        if name is not None:
            unit = f" in {result.duration_unit}" if what == "duration" else ""
            parts.append(f"{what} {name!r}{unit}")
    parts.append("type " + (" / ".join(repr(t) for t in f.type_fields) or "none (unknown)"))
    return "  fields: " + ", ".join(parts)


def _meta(result: ImportResult, times: TimeSpec, mapping: Path | None) -> dict[str, object]:
    return {"fields": _fields(result),
            "time_unit": times.unit, "time_format": times.time_format, "tz": times.tz,
            "epoch_unit": times.epoch_unit, "duration_unit": result.duration_unit,
            "mapping": str(mapping) if mapping else None,
            "first_time": result.first_time, "last_time": result.last_time}


def _print_import(result: ImportResult, name: str, url: str | None, days: float,
                  fleet_size: int, elapsed: float, mapping: Path | None) -> None:
    c = result.counts
    nodes = len({f.event.node for f in result.faults})
    out.out(f"{name}: read {c.records} records ({result.fmt}) -> {c.faults} faults on "
            f"{nodes} of {fleet_size} nodes over {days:.1f} days; merged {c.duplicates_merged} "
            f"duplicate(s), {c.overlaps_merged} fault(s) overlap another of their node (one "
            f"outage); {c.open_faults} still open; refused {c.refused}", highlight=False)
    out.out(terminal_safe(_fields_line(result)), highlight=False)
    if mapping is not None:
        mapped = sum(1 for f in result.faults if f.mapped)
        out.out(f"  {mapped} of {c.faults} faults mapped by {mapping.name} onto the "
                "taxonomy; the others keep their type's top level", highlight=False)
    for refusal in result.refused[:_SHOWN_REFUSALS]:
        out.out(f"  refused line {refusal.line}: {refusal.reason}", highlight=False)
    if len(result.refused) > _SHOWN_REFUSALS:
        out.out(f"  ... and {len(result.refused) - _SHOWN_REFUSALS} more (--json lists all)",
                highlight=False)
    where = f"stored in {url}" if url else "not stored"
    then = f"; next: trainguard fleet --history {shlex.quote(name)}" if url else ""
    out.out(f"{where} ({elapsed:.2f} s){then}", highlight=False)
    if stderr_is_tty() and result.refused and url:
        warn("refused records are not in the store; fix them and import again with --replace")


@app.command("list")
def list_cmd(
    db: DbOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The fault histories in the store, newest first."""
    with open_store(db, readonly=True) as store:
        histories = store.fault_histories()
    if json_out:
        out.out(json.dumps({"histories": [
            {"id": h.id, "name": h.name, "source": h.source, "format": h.fmt,
             "fleet_size": h.fleet_size, "window_start": h.window_start,
             "window_end": h.window_end, "days": (h.window_end - h.window_start) / DAY_S,
             "faults": h.faults, "imported": h.imported, "counts": dict(h.counts)}
            for h in histories]}), highlight=False)
        return
    if not histories:
        out.out("no fault histories in the store (trainguard history import FILE "
                "--fleet-size N)", highlight=False)
        return
    table = Table(box=None, header_style="bold")
    for column in ("name", "faults", "fleet", "days", "refused", "imported", "source"):
        table.add_column(column, justify="right" if column in ("faults", "fleet", "days",
                                                                "refused") else "left")
    for h in histories:
        table.add_row(escape(h.name), str(h.faults), str(h.fleet_size),
                      f"{(h.window_end - h.window_start) / DAY_S:.1f}",
                      str(h.counts.get("refused", 0)),
                      time.strftime("%Y-%m-%d %H:%M", time.gmtime(h.imported)),
                      escape(h.source))
    out.print(table)


@app.command("delete")
def delete_cmd(
    name: Annotated[str, typer.Argument(help="The history's name (see history list).")],
    db: DbOpt = None,
) -> None:
    """Delete one imported fault history and its faults."""
    try:
        with open_store(db, readonly=True) as store:  # a missing store is not created
            store.fault_history(name)
        with open_store(db) as store:
            faults = store.delete_fault_history(name)
    except TrainguardError as exc:
        fail(str(exc))
    out.out(f"deleted history {name} ({faults} fault{'' if faults == 1 else 's'})",
            highlight=False)


app.command("import-slurm")(import_history_cmd)

__all__ = ["app"]
