"""`trainguard report`: what the cluster delivered (ETTR, badput, retry chains, exclusions...)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from trainguard.cli.console import err, fail, out
from trainguard.cli.helptext import reflowed_doc
from trainguard.errors import TrainguardError
from trainguard.textsafe import terminal_safe
from trainguard.timeparse import parse_timestamp


@reflowed_doc  # typer's rich help keeps the line breaks of every paragraph after the first
def report(
    db: Annotated[str | None, typer.Option(
        "--db", help="Event store: SQLite path or postgresql:// URL "
        "(default $TRAINGUARD_DB, else ./trainguard.db).")] = None,
    session: Annotated[int | None, typer.Option("--session", help="Only this session id.")
                       ] = None,
    since: Annotated[str | None, typer.Option(
        "--since", help="Only sessions running or ended since (unix seconds or ISO-8601).")
    ] = None,
    html_out: Annotated[Path | None, typer.Option(
        "--html", help="Write the self-contained HTML report here.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the analytics as JSON.")
                        ] = False,
    bandwidth_gbps: Annotated[float, typer.Option(
        "--bandwidth-gbps", help="Link/storage bandwidth for checkpoint utilization.", min=0.001)
    ] = 200.0,
) -> None:
    """ETTR/goodput and its badput breakdown, failures, MTTR, retry chains, exclusion
    concentration, detection lead times, checkpoint bandwidth, and the checkpoint interval the
    ETTR model recommends. Terminal summary; --html for the plots, --json for scripts."""
    from trainguard.analytics.report import build_report
    from trainguard.cli.storeopen import open_store

    try:
        start = parse_timestamp(since, "--since") if since else None
        with open_store(db, readonly=True) as store:
            rep = build_report(store, session_id=session, since=start,
                               bandwidth_bps=bandwidth_gbps * 1e9)
        if html_out is not None:
            from trainguard.outdirs import make_dir
            from trainguard.report import render_html

            make_dir(html_out.parent)  # its own directory, never a tree from a typo
            html_out.write_text(render_html(rep), encoding="utf-8")
    except TrainguardError as exc:  # a bad --since or --session, no plotly: input, not outcome
        fail(str(exc), 2)
    except OSError as exc:
        fail(f"cannot write {html_out}: {exc.strerror or exc}", 2)
    if json_out:
        out.print_json(json.dumps(rep.to_dict()))
    else:
        from trainguard.report.summary import summary_rows

        table = Table(title=f"trainguard report ({time.strftime('%Y-%m-%d %H:%M')})",
                      show_header=False)
        table.add_column("metric")
        table.add_column("value")
        for k, v in summary_rows(rep):
            # data, not rich markup (a node may be n[1]); Text skips the console's sanitizing
            table.add_row(Text(terminal_safe(k)), Text(terminal_safe(v)))
        out.print(table)
    if html_out is not None:
        err.print(f"HTML report: {html_out}")


__all__ = ["report"]
