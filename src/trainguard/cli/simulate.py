"""`trainguard simulate`: write a synthetic cluster's telemetry, kernel logs and ground truth,
or serve its metrics live over HTTP (`--serve`)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trainguard.cli.console import err, fail, out, stderr_is_tty
from trainguard.cli.options import duration_option
from trainguard.errors import ConfigError, TrainguardError
from trainguard.simulate import SimConfig, SimSummary, parse_start, simulate_to_dir
from trainguard.simulate.config import DEFAULT_START_S
from trainguard.simulate.run import OutDirNotEmpty
from trainguard.simulate.serve import ExporterServer, LiveExporter, parse_listen
from trainguard.simulate.space import SPACE_MARGIN, NotEnoughSpace, SpaceCheck
from trainguard.valueorigin import InvalidValue, named

_STATUS_EVERY_S = 10.0


def simulate(
    out_dir: Annotated[Path | None, typer.Option(
        "--out", help="Output directory (created; must be empty unless --overwrite).")] = None,
    nodes: Annotated[int, typer.Option(help="GPU nodes in the cluster.")] = 63,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node.")] = 8,
    days: Annotated[float, typer.Option(help="Simulated span in days.")] = 7.0,
    seed: Annotated[int, typer.Option(help="Random seed; same seed, same output.")] = 0,
    interval: Annotated[int, duration_option(
        help="Scrape interval, whole seconds (a divisor of 2h).", min=1, whole=True)] = 30,
    start: Annotated[str | None, typer.Option(
        help="Start time: unix seconds or ISO-8601 (naive = UTC). "
             "Default: 2024-11-18T00:00:00Z.")] = None,
    gzip: Annotated[bool, typer.Option(
        "--gzip/--no-gzip", help="Write metrics-<start>.om.gz, about 25x smaller (default); "
        "--no-gzip writes plain .om text (e.g. for promtool's backfill).")] = True,
    failures_per_day: Annotated[float, typer.Option(
        help="Mean hardware failures per day (whole cluster).")] = 1.5,
    app_xids_per_day: Annotated[float, typer.Option(
        help="Mean application-XID incidents per day (whole cluster).")] = 1.0,
    job_label: Annotated[bool, typer.Option(
        "--job-label", help="Add dcgm-exporter's hpc_job label to GPU series.")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace a previous simulation in --out.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    serve: Annotated[str | None, typer.Option(
        "--serve", metavar="[HOST:]PORT",
        help="Instead of writing files, serve the metrics live at http://HOST:PORT/metrics "
             "(also /truth, /healthz) until Ctrl-C. HOST defaults to 127.0.0.1.")] = None,
    speed: Annotated[float | None, typer.Option(
        help="With --serve: simulated seconds per wall second (default 60).")] = None,
) -> None:
    """Simulate a GPU training cluster: OpenMetrics per 2-hour window, kernel logs, labels.

    Writes OUT/metrics/metrics-<start>.om[.gz], OUT/kernel/<node>.log, OUT/labels.jsonl and
    OUT/manifest.json; or, with --serve, serves the dcgm/node-exporter metrics over HTTP as
    they evolve, sped up by --speed. Before writing, the output's size is estimated and
    checked against the free space there.

    Exit status: 0 on success (130 on Ctrl-C while serving), 1 when writing failed, 2 on bad
    options or an output that cannot be written (a missing parent directory, too little
    space).
    """
    if out_dir is not None and serve is not None:
        fail("simulate: --out (write files) and --serve (serve live) exclude each other", 2)
    if speed is not None and serve is None:
        fail("--speed needs --serve", 2)
    try:
        cfg = SimConfig(
            nodes=nodes, gpus_per_node=gpus_per_node, days=days, seed=seed, interval_s=interval,
            start_s=DEFAULT_START_S if start is None else parse_start(start),
            failures_per_day=failures_per_day, app_xids_per_day=app_xids_per_day,
            job_label=job_label)
    except ConfigError as exc:
        _input_error(exc)
    if serve is not None:
        _serve(cfg, serve, 60.0 if speed is None else speed)
        return
    if out_dir is None:
        fail("simulate: give --out DIR (write files) or --serve [HOST:]PORT (serve live)", 2)
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
        _input_error(exc)
    except (TrainguardError, OSError) as exc:
        fail(f"simulate: {exc}", 1)
    _report(summary, json_out)


_ORIGINS = {f"simulate.{key}": flag for key, flag in (
    ("nodes", "--nodes"), ("gpus_per_node", "--gpus-per-node"), ("days", "--days"),
    ("seed", "--seed"), ("interval_s", "--interval"), ("start", "--start"),
    ("start_s", "--start"), ("failures_per_day", "--failures-per-day"),
    ("app_xids_per_day", "--app-xids-per-day"), ("out", "--out"), ("speed", "--speed"),
    ("serve", "--serve"))}
"""Where each simulate value comes from: every one is a flag (simulate reads no config file),
so an error names the flag the user typed, not the `SimConfig` key."""


def _input_error(exc: ConfigError) -> NoReturn:
    """One line naming the flag, exit 2."""
    if isinstance(exc, NotEnoughSpace):
        fail(_space_message(exc.check), 2)
    if isinstance(exc, OutDirNotEmpty):
        fail(f"--out {exc.out} is not empty (--overwrite replaces a previous simulation)", 2)
    fail(str(named(exc, _ORIGINS) if isinstance(exc, InvalidValue) else exc), 2)


def _space_message(check: SpaceCheck) -> str:
    room = check.free_bytes + check.reclaimed_bytes
    fixes = ("use fewer --days, --nodes or --gpus-per-node, a longer --interval, or an --out "
             "on a larger filesystem" if check.compress
             else "drop --no-gzip (about 25x smaller), or use fewer --days or --nodes")
    return (f"--out needs ~{_size(check.needed_bytes)} (plus a {SPACE_MARGIN:.0%} margin), "
            f"{_size(room)} free on {check.filesystem}; {fixes}")


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _report(s: SimSummary, json_out: bool) -> None:
    if json_out:
        out.out(json.dumps(s.to_dict()), highlight=False)
        return
    out.print(f"wrote {s.out_dir}: {s.windows} window file(s), {s.samples:,} samples, "
              f"{s.total_bytes / 1e6:,.1f} MB in {s.seconds:.1f}s", highlight=False)
    out.print(f"ground truth: {s.failures} hardware failure(s), {s.app_xids} application "
              f"XID(s), {s.maintenances} maintenance(s), {s.benign} benign anomaly(ies), "
              f"{s.jobs} job(s) -> labels.jsonl", highlight=False)


def _serve(cfg: SimConfig, listen: str, speed: float) -> None:
    """Serve until Ctrl-C; the simulated time goes to stderr every few seconds."""
    try:
        host, port = parse_listen(listen)
        server = ExporterServer(LiveExporter.from_config(cfg, speed), host, port)
    except ConfigError as exc:
        _input_error(exc)
    stop = threading.Event()
    reporter = threading.Thread(target=_report_clock, args=(server, stop), daemon=True)
    err.print(f"serving {cfg.nodes} node(s) x {cfg.gpus_per_node} GPU(s) at "
              f"{server.url}/metrics (also /truth, /healthz), {speed:g}x: one "
              f"{cfg.interval_s} s scrape interval every {cfg.interval_s / speed:.3g} s; "
              "Ctrl-C stops", highlight=False)
    reporter.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        err.print("stopped", highlight=False)
        raise typer.Exit(130) from None
    finally:
        stop.set()
        server.close()


def _report_clock(server: ExporterServer, stop: threading.Event) -> None:
    exporter, ended = server.exporter, False
    while not stop.wait(_STATUS_EVERY_S):
        sim = exporter.clock.now()
        if sim >= exporter.cfg.end_s:
            if not ended:
                err.print("simulated span ended: /metrics is empty now; Ctrl-C stops",
                          highlight=False)
                ended = True
            continue
        when = datetime.fromtimestamp(sim, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        err.print(f"{time.strftime('%H:%M:%S')} simulated {when} UTC at {server.url}",
                  highlight=False)
