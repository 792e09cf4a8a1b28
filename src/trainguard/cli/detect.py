"""`trainguard detect` and `trainguard backtest`: node failure detection on telemetry."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainguard.cli.alerttable import alerts_table
from trainguard.cli.console import err, fail, out, stderr_is_tty, warn
from trainguard.cli.helptext import reflowed_doc
from trainguard.cli.options import duration_option, year_option
from trainguard.detect.backtest import BASELINES, run_backtest
from trainguard.detect.calibration import Calibration, annotate, detector_file
from trainguard.detect.clustersize import cluster_size, size_note
from trainguard.detect.detector import detect as run_detect
from trainguard.detect.scorecard import Scorecard, compare
from trainguard.detect.truth import (
    GroundTruth,
    read_kernel_log_truth,
    truth_from_jsonl,
    truth_from_xid_gauge,
)
from trainguard.detect.truthspan import SpanCheck, check_span, telemetry_span
from trainguard.errors import ConfigError, TrainguardError
from trainguard.sizes import parse_size
from trainguard.telemetry.frame import Telemetry
from trainguard.timeparse import parse_timestamp
from trainguard.valueorigin import InvalidValue, named

if TYPE_CHECKING:
    from trainguard.telemetry import IdentityConfig, PrometheusClient, StampFor

Sources = Annotated[list[str] | None, typer.Argument(
    help="OpenMetrics/Prometheus text files (.om/.prom/.txt, .gz), directories of them, or "
    "long-format Parquet files.")]
PromUrl = Annotated[str | None, typer.Option(
    "--prometheus", help="Read from this Prometheus server's HTTP API instead of (or besides) "
    "files, e.g. http://127.0.0.1:9090.")]
Start = Annotated[str | None, typer.Option(
    help="Start of the range to read from Prometheus: unix seconds or ISO-8601.")]
End = Annotated[str | None, typer.Option(
    help="End of the range to read from Prometheus (default: now).")]
Step = Annotated[int | None, duration_option(
    help="Sample spacing (default: inferred from files; 30s for Prometheus).", min=1, whole=True)]
Metrics = Annotated[list[str] | None, typer.Option(
    "--metric", help="Only these metrics from Prometheus (repeatable; default: every series).")]
Token = Annotated[Path | None, typer.Option(
    "--bearer-token-file", help="File holding a bearer token for Prometheus.")]
BasicAuth = Annotated[str | None, typer.Option(
    "--basic-auth", help="USER:PASSWORD for Prometheus (or set TRAINGUARD_PROM_BASIC_AUTH).",
    envvar="TRAINGUARD_PROM_BASIC_AUTH")]
MaxMemory = Annotated[str, typer.Option(
    "--max-memory", help="Refuse input whose aligned arrays would need more than this, before "
    "allocating them (e.g. 8GiB, 512MiB; 0 = no limit).")]
_DEFAULT_MAX_MEMORY = "8GiB"
DetectorConfigFile = Annotated[Path | None, typer.Option(
    "--config", help="Detector config file (TOML with a [detect] table, e.g. written by "
    "`trainguard tune`); its [calibration] adds each alert kind's expected false alarms/day.")]
NodeLabel = Annotated[list[str] | None, typer.Option(
    "--node-label", metavar="NAME", help="The label that names the node, instead of the "
    "built-in order (kubernetes_node, Hostname, hostname, node, nodename, instance); "
    "repeatable (or NAME,NAME): tried in order. On Kubernetes dcgm-exporter's Hostname is its "
    "pod, not the node.")]
At = Annotated[list[str] | None, typer.Option(
    "--at", metavar="TIME|mtime", help="Time for samples without a timestamp (a saved `curl "
    ".../metrics` scrape): unix seconds, ISO-8601, or mtime (each file's modification time). "
    "One value for all sources, or one per source; each file is one snapshot.")]


def _identity(node_label: list[str] | None) -> IdentityConfig | None:
    from trainguard.telemetry import IdentityConfig

    return None if node_label is None else IdentityConfig().for_node_label(node_label)


def _stamp(sources: list[str] | None, at: list[str] | None) -> StampFor | None:
    from trainguard.telemetry import parse_at, snapshot_times

    return snapshot_times(sources or [], [parse_at(a) for a in at or []])


def _need_input(ctx: typer.Context, sources: list[str] | None, prometheus: str | None) -> None:
    if not sources and not prometheus:
        err.print(ctx.get_usage())
        fail("give telemetry files/directories, or --prometheus URL", 2)


def _parse_time(value: str | None, name: str, default: float | None = None) -> float | None:
    return default if value is None else parse_timestamp(value, f"--{name}:")


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr (only on a terminal); yields callback(done, total)."""
    if not stderr_is_tty():
        yield lambda done, total: None
        return
    with Progress(TextColumn(f"[bold]{label}[/]"), BarColumn(), TaskProgressColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def note_cluster_size(cal: Calibration | None, tel: Telemetry) -> None:
    """One stderr line when `cal` was tuned on a cluster of another size than `tel`'s."""
    note = None if cal is None else size_note(cal, cluster_size(tel))
    if note is not None:
        err.print(f"note: {note}", markup=False, highlight=False)


def max_memory_bytes(text: str) -> int:
    """`--max-memory` in bytes (0 = no limit); a malformed size is a usage error (exit 2)."""
    try:
        return parse_size(text)
    except TrainguardError as exc:
        fail(f"--max-memory: {exc}", 2)


def load_telemetry(sources: list[str] | None, prometheus: str | None, start: str | None,
                   end: str | None, step: int | None, metrics: list[str] | None,
                   token_file: Path | None, basic_auth: str | None, *,
                   max_memory: int | None = None, identity: IdentityConfig | None = None,
                   stamp: StampFor | None = None) -> Telemetry:
    """Files and/or a Prometheus range into one Telemetry; warnings go to stderr.

    `max_memory` bounds the aligned matrices (None: the default limit, 0: none); `identity`
    chooses the node label; `stamp` times file samples that have no timestamp (`--at`)."""
    from trainguard.telemetry import TelemetryBuilder, load_sources, read_prometheus
    from trainguard.telemetry.limits import DEFAULT_MAX_MEMORY_BYTES

    if not sources and not prometheus:
        raise ConfigError("give telemetry files/directories, or --prometheus URL")
    limit = DEFAULT_MAX_MEMORY_BYTES if max_memory is None else (max_memory or None)
    if prometheus is None:
        with _progress("reading telemetry") as prog:
            tel, warnings = load_sources(sources or [], step_s=step, progress=prog,
                                         max_memory_bytes=limit, identity=identity,
                                         stamp=stamp)
        for w in warnings:
            warn(w)
        if tel.times.size == 1:
            warn("the telemetry is one point in time (a single snapshot): the detector "
                 "compares samples over time, so one snapshot shows no failure; several scrapes "
                 "taken at different times (--at mtime) form a series")
        return tel
    if sources:
        raise ConfigError("read either files or --prometheus, not both")
    if stamp is not None:
        raise ConfigError("--at stamps files; Prometheus samples carry their own times")
    t_end = _parse_time(end, "end", time.time())
    t_start = _parse_time(start, "start")
    assert t_end is not None
    if t_start is None:
        raise ConfigError("--start is required with --prometheus (unix seconds or ISO-8601)")
    if t_start >= t_end:
        raise ConfigError("--start must be before --end")
    client = _client(prometheus, token_file, basic_auth)
    builder = TelemetryBuilder(identity, step_s=step or 30, max_memory_bytes=limit)
    with _progress("querying Prometheus") as prog:
        read_prometheus(client, builder, metrics=metrics, start=t_start, end=t_end,
                        step_s=step or 30, progress=prog)
    return builder.build()


_CLIENT_FLAGS = {"telemetry.prometheus.url": "--prometheus"}
"""PrometheusClient's keys -> the flags that set them here (named in its messages)."""


def _client(url: str, token_file: Path | None, basic_auth: str | None) -> PrometheusClient:
    from trainguard.telemetry import PrometheusClient
    from trainguard.watch.config import read_secret

    if token_file is not None and basic_auth:
        raise ConfigError("give --bearer-token-file or --basic-auth, not both")
    token = None if token_file is None else read_secret(token_file, "--bearer-token-file")
    auth = None
    if basic_auth:
        user, sep, password = basic_auth.partition(":")
        if not sep:
            raise ConfigError("--basic-auth must be USER:PASSWORD")
        auth = (user, password)
    try:
        return PrometheusClient(url, bearer_token=token, basic_auth=auth)
    except InvalidValue as exc:
        raise named(exc, _CLIENT_FLAGS) from None


@reflowed_doc
def detect(
    ctx: typer.Context,
    sources: Sources = None,
    prometheus: PromUrl = None,
    start: Start = None,
    end: End = None,
    step: Step = None,
    metric: Metrics = None,
    bearer_token_file: Token = None,
    basic_auth: BasicAuth = None,
    out_file: Annotated[Path | None, typer.Option(
        "--out", help="Write one JSON object per alert episode (JSON lines) to this file.")
    ] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the alert episodes as JSON lines on stdout (no table).")] = False,
    limit: Annotated[int, typer.Option(help="Rows in the terminal table (0 = all).", min=0)] = 30,
    max_memory: MaxMemory = _DEFAULT_MAX_MEMORY,
    node_label: NodeLabel = None,
    at: At = None,
    config: DetectorConfigFile = None,
) -> None:
    """Find failing nodes and GPUs in telemetry: predictive and hard alert episodes.

    Exit status: 0 when the telemetry was read and scored (alerts or none), 2 when it could
    not be (a missing or malformed source, a --prometheus URL that is unreachable or not a
    Prometheus, a bad option).
    """
    _need_input(ctx, sources, prometheus)
    mem = max_memory_bytes(max_memory)
    try:
        dfile = detector_file(config, mem)
        tel = load_telemetry(sources, prometheus, start, end, step, metric, bearer_token_file,
                             basic_auth, max_memory=mem, identity=_identity(node_label),
                             stamp=_stamp(sources, at))
        if not any(m.per_gpu for m in tel.metrics):
            warn("no per-GPU series (no gpu/UUID label): scoring node-level metrics only")
        note_cluster_size(dfile.calibration, tel)
        with _progress("detecting") as prog:
            alerts = annotate(run_detect(tel, dfile.detect, progress=prog), dfile.calibration)
    except TrainguardError as exc:
        fail(str(exc), 2)
    lines = [json.dumps(a.to_dict()) for a in alerts]
    if out_file is not None:
        try:
            out_file.write_text("".join(line + "\n" for line in lines))
        except OSError as exc:
            fail(f"cannot write {out_file}: {exc.strerror}", 2)
    if json_out:
        for line in lines:
            typer.echo(line)
        return
    days = tel.times.size * tel.step_s / 86400
    out.print(f"{len(tel.nodes)} nodes, {len(tel.metrics)} metrics, {tel.n_samples:,} samples, "
              f"{days:.1f} days at {tel.step_s}s")
    out.print(alerts_table(alerts, limit))
    if out_file is not None:
        out.print(f"wrote {len(alerts)} episodes to {out_file}")


def _load_truth(tel: Telemetry, sources: list[str] | None, failures: Path | None,
                kernel_logs: list[Path] | None, year: int | None = None,
                ) -> tuple[GroundTruth, str, bool]:
    """The ground truth, where it came from, and whether a syslog year was guessed."""
    if failures is not None:
        if not failures.is_file():
            raise ConfigError(f"--failures: no such file: {failures}")
        return truth_from_jsonl(failures), str(failures), False
    if kernel_logs:
        for p in kernel_logs:
            if not p.exists():
                raise ConfigError(f"--kernel-logs: no such file or directory: {p}")
        found = read_kernel_log_truth(kernel_logs, year=year)
        if found.year_note is not None:
            warn(found.year_note)
        return found.truth, "kernel logs", found.year_note is not None
    for s in sources or []:
        for cand in (Path(s) / "labels.jsonl", Path(s).parent / "labels.jsonl"):
            if cand.is_file():
                return truth_from_jsonl(cand), f"{cand} (found next to the telemetry)", False
    return truth_from_xid_gauge(tel), "the XID gauge in the telemetry", False


def _warn_span(span: SpanCheck, *, guessed_year: bool) -> None:
    hint = "; lines without a year took a guessed one: give --year YYYY" \
        if guessed_year else ""
    for line in (span.warning(hint), span.node_warning()):
        if line is not None:
            warn(line)


def _print_cards(cards: tuple[Scorecard, ...]) -> None:
    cmp = compare(cards)
    table = Table(title="Backtest (matching on alert onsets: detected = onset on the failed node "
                  "in [XID-3h, XID+5min]; FP = onset outside every [XID-3h, XID+2h] window and "
                  "maintenance)", title_justify="left")
    for h in cmp.header:
        table.add_column(h)
    for row in cmp.rows:
        table.add_row(*row)
    out.print(table)
    main = cards[0]
    t = Table(title=f"{main.name}: per failure type", title_justify="left")
    for col in ("type", "n", "detected", "pre-XID", "lead median (min)", "lead p25-p75",
                "top contributing metrics"):
        t.add_column(col)
    for ts in (*main.by_type, main.total):
        lead = ts.lead
        mets = ", ".join(f"{m} ({c})" for m, c in ts.metrics[:4])
        t.add_row(ts.failure_type, str(ts.n), f"{ts.detected} ({ts.rate:.0%})",
                  f"{ts.pre_xid} ({ts.pre_xid_rate:.0%})",
                  "-" if lead is None else f"{lead.median:.0f}",
                  "-" if lead is None else f"{lead.p25:.0f}-{lead.p75:.0f}", escape(mets))
    out.print(t)


@reflowed_doc
def backtest(
    ctx: typer.Context,
    sources: Sources = None,
    prometheus: PromUrl = None,
    start: Start = None,
    end: End = None,
    step: Step = None,
    metric: Metrics = None,
    bearer_token_file: Token = None,
    basic_auth: BasicAuth = None,
    failures: Annotated[Path | None, typer.Option(
        help="Ground truth as JSON lines (node, time, xid[, type]); default: labels.jsonl next "
        "to the telemetry, else --kernel-logs, else the XID gauge.")] = None,
    kernel_logs: Annotated[list[Path] | None, typer.Option(
        "--kernel-logs", help="Take the failures from NVRM XID lines in these kernel logs.")
    ] = None,
    baseline: Annotated[list[str] | None, typer.Option(
        help=f"Baselines to compare with (repeatable): {', '.join(BASELINES)}; "
        "default: static and ecod. 'none' for no baseline.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the scorecards as JSON.")
                        ] = False,
    alerts_out: Annotated[Path | None, typer.Option(
        "--alerts-out", help="Also write every detector's alerts (JSON lines) to this file.")
    ] = None,
    max_memory: MaxMemory = _DEFAULT_MAX_MEMORY,
    node_label: NodeLabel = None,
    at: At = None,
    year: Annotated[int | None, year_option(
        help="Year of --kernel-logs lines that carry none (syslog 'Nov 18 03:12:01 host "
        "kernel: ...'); default: each file's modification year, with a warning.")] = None,
    config: DetectorConfigFile = None,
) -> None:
    """Score trainguard and the baselines against known failures (the report's Analysis 1).

    Exit status: 0 when the scorecards were computed, 2 when the telemetry or the failures
    could not be read (a missing or malformed source, a --prometheus URL that is unreachable
    or not a Prometheus, a bad option).
    """
    _need_input(ctx, sources, prometheus)
    chosen = ["static", "ecod"] if baseline is None else [b for b in baseline if b != "none"]
    mem = max_memory_bytes(max_memory)
    if failures is not None and not failures.is_file():
        fail(f"--failures: no such file: {failures}", 2)
    for p in kernel_logs or []:
        if not p.exists():
            fail(f"--kernel-logs: no such file or directory: {p}", 2)
    if year is not None and not kernel_logs:
        fail("--year dates --kernel-logs lines that carry no year; give --kernel-logs too", 2)
    try:
        dfile = detector_file(config, mem)
        tel = load_telemetry(sources, prometheus, start, end, step, metric, bearer_token_file,
                             basic_auth, max_memory=mem, identity=_identity(node_label),
                             stamp=_stamp(sources, at))
        truth, truth_from, guessed_year = _load_truth(tel, sources, failures, kernel_logs, year)
        span = check_span(truth, telemetry_span(tel), tel.nodes)
        _warn_span(span, guessed_year=guessed_year)
        if alerts_out is not None:  # only the written alerts carry the calibration's rates
            note_cluster_size(dfile.calibration, tel)
        with _progress("backtesting") as prog:
            result = run_backtest(tel, truth, baselines=chosen,
                                  cfg=dfile.detect,
                                  progress=lambda _name, done, total: prog(done, total))
    except TrainguardError as exc:
        fail(str(exc), 2)
    for s in result.skipped:
        warn(f"baseline skipped: {s}")
    if alerts_out is not None:
        try:
            with alerts_out.open("w") as fh:
                for name, alerts in result.alerts.items():
                    # only trainguard's own alerts were calibrated
                    cal = dfile.calibration if name == "trainguard" else None
                    for a in annotate(alerts, cal):
                        fh.write(json.dumps({**a.to_dict(), "detector": name}) + "\n")
        except OSError as exc:
            fail(f"cannot write {alerts_out}: {exc.strerror}", 2)
    if json_out:
        typer.echo(json.dumps({"truth": truth_from, "n_failures": len(truth.failures),
                               "n_failures_in_span": span.in_span,
                               "span_check": span.to_dict(),
                               "cards": [c.to_dict() for c in result.cards]}, indent=2))
        return
    days = tel.times.size * tel.step_s / 86400
    out.print(f"{len(tel.nodes)} nodes, {len(tel.metrics)} metrics, {days:.1f} days; "
              f"{len(truth.failures)} failures from {escape(truth_from)}, {span.in_span} of "
              "them in the telemetry's time span (scored)")
    _print_cards(result.cards)
