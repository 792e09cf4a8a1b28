"""`trainguard slurm ...`: Slurm job history into the event store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from trainguard.cli.console import fail, out
from trainguard.errors import TrainguardError
from trainguard.recover.slurm import SlurmCommands, import_history, load_history
from trainguard.store import Store

app = typer.Typer(help="Slurm: import job history.", no_args_is_help=True)


@app.callback()
def _slurm() -> None:
    """Slurm: import job history."""  # keeps import-history a sub-command of a one-command app


@app.command("import-history")
def import_history_cmd(
    jobcomp: Annotated[Path | None, typer.Option(
        "--jobcomp", help="Read this jobcomp/filetxt file (JobCompLoc) instead of asking Slurm.",
        dir_okay=False)] = None,
    squeue: Annotated[bool, typer.Option(
        "--squeue", help="Use `squeue -t all --json` (jobs the controller still holds).")] = False,
    sacct: Annotated[bool, typer.Option(
        "--sacct", help="Use sacct (needs Slurm accounting).")] = False,
    since: Annotated[str, typer.Option(
        help="With sacct: oldest jobs to read (sacct -S syntax).")] = "now-7days",
    db: Annotated[str | None, typer.Option(
        "--db", help="Store: a SQLite path or a postgresql:// URL "
        "(default $TRAINGUARD_DB or ./trainguard.db).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Import finished and running Slurm jobs as sessions (one per job, one attempt per run).

    The source is sacct when accounting works, else the jobcomp file named by `scontrol show
    config` (JobCompLoc), else `squeue --json`. Jobs already imported are skipped.
    """
    chosen = [name for name, on in (("jobcomp", jobcomp is not None), ("squeue", squeue),
                                    ("sacct", sacct)) if on]
    if len(chosen) > 1:
        fail(f"choose one source, not {' and '.join('--' + c for c in chosen)}", 2)
    try:
        history = load_history(SlurmCommands(), source=chosen[0] if chosen else "auto",
                               jobcomp=jobcomp, since=since)
        with Store.open(db) as store:
            result = import_history(store, history.jobs)
            url = store.url
    except TrainguardError as exc:
        fail(str(exc))
    jobs = len({job.job_id for job in history.jobs})
    if json_out:
        out.out(json.dumps({"source": history.source, "location": history.location,
                            "jobs": jobs, "records": len(history.jobs),
                            "imported": result.imported, "updated": result.updated,
                            "skipped": result.skipped, "store": url}), highlight=False)
        return
    where = f" {history.location}" if history.location else ""
    out.out(f"{history.source}{where}: {jobs} jobs; imported {result.imported}, "
            f"updated {result.updated}, skipped {result.skipped} (already in {url})",
            highlight=False)


__all__ = ["app"]
