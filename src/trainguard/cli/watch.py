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

from trainguard.cli.console import err, fail, out, warn
from trainguard.errors import ConfigError, TrainguardError

_ACTIONS = ("off", "dry-run", "on")


def _replay_from(url: str) -> dict[str, Any]:
    """The clock of a `trainguard simulate --serve` exporter (its /healthz)."""
    base = url.rstrip("/").removesuffix("/metrics").removesuffix("/healthz")
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as resp:
            doc = json.loads(resp.read())
        return {"speed": float(doc["speed"]), "sim_start": float(doc["sim_start"]),
                "wall_start": float(doc["wall_start"]), "interval_s": int(doc["interval_s"])}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"--simulator {url}: not a trainguard simulate --serve exporter "
                          f"({type(exc).__name__}: {exc})") from exc


def watch(
    prometheus: Annotated[str | None, typer.Option(
        "--prometheus", metavar="URL", help="Prometheus to read (scraping DCGM/node exporters).")
    ] = None,
    interval: Annotated[str | None, typer.Option(
        "--interval", help="How often to fetch and score the new interval (default 30s).")
    ] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="TOML file (sections watch, detect, http, alertmanager, actions, "
        "kernel_logs, replay, prometheus; see docs/watch.md).")] = None,
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
        "(default $TRAINGUARD_DB, else ./trainguard.db); 'none' for no store.")] = None,
    step: Annotated[str | None, typer.Option(
        "--step", help="Detector sample step (default: Prometheus' scrape interval).")] = None,
    history: Annotated[str | None, typer.Option(
        "--history", help="Warm-up history fetched on a first start (default 6h).")] = None,
    lag: Annotated[str | None, typer.Option(
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
        "--alerts-file): actions and webhook alerts are appended to it.")] = None,
    simulator: Annotated[str | None, typer.Option(
        "--simulator", metavar="URL", help="Replay: read the clock of a `trainguard simulate "
        "--serve` exporter and score in simulated time.")] = None,
    once: Annotated[bool, typer.Option(
        "--once", help="One round (warm up or catch up), then exit.")] = False,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Alert changes as JSON lines on stdout.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every round.")] = False,
) -> None:
    """Run the detector live against Prometheus: warm up from history, score each new
    interval, raise alerts (store, Alertmanager, /metrics), optionally act on them.

    The state is kept in --state-dir: a restart resumes where it stopped and raises the
    alerts it missed. Ctrl-C or SIGTERM stop it cleanly. Exit status: 0 after a clean stop,
    1 when it cannot start, 2 on bad options.
    """
    from trainguard.timeparse import parse_duration
    from trainguard.watch.config import TimeMap, load_config, read_secret

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(message)s")
    try:
        overrides: dict[str, Any] = {
            "prometheus": prometheus, "state_dir": state_dir, "alertmanager_url": alertmanager,
            "supervisor_alerts": supervisor_alerts,
            "interval_s": None if interval is None else parse_duration(interval, "--interval"),
            "history_s": None if history is None else parse_duration(history, "--history"),
            "lag_s": None if lag is None else parse_duration(lag, "--lag"),
            "step_s": None if step is None else max(1, round(parse_duration(step, "--step"))),
            "kernel_logs": tuple(kernel_log) if kernel_log else None,
            "drain": drain or None}
        if listen is not None:
            overrides["listen"] = None if listen == "off" else listen
        if token_file is not None:
            overrides["token"] = read_secret(token_file, "--token-file")
        if simulator is not None:
            clock = _replay_from(simulator)
            wall_step = clock["interval_s"] / clock["speed"]
            overrides["replay"] = TimeMap(clock["speed"], clock["sim_start"],
                                          clock["wall_start"], phase_s=0.9 * wall_step)
            if overrides["step_s"] is None:
                overrides["step_s"] = clock["interval_s"]
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
        _serve(cfg, db, once=once, json_out=json_out)
    except ConfigError as exc:
        fail(str(exc), 2)
    except TrainguardError as exc:
        fail(f"watch: {exc}", 1)


def _serve(cfg: Any, db: str | None, *, once: bool, json_out: bool) -> None:
    from trainguard.evidence.rules import load_rules
    from trainguard.store import Store
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
        store = None if db == "none" else stack.enter_context(Store.open(db))
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
                err.print(f"{change.kind}: {a.kind} alert on {a.node} ({a.summary})",
                          highlight=False, markup=False)

        svc = WatchService(cfg, client=client, store=store, alertmanager=am,
                           executor=executor, kernel_logs=tailer, exporter=exporter,
                           on_change=emit)
        note = svc.load()
        if cfg.listen is not None:
            from trainguard.simulate.serve import parse_listen

            host, port = parse_listen(cfg.listen)
            receiver = WebhookReceiver(alerts_file=cfg.supervisor_alerts, store=store)
            routes = {**exporter.routes(), **receiver.routes(),
                      ("GET", "/status"): lambda _req: Response.json(svc.status()),
                      ("GET", "/healthz"): lambda _req: Response.json({"status": "ok"})}
            server = HttpServer(ServerConfig(host=host, port=port, token=cfg.token), routes)
            try:
                server.start()
            except OSError as exc:
                raise ConfigError(f"--listen {cfg.listen}: {exc.strerror or exc}") from exc
            stack.callback(server.stop)
            where = f"; {server.url}/metrics, /status, /alertmanager/webhook"
        else:
            where = ""
        err.print(f"watching {cfg.prometheus} every {cfg.interval_s:g}s, step {svc.step_s}s; "
                  f"state in {cfg.state_dir} ({note}){where}", highlight=False, markup=False)
        if once:
            report = svc.round()
            for e in report.errors:
                warn(e)
            return
        stop = threading.Event()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            svc.run(stop)
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
        err.print("stopped; state saved", highlight=False)
