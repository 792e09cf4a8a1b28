"""`trainguard watch`'s configuration: one frozen dataclass per part, loaded from a TOML file
and overridden by command-line flags.

    [watch]
    prometheus = "http://prometheus:9090"
    interval = "30s"          # how often a new interval is fetched and scored
    history = "6h"            # warm-up window on a first start
    state_dir = "/var/lib/trainguard/watch"

    [detect]                  # any DetectorConfig field
    block_s = 120

    [http]
    listen = "127.0.0.1:9464" # /metrics, /alertmanager/webhook, /status
    token_file = "/etc/trainguard/token"

    [alertmanager]
    url = "http://alertmanager:9093"

    [actions]                 # ActionPolicy fields; off and dry-run by default
    enabled = false

    [kernel_logs]
    sources = ["/var/log/nodes/"]
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.detect.calibration import Calibration
from trainguard.detect.config import DetectorConfig
from trainguard.errors import ConfigError
from trainguard.fileread import UnreadableFile, read_bounded
from trainguard.telemetry.identity import parse_node_labels
from trainguard.timeparse import parse_duration
from trainguard.valueorigin import InvalidValue, in_file, named
from trainguard.watch.actions import ActionPolicy

__all__ = ["FLAGS", "KEYS", "MAX_CONFIG_BYTES", "MAX_SECRET_BYTES", "TimeMap", "WatchConfig",
           "load_config", "read_limited", "read_secret"]

MAX_SECRET_BYTES = 4096
"""Largest token file read: a bearer token is tens of bytes (a JWT a few hundred)."""
MAX_CONFIG_BYTES = 1 << 20
"""Largest configuration file read."""

_EXCLUDED_PREFIXES = ("up", "scrape_", "prometheus_", "trainguard_", "go_", "process_",
                      "promhttp_", "ALERTS", "alertmanager_", "net_conntrack_")
"""Metric names never scored: Prometheus' own series about its scrapes (``up`` would make every
scrape target a node), other servers' self-metrics, and ours (Prometheus may scrape /metrics)."""


@dataclass(frozen=True, slots=True)
class TimeMap:
    """Detector time from Prometheus time, for replaying a sped-up simulation.

    ``det = sim_start + (prom - wall_start - phase_s) * speed``; the identity by default. The
    phase puts each evaluation point just before the simulator's next sample, where the latest
    scrape certainly holds the sample being asked for.

        >>> m = TimeMap(speed=60, sim_start=0, wall_start=100, phase_s=0.5)
        >>> m.to_prom(120), m.to_det(102.5)
        (102.5, 120.0)
    """

    speed: float = 1.0
    sim_start: float = 0.0
    wall_start: float = 0.0
    phase_s: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.speed) and self.speed > 0):
            raise InvalidValue("replay.speed", "must be a finite number > 0")

    @property
    def identity(self) -> bool:
        return self.speed == 1 and self.sim_start == self.wall_start and self.phase_s == 0

    def to_prom(self, det: float) -> float:
        return self.wall_start + self.phase_s + (det - self.sim_start) / self.speed

    def to_det(self, prom: float) -> float:
        return self.sim_start + (prom - self.wall_start - self.phase_s) * self.speed


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """Everything `WatchService` needs; the defaults are `trainguard watch`'s."""

    prometheus: str
    """Base URL of the Prometheus server scraping the cluster's exporters."""
    interval_s: float = 30.0
    """Wall seconds between two rounds (fetch the new interval, score it, deliver)."""
    step_s: int | None = None
    """Detector sample step (detector seconds); None: the scrape interval Prometheus reports
    for its targets (times the replay speed), else 30."""
    history_s: float = 6 * 3600.0
    """On a first start, how much history (detector seconds) is fetched to warm up."""
    lag_s: float | None = None
    """Wall seconds the newest fetched point stays behind now, so its scrape has landed; None:
    a fifth of the detector step in wall time, at most 10 s."""
    max_chunk_s: float = 2 * 3600.0
    """Largest range (detector seconds) fetched in one go while catching up."""
    metrics: tuple[str, ...] | None = None
    """Metric names or selectors to score; None: every metric Prometheus has, except the
    excluded prefixes."""
    exclude_prefixes: tuple[str, ...] = _EXCLUDED_PREFIXES
    """Metric name prefixes never scored (when `metrics` is None)."""
    discover_s: float = 300.0
    """Wall seconds between two refreshes of the metric names and types."""
    resend_s: float = 60.0
    """Wall seconds between re-posts of the open alerts (Alertmanager forgets alerts that are
    not re-sent within its resolve_timeout, 5 min by default)."""
    state_dir: Path = Path("trainguard-watch")
    """Where the state is kept (see `watch.state`)."""
    detect: DetectorConfig = field(default_factory=DetectorConfig)
    calibration: Calibration | None = None
    """Expected false alarms per alert kind (`--detector-config` from `trainguard tune`);
    None: alerts claim no rate."""
    replay: TimeMap = field(default_factory=TimeMap)
    alertmanager_url: str | None = None
    alertmanager_token: str | None = None
    listen: str | None = "127.0.0.1:9464"
    """HOST:PORT of the HTTP endpoints; None: no HTTP server."""
    token: str | None = None
    """Bearer token the HTTP endpoints require (mandatory off loopback)."""
    actions: ActionPolicy = field(default_factory=ActionPolicy)
    drain: bool = False
    """Actions also drain the node in Slurm (``scontrol update ... state=drain``)."""
    supervisor_alerts: Path | None = None
    """A running supervisor's alerts file (``trainguard run --alerts-file``): actions and
    Alertmanager webhook alerts are appended to it."""
    kernel_logs: tuple[str, ...] = ()
    """Kernel-log sources (see `watch.kernlog.parse_sources`)."""
    prometheus_token: str | None = None
    node_label: tuple[str, ...] = ()
    """The labels that name the node, tried in order (e.g. `kubernetes_node`); empty: the
    built-in order (`telemetry.identity.IdentityConfig.node_labels`)."""
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Key (KEYS) -> where its value came from, as messages name it: a flag, or the file and
    the key (see `load_config`); a key not listed is named as itself."""

    def named(self, exc: InvalidValue) -> ConfigError:
        """`exc`, about one of these values, reworded to name where the value came from."""
        return named(exc, self.origins)

    def __post_init__(self) -> None:
        # Each message names the file's key (KEYS); load_config names the flag instead when
        # the value came from one.
        if not self.prometheus.startswith(("http://", "https://")):
            raise InvalidValue(KEYS["prometheus"], f"must be an http(s):// URL, got "
                               f"{self.prometheus!r}")
        for name in ("interval_s", "history_s", "max_chunk_s", "discover_s", "resend_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise InvalidValue(KEYS[name], "must be > 0")
        if self.step_s is not None and self.step_s <= 0:
            raise InvalidValue(KEYS["step_s"], "must be > 0")
        if self.lag_s is not None and not (math.isfinite(self.lag_s) and self.lag_s >= 0):
            raise InvalidValue(KEYS["lag_s"], "must be >= 0")
        if self.listen is not None:
            from trainguard.simulate.serve import parse_listen

            try:
                parse_listen(self.listen)
            except ConfigError:
                raise InvalidValue(KEYS["listen"], f"must be [HOST:]PORT (port 0..65535) or "
                                   f"off, got {self.listen!r}") from None
        try:
            parse_node_labels(self.node_label)
        except ConfigError as exc:
            raise InvalidValue(KEYS["node_label"], "must name labels (a name, NAME,NAME or a "
                               f"list of names): {exc}") from None
        if self.alertmanager_url is not None and not self.alertmanager_url.startswith(
                ("http://", "https://")):
            raise InvalidValue(KEYS["alertmanager_url"], f"must be an http(s):// URL, got "
                               f"{self.alertmanager_url!r}")


_DURATION_KEYS = {"interval": "interval_s", "history": "history_s", "lag": "lag_s",
                  "max_chunk": "max_chunk_s", "discover": "discover_s", "resend": "resend_s",
                  "step": "step_s"}

KEYS: dict[str, str] = {
    **{f: f"watch.{k}" for k, f in _DURATION_KEYS.items()},
    "prometheus": "watch.prometheus", "state_dir": "watch.state_dir", "drain": "watch.drain",
    "supervisor_alerts": "watch.supervisor_alerts", "metrics": "watch.metrics",
    "exclude_prefixes": "watch.exclude_prefixes", "listen": "http.listen",
    "token": "http.token_file", "alertmanager_url": "alertmanager.url",
    "alertmanager_token": "alertmanager.token_file", "kernel_logs": "kernel_logs.sources",
    "prometheus_token": "prometheus.token_file", "replay": "replay",
    "node_label": "watch.node_label"}
"""WatchConfig field -> the config file's key, the name its validation messages use."""

FLAGS: dict[str, str] = {
    "prometheus": "--prometheus", "interval_s": "--interval", "history_s": "--history",
    "lag_s": "--lag", "step_s": "--step", "state_dir": "--state-dir", "listen": "--listen",
    "token": "--token-file", "alertmanager_url": "--alertmanager", "drain": "--drain",
    "supervisor_alerts": "--supervisor-alerts", "kernel_logs": "--kernel-log",
    "replay": "--simulator", "node_label": "--node-label"}
"""WatchConfig field -> the `trainguard watch` flag that sets it (an override's name in
messages)."""


def _duration(value: Any, key: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a duration like 30s, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return parse_duration(value, key)
    raise ConfigError(f"{key} must be a duration like 30s, got {value!r}")


def _table(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}] must be a table")
    return dict(value)


def _fields(cls: type[Any], values: Mapping[str, Any], section: str) -> dict[str, Any]:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"[{section}] unknown key(s): {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(known))})")
    return dict(values)


def read_secret(path: Any, key: str) -> str:
    """The stripped contents of a token file: at most MAX_SECRET_BYTES of UTF-8, one word
    (it goes into an ``Authorization`` header); ConfigError naming `key` otherwise."""
    raw = read_limited(Path(str(path)), MAX_SECRET_BYTES, key)
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{key}: {path} is not UTF-8 text") from exc
    if not token:
        raise ConfigError(f"{key}: {path} is empty")
    if not token.isprintable() or any(c.isspace() for c in token):
        raise ConfigError(f"{key}: {path} must hold one token (no spaces, line breaks or "
                          "control characters inside it)")
    return token


FIFO_WAIT_S = 10.0
"""How long a named pipe given as a token or config file may take to get its writer."""


def read_limited(path: Path, limit: int, key: str) -> bytes:
    """At most `limit` bytes of a regular file or a pipe (``--token-file <(pass show x)``).

    ConfigError naming `key` for anything else (``/dev/zero``, a directory) or anything
    larger; read without following what the file says its size is. A named pipe whose writer
    does not come within :data:`FIFO_WAIT_S` is an error instead of a wait forever.
    """
    try:
        return read_bounded(path, limit, pipe_wait_s=FIFO_WAIT_S)
    except UnreadableFile as exc:
        if exc.too_large:
            raise ConfigError(f"{key}: {path} is larger than {limit} bytes") from None
        raise ConfigError(f"{key}: cannot read {path}: {exc.reason}") from None


def load_config(path: Path | None, overrides: Mapping[str, Any]) -> WatchConfig:
    """The TOML file (if any) with `overrides` on top.

    `overrides` maps WatchConfig field names to the values given on the command line; a field
    that is present is given, even as None (``listen=None``: the HTTP server switched off), a
    field not given is absent. Every mistake is one ConfigError naming where the value came
    from: the flag (FLAGS) for an override, the file and its key (KEYS) otherwise.
    """
    kw: dict[str, Any] = {}
    if path is not None:
        doc = _read_doc(path)
        try:
            kw = _from_doc(doc)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    # A default is named by the flag that changes it; then the file's keys, then the flags.
    origins = {KEYS[f]: flag for f, flag in FLAGS.items()}
    origins.update({KEYS[f]: in_file(KEYS[f], path) for f in kw if f in KEYS})
    for name, value in overrides.items():
        kw[name] = value
        origins[KEYS.get(name, name)] = FLAGS.get(name, name)
    if "prometheus" not in kw:
        raise ConfigError("give --prometheus URL (or watch.prometheus in the config file)")
    try:
        return WatchConfig(**kw, origins=origins)
    except InvalidValue as exc:
        raise named(exc, origins) from None


def _read_doc(path: Path) -> dict[str, Any]:
    raw = read_limited(path, MAX_CONFIG_BYTES, "--config")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{path}: not valid TOML: nested too deeply") from exc


def _from_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    """WatchConfig fields from a parsed config file (errors name the key, not the file)."""
    unknown = sorted(set(doc) - {"watch", "detect", "http", "alertmanager", "actions",
                                 "kernel_logs", "replay", "prometheus"})
    if unknown:
        hint = ("; [calibration] is in the detector config `trainguard tune` writes: pass that "
                "file with --detector-config FILE" if "calibration" in unknown else "")
        raise ConfigError(f"unknown section(s): {', '.join(unknown)}{hint}")
    kw = _watch_section(_table(doc, "watch"))
    prom = _table(doc, "prometheus")
    if "token_file" in prom:
        kw["prometheus_token"] = read_secret(prom.pop("token_file"), "prometheus.token_file")
    if prom:
        raise ConfigError(f"[prometheus] unknown key(s): {', '.join(sorted(prom))}")
    try:
        kw["detect"] = DetectorConfig(**_fields(DetectorConfig, _table(doc, "detect"), "detect"))
        kw["actions"] = ActionPolicy(**_fields(ActionPolicy, _table(doc, "actions"), "actions"))
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
    http = _table(doc, "http")
    if "listen" in http:
        listen = http.pop("listen")
        kw["listen"] = None if listen in ("", "off", False) else str(listen)
    if "token_file" in http:
        kw["token"] = read_secret(http.pop("token_file"), "http.token_file")
    if http:
        raise ConfigError(f"[http] unknown key(s): {', '.join(sorted(http))}")
    am = _table(doc, "alertmanager")
    if "url" in am:
        kw["alertmanager_url"] = str(am.pop("url"))
    if "token_file" in am:
        kw["alertmanager_token"] = read_secret(am.pop("token_file"), "alertmanager.token_file")
    if am:
        raise ConfigError(f"[alertmanager] unknown key(s): {', '.join(sorted(am))}")
    logs = _table(doc, "kernel_logs")
    sources = logs.pop("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise ConfigError("kernel_logs.sources must be a list of strings")
    if logs:
        raise ConfigError(f"[kernel_logs] unknown key(s): {', '.join(sorted(logs))}")
    if sources:
        kw["kernel_logs"] = tuple(sources)
    replay = _table(doc, "replay")
    if replay:
        try:
            kw["replay"] = TimeMap(**_fields(TimeMap, replay, "replay"))
        except TypeError as exc:
            raise ConfigError(f"[replay]: {exc}") from exc
    return kw


def _watch_section(table: Mapping[str, Any]) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    for key, value in table.items():
        if key in _DURATION_KEYS:
            kw[_DURATION_KEYS[key]] = _duration(value, f"watch.{key}")
        elif key in ("state_dir", "supervisor_alerts"):
            kw[key] = Path(str(value))
        elif key in ("metrics", "exclude_prefixes"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"watch.{key} must be a list of strings")
            kw[key] = tuple(value)
        elif key == "prometheus":
            if not isinstance(value, str):
                raise ConfigError(f"watch.prometheus must be a URL string, got {value!r}")
            kw[key] = value
        elif key == "node_label":
            if not isinstance(value, str | list):
                raise ConfigError(f"watch.node_label must be a label name or a list of them, "
                                  f"got {value!r}")
            kw[key] = parse_node_labels(value, "watch.node_label")
        elif key == "drain":
            if not isinstance(value, bool):
                raise ConfigError(f"watch.drain must be true or false, got {value!r}")
            kw[key] = value
        else:
            raise ConfigError(f"[watch] unknown key: {key}")
    if "step_s" in kw:
        kw["step_s"] = int(kw["step_s"])
    return kw
