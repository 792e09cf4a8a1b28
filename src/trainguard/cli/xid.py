"""`trainguard xid ...`: the XID catalog."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trainguard.cli.console import fail, out
from trainguard.cli.tables import print_table
from trainguard.evidence.xid import catalog_description, xid_catalog, xid_info

app = typer.Typer(help="NVIDIA XID catalog.", no_args_is_help=True)


@app.command("explain")
def explain(
    xid: Annotated[int, typer.Argument(help="XID number, e.g. 79.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Print the catalog entry for an XID and what to do about it.

    Exit status: 0 when the XID is in the catalog, 1 when it is not (it is then reported as
    unknown: investigate, not as fatal), 2 on usage errors (not a non-negative integer).
    """
    if xid < 0:
        fail("XID must be a non-negative integer", 2)
    info = xid_info(xid)
    data = {"xid": info.xid, "name": info.name, "in_catalog": info.in_catalog,
            "catalog": catalog_description(),
            "nvidia_immediate_action": info.nvidia_action, "nvidia_fatal": info.nvidia_fatal,
            "category": info.category.value, "action": info.action.value,
            "severity": info.severity.value,
            "advice": info.advice}
    if json_out:
        out.out(json.dumps(data), highlight=False)
    elif not info.in_catalog:
        out.print(escape(info.advice))
    else:
        table = Table(show_header=False, title=f"XID {xid}")
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        for key, value in data.items():
            table.add_row(key, escape(str(value)))
        print_table(out, table)
    if not info.in_catalog:
        raise typer.Exit(1)


@app.command("list")
def list_xids(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """List every XID in the shipped catalog with trainguard's category and action."""
    cat = xid_catalog()
    if json_out:
        for info in cat.values():
            out.out(json.dumps({"xid": info.xid, "name": info.name,
                                "category": info.category.value, "action": info.action.value,
                                "severity": info.severity.value}), highlight=False)
        return
    table = Table(title="XID catalog")
    for col in ("xid", "name", "nvidia action", "category", "action", "severity"):
        table.add_column(col)
    for info in cat.values():
        table.add_row(str(info.xid), info.name, info.nvidia_action, info.category.value,
                      info.action.value, info.severity.value)
    print_table(out, table)
