"""`trainguard simulate`: write a synthetic cluster's telemetry, kernel logs and ground truth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trainguard.cli.console import err, fail, out, stderr_is_tty
from trainguard.errors import ConfigError, TrainguardError
from trainguard.simulate import SimConfig, SimSummary, parse_start, simulate_to_dir
from trainguard.simulate.config import DEFAULT_START_S


def simulate(
    out_dir: Annotated[Path, typer.Option(
        "--out", help="Output directory (created; must be empty unless --overwrite).")],
    nodes: Annotated[int, typer.Option(help="GPU nodes in the cluster.")] = 63,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    days: Annotated[float, typer.Option(help="Simulated span in days.")] = 7.0,
    seed: Annotated[int, typer.Option(help="Random seed; same seed, same output.")] = 0,
    interval: Annotated[int, typer.Option(
        help="Scrape interval in seconds (a divisor of 7200).")] = 30,
    start: Annotated[str | None, typer.Option(
        help="Start time: unix seconds or ISO-8601 (naive = UTC). "
             "Default: 2024-11-18T00:00:00Z.")] = None,
    gzip: Annotated[bool, typer.Option(
        "--gzip", help="Write metrics-<start>.om.gz (about 20x smaller).")] = False,
    failures_per_day: Annotated[float, typer.Option(
        help="Mean hardware failures per day (whole cluster).")] = 1.5,
    app_xids_per_day: Annotated[float, typer.Option(
        help="Mean application-XID incidents per day (whole cluster).")] = 1.0,
    job_label: Annotated[bool, typer.Option(
        "--job-label", help="Add dcgm-exporter's hpc_job label to GPU series.")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace a previous simulation in --out.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Simulate a GPU training cluster: OpenMetrics per 2-hour window, kernel logs, labels.

    Writes OUT/metrics/metrics-<start>.om[.gz], OUT/kernel/<node>.log, OUT/labels.jsonl and
    OUT/manifest.json. Exit status: 0 on success, 1 when writing failed, 2 on bad options.
    """
    try:
        cfg = SimConfig(
            nodes=nodes, gpus_per_node=gpus_per_node, days=days, seed=seed, interval_s=interval,
            start_s=DEFAULT_START_S if start is None else parse_start(start),
            failures_per_day=failures_per_day, app_xids_per_day=app_xids_per_day,
            job_label=job_label)
    except ConfigError as exc:
        fail(str(exc), 2)
    try:
        if stderr_is_tty() and not json_out:
            with Progress(TextColumn("[bold]simulating[/] 2-h windows"), BarColumn(),
                          MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                          transient=True) as progress:
                task = progress.add_task("sim", total=cfg.n_windows)
                summary = simulate_to_dir(
                    cfg, out_dir, lambda done, total: progress.update(task, completed=done),
                    compress=gzip, overwrite=overwrite)
        else:
            summary = simulate_to_dir(cfg, out_dir, compress=gzip, overwrite=overwrite)
    except ConfigError as exc:
        fail(str(exc), 2)
    except (TrainguardError, OSError) as exc:
        fail(f"simulate: {exc}", 1)
    _report(summary, json_out)


def _report(s: SimSummary, json_out: bool) -> None:
    if json_out:
        out.out(json.dumps(s.to_dict()), highlight=False)
        return
    out.print(f"wrote {s.out_dir}: {s.windows} window file(s), {s.samples:,} samples, "
              f"{s.total_bytes / 1e6:,.1f} MB in {s.seconds:.1f}s", highlight=False)
    out.print(f"ground truth: {s.failures} hardware failure(s), {s.app_xids} application "
              f"XID(s), {s.maintenances} maintenance(s), {s.benign} benign anomaly(ies), "
              f"{s.jobs} job(s) -> labels.jsonl", highlight=False)
