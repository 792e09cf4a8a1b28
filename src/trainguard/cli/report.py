"""`trainguard report`: what the cluster delivered (ETTR, badput, retry chains, exclusions...)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from trainguard.cli.console import err, fail, out
from trainguard.errors import TrainguardError
from trainguard.timeparse import parse_timestamp


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
    from trainguard.store import Store

    try:
        start = parse_timestamp(since, "--since") if since else None
        with Store.open(db, readonly=True) as store:
            rep = build_report(store, session_id=session, since=start,
                               bandwidth_bps=bandwidth_gbps * 1e9)
        if html_out is not None:
            from trainguard.report import render_html

            html_out.parent.mkdir(parents=True, exist_ok=True)
            html_out.write_text(render_html(rep), encoding="utf-8")
    except TrainguardError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write {html_out}: {exc.strerror or exc}")
    if json_out:
        out.print_json(json.dumps(rep.to_dict()))
    else:
        from trainguard.report.html import summary_rows

        table = Table(title=f"trainguard report ({time.strftime('%Y-%m-%d %H:%M')})",
                      show_header=False)
        table.add_column("metric")
        table.add_column("value")
        for k, v in summary_rows(rep):
            table.add_row(k, v)
        out.print(table)
    if html_out is not None:
        err.print(f"HTML report: {html_out}")


__all__ = ["report"]
