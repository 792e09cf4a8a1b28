"""`trainguard watch`: the live detector service next to the cluster's Prometheus."""

from __future__ import annotations

import json
import logging
import signal
import threading
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from trainguard.cli.console import err, fail, out
from trainguard.cli.helptext import reflowed_doc
from trainguard.cli.options import duration_option
from trainguard.errors import ConfigError, TrainguardError
from trainguard.valueorigin import InvalidValue

_ACTIONS = ("off", "dry-run", "on")


def _replay_from(url: str) -> tuple[Any, int]:
    """The replay clock (a TimeMap) and the sample interval of a `trainguard simulate
    --serve` exporter, from its /healthz."""
    from trainguard.watch.config import TimeMap

    base = url.rstrip("/").removesuffix("/metrics").removesuffix("/healthz")
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as resp:
            doc = json.loads(resp.read())
        speed, interval_s = float(doc["speed"]), int(doc["interval_s"])
        # The phase puts each evaluation just before the simulator's next sample.
        clock = TimeMap(speed, float(doc["sim_start"]), float(doc["wall_start"]),
                        phase_s=0.9 * interval_s / speed)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError,
            ConfigError) as exc:
        raise ConfigError(f"--simulator {url}: not a trainguard simulate --serve exporter "
                          f"({type(exc).__name__}: {exc})") from exc
    return clock, interval_s


def _overrides(flags: dict[str, Any]) -> dict[str, Any]:
    """WatchConfig overrides from the flags that were given: a flag left out is absent, so
    the config file's value (or the default) stays; ``--listen off`` is present, as None."""
    from trainguard.telemetry.identity import parse_node_labels
    from trainguard.watch.config import FLAGS, read_secret

    kw: dict[str, Any] = {}
    for name, value in flags.items():
        if value is None or value is False or value == []:
            continue
        flag = FLAGS[name]
        if name == "step_s":
            value = max(1, round(value))
        elif name == "kernel_logs":
            value = tuple(value)
        elif name == "node_label":
            value = parse_node_labels(value, flag)
        elif name == "listen":
            value = None if value.strip().lower() == "off" else value
        elif name == "token":
            value = read_secret(value, flag)
        kw[name] = value
    return kw


@reflowed_doc
def watch(
    prometheus: Annotated[str | None, typer.Option(
        "--prometheus", metavar="URL", help="Prometheus to read (scraping DCGM/node exporters).")
    ] = None,
    interval: Annotated[float | None, duration_option(
        "--interval", help="How often to fetch and score the new interval (default 30s).")
    ] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="TOML file (sections watch, detect, http, alertmanager, actions, "
        "kernel_logs, replay, prometheus; see docs/watch.md).")] = None,
    detector_config: Annotated[Path | None, typer.Option(
        "--detector-config", help="Detector config file written by `trainguard tune`: its "
        "[detect] table replaces the --config file's, and alerts carry its calibrated "
        "expected false alarms per day.")] = None,
    state_dir: Annotated[Path | None, typer.Option(
        "--state-dir", help="Where the state survives restarts (default ./trainguard-watch).")
    ] = None,
    listen: Annotated[str | None, typer.Option(
        "--listen", metavar="[HOST:]PORT|off",
        help="HTTP endpoints /metrics, /status, /alertmanager/webhook (default "
        "127.0.0.1:9464; a non-loopback host needs --token-file).")] = None,
    token_file: Annotated[Path | None, typer.Option(
        "--token-file", help="Bearer token the HTTP endpoints require.")] = None,
    alertmanager: Annotated[str | None, typer.Option(
        "--alertmanager", metavar="URL", help="Post alerts to this Alertmanager.")] = None,
    db: Annotated[str | None, typer.Option(
        "--db", help="Event store for alerts and evidence: SQLite path or postgresql:// URL "
        "(default $TRAINGUARD_DB, else ./trainguard.db; with --once, no store unless one of "
        "them is given); 'none' for no store.")] = None,
    step: Annotated[float | None, duration_option(
        "--step", help="Detector sample step (default: Prometheus' scrape interval).")] = None,
    history: Annotated[float | None, duration_option(
        "--history", help="Warm-up history fetched on a first start (default 6h).")] = None,
    lag: Annotated[float | None, duration_option(
        "--lag", help="How far behind now the newest fetched point stays (default: a fifth "
        "of the step, at most 10s).")] = None,
    kernel_log: Annotated[list[str] | None, typer.Option(
        "--kernel-log", metavar="[NODE=]PATH",
        help="Tail kernel logs (file, directory of per-node files, journalctl -o export "
        "file); repeatable.")] = None,
    actions: Annotated[str | None, typer.Option(
        "--actions", help="off (default), dry-run (decide and report) or on (exclude the "
        "node in the store, tell the supervisor, drain with --drain).")] = None,
    drain: Annotated[bool, typer.Option(
        "--drain", help="With --actions on: also scontrol update NodeName=... state=drain.")
    ] = False,
    supervisor_alerts: Annotated[Path | None, typer.Option(
        "--supervisor-alerts", help="A running supervisor's alerts file (trainguard run "
        "--alerts FILE): actions and webhook alerts are appended to it.")] = None,
    simulator: Annotated[str | None, typer.Option(
        "--simulator", metavar="URL", help="Replay: read the clock of a `trainguard simulate "
        "--serve` exporter and score in simulated time.")] = None,
    once: Annotated[bool, typer.Option(
        "--once", help="One round (warm up or catch up), then exit; no HTTP server.")] = False,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Alert changes as JSON lines on stdout.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every round.")] = False,
    node_label: Annotated[list[str] | None, typer.Option(
        "--node-label", metavar="NAME", help="The label that names the node (watch.node_label; "
        "default: the first of kubernetes_node, Hostname, hostname, node, nodename, instance); "
        "repeatable: tried in order. On Kubernetes dcgm-exporter's Hostname is its pod, not the "
        "node.")] = None,
) -> None:
    """Run the detector live against Prometheus: warm up from history, score each new
    interval, raise alerts (store, Alertmanager, /metrics), optionally act on them.

    The state is kept in --state-dir: a restart resumes where it stopped and raises the
    alerts it missed. Ctrl-C or SIGTERM stop it cleanly. Exit status: 0 after a clean stop
    (with --once: a round without errors), 1 when it cannot start or the --once round
    failed, 2 on bad options, a store that cannot be opened, or (with --once) a Prometheus
    that cannot be reached or is not a Prometheus.
    """
    from trainguard.watch.config import load_config

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    if verbose:  # the root logger is configured already (`trainguard [-v]`): open ours to INFO
        ours = logging.getLogger("trainguard")
        ours.setLevel(min(logging.INFO, logging.getLogger().getEffectiveLevel()))
    try:
        overrides = _overrides({
            "prometheus": prometheus, "state_dir": state_dir, "alertmanager_url": alertmanager,
            "supervisor_alerts": supervisor_alerts, "interval_s": interval,
            "history_s": history, "lag_s": lag, "step_s": step, "kernel_logs": kernel_log,
            "drain": drain, "listen": listen, "token": token_file, "node_label": node_label})
        if simulator is not None:
            overrides["replay"], sim_step = _replay_from(simulator)
            overrides.setdefault("step_s", sim_step)
        if detector_config is not None:
            from trainguard.detect.calibration import load as load_detector_file

            dfile = load_detector_file(detector_config)
            overrides["detect"], overrides["calibration"] = dfile.detect, dfile.calibration
        cfg = load_config(config, overrides)
        if actions is not None:
            if actions not in _ACTIONS:
                raise ConfigError(f"--actions must be one of {', '.join(_ACTIONS)}")
            from dataclasses import replace
            cfg = replace(cfg, actions=replace(cfg.actions, enabled=actions != "off",
                                               dry_run=actions != "on"))
    except ConfigError as exc:
        fail(str(exc), 2)
    try:
        problems = _serve(cfg, db, once=once, json_out=json_out)
    except PrometheusUnusable as exc:
        fail(f"watch: {exc}", 2)
    except InvalidValue as exc:
        fail(str(cfg.named(exc)), 2)
    except ConfigError as exc:
        fail(str(exc), 2)
    except TrainguardError as exc:
        fail(f"watch: {exc}", 1)
    if problems:
        fail(f"watch: the round failed: {'; '.join(problems)}", 1)


class PrometheusUnusable(TrainguardError):
    """The --once round could not use Prometheus at all (no connection, not a Prometheus)."""


def _open_store(db: str | None, *, once: bool) -> Any:
    """The store named by --db (or $TRAINGUARD_DB, else ./trainguard.db); None for ``none``,
    and, for one round, unless the user named one: --once creates no ./trainguard.db."""
    import os

    from trainguard.errors import StoreError
    from trainguard.store import DB_ENV, Store, wants_no_store

    if wants_no_store(db) or (once and db is None and not os.environ.get(DB_ENV, "").strip()):
        return None
    try:
        return Store.open(db)
    except StoreError as exc:  # a path or URL that names no usable store: bad input
        raise ConfigError(str(exc)) from exc


def _serve(cfg: Any, db: str | None, *, once: bool, json_out: bool) -> tuple[str, ...]:
    """Run the service (one round with `once`); returns the --once round's errors."""
    from trainguard.evidence.rules import load_rules
    from trainguard.telemetry.prometheus import PrometheusClient
    from trainguard.watch.actions import ActionExecutor, slurm_drain
    from trainguard.watch.alertmanager import AlertmanagerClient
    from trainguard.watch.alerts import Change
    from trainguard.watch.exporter import MetricsExporter
    from trainguard.watch.http import HttpServer, Response, ServerConfig
    from trainguard.watch.kernlog import KernelLogTailer, parse_sources
    from trainguard.watch.service import WatchService
    from trainguard.watch.webhook import WebhookReceiver

    with ExitStack() as stack:
        store = _open_store(db, once=once)
        if store is not None:
            stack.enter_context(store)
        client = PrometheusClient(cfg.prometheus, bearer_token=cfg.prometheus_token,
                                  retries=2, timeout_s=max(10.0, cfg.interval_s))
        am = None if cfg.alertmanager_url is None else AlertmanagerClient(
            cfg.alertmanager_url, token=cfg.alertmanager_token)
        executor = ActionExecutor(cfg.actions, store=store,
                                  drain=slurm_drain() if cfg.drain else None,
                                  alerts_file=cfg.supervisor_alerts) \
            if cfg.actions.enabled else None
        tailer = KernelLogTailer(parse_sources(cfg.kernel_logs), load_rules(), from_end=True) \
            if cfg.kernel_logs else None
        exporter = MetricsExporter()

        def emit(change: Change) -> None:
            a = change.alert
            if json_out:
                out.out(json.dumps({"change": change.kind, **a.to_dict()}), highlight=False)
            else:
                when = " (in the warm-up history: recorded, not paged)" if a.historical else ""
                err.print(f"{change.kind}: {a.kind} alert on {a.node}{when} ({a.summary})",
                          highlight=False, markup=False)

        svc = WatchService(cfg, client=client, store=store, alertmanager=am,
                           executor=executor, kernel_logs=tailer, exporter=exporter,
                           on_change=emit,
                           on_note=lambda note: err.print(f"note: {note}", highlight=False,
                                                          markup=False))
        note = svc.load()
        server = None
        if cfg.listen is not None:
            from trainguard.simulate.serve import parse_listen

            host, port = parse_listen(cfg.listen)
            receiver = WebhookReceiver(alerts_file=cfg.supervisor_alerts, store=store)
            routes = {**exporter.routes(), **receiver.routes(),
                      ("GET", "/status"): lambda _req: Response.json(svc.status()),
                      ("GET", "/healthz"): lambda _req: Response.json({"status": "ok"})}
            server = HttpServer(ServerConfig(host=host, port=port, token=cfg.token), routes)
        if once:  # one round: no endpoints to serve (the options are checked all the same)
            report = svc.round()
            if report.prometheus_problem is not None:
                raise PrometheusUnusable(report.prometheus_problem)
            if not report.failed:
                err.print(f"one round of {cfg.prometheus}: {report.line()}; {svc.step_words}; "
                          f"state in {cfg.state_dir} ({note})", highlight=False, markup=False)
            return report.errors
        if server is not None:
            try:
                server.start()
            except OSError as exc:
                raise ConfigError(f"cannot serve HTTP on {cfg.listen} (--listen, or http.listen "
                                  f"in the config file): {exc.strerror or exc}") from exc
            stack.callback(server.stop)
            where = f"; {server.url}/metrics, /status, /alertmanager/webhook"
        else:
            where = ""
        stop = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            stop.set()

        # Before the start line: whoever waits for it may stop the watch at once.
        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            err.print(f"watching {cfg.prometheus} every {cfg.interval_s:g}s, "
                      f"{svc.step_words}; state in {cfg.state_dir} ({note}){where}",
                      highlight=False, markup=False)
            svc.run(stop)
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
        err.print("stopped; state saved", highlight=False)
        return ()
