"""The simulated cluster as a live exporter: dcgm/node-exporter metrics over HTTP, sped up.

A `SimClock` maps wall time to simulated time: `sim = sim_start + (wall - wall_start) * speed`.
`LiveExporter` answers a scrape with every series' latest simulated sample at or before the
current simulated time, in the names and labels of the files `simulate_to_dir` writes.

Samples carry no timestamp: Prometheus stores each at its scrape time (wall time), as for a real
exporter. Explicit timestamps would work as well for a live run, but they switch off Prometheus'
staleness handling (2.42): a GPU that falls off the bus would linger for 5 minutes in instant
queries instead of vanishing at the next scrape. `/truth` gives the fault schedule in both
simulated and wall time, so a test can tell when each precursor and XID reach Prometheus.

Windows are generated lazily, in order, one 2-hour window at a time (the model carries state
between windows): memory stays one window however long the span. Asking for an earlier window
than the current one regenerates from the start (deterministic, only tests do this).

    >>> from trainguard.simulate import SimConfig
    >>> exporter = LiveExporter.from_config(SimConfig(nodes=2, gpus_per_node=1, days=0.1),
    ...                                     speed=60, clock=lambda: 1000.0)
    >>> exporter.clock.to_wall(exporter.clock.sim_start + 600)
    1010.0
    >>> "DCGM_FI_DEV_GPU_UTIL{gpu=" in exporter.exposition()
    True
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from trainguard.simulate.config import WINDOW_S, SimConfig
from trainguard.simulate.metrics import SimChunk
from trainguard.simulate.model import WindowModel
from trainguard.simulate.scenario import Scenario, build_scenario
from trainguard.simulate.writers import label_records
from trainguard.valueorigin import InvalidValue

__all__ = ["CONTENT_TYPE", "ExporterServer", "LiveExporter", "SimClock", "parse_listen"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Prometheus text exposition format, as dcgm-exporter and node-exporter serve it."""

_TIME_KEYS = ("time", "start", "end", "precursor_start", "offline_start", "back")
"""Fields of the label records that are simulated unix times (each gets a `<key>_wall`)."""


@dataclass(frozen=True, slots=True)
class SimClock:
    """Simulated time from wall time: `speed` simulated seconds per wall second.

        >>> c = SimClock(speed=60, sim_start=0, wall_start=100.0, wall=lambda: 101.5)
        >>> c.now(), c.to_wall(120)
        (90.0, 102.0)
    """

    speed: float
    """Simulated seconds per wall second (60: one simulated minute per second)."""
    sim_start: float
    """Simulated unix time at `wall_start`."""
    wall_start: float
    """Wall unix time when the simulated clock read `sim_start`."""
    wall: Callable[[], float] = time.time
    """The wall clock (injectable for tests)."""

    def __post_init__(self) -> None:
        if not self.speed > 0 or not np.isfinite(self.speed):
            raise InvalidValue("simulate.speed", "must be a finite number > 0")

    def now(self) -> float:
        return self.to_sim(self.wall())

    def to_sim(self, wall_s: float) -> float:
        return self.sim_start + (wall_s - self.wall_start) * self.speed

    def to_wall(self, sim_s: float) -> float:
        return self.wall_start + (sim_s - self.sim_start) / self.speed


class LiveExporter:
    """Serves a `Scenario`'s telemetry as it evolves on a `SimClock`.

        >>> exporter = LiveExporter.from_config(cfg, speed=60)  # doctest: +SKIP
        >>> with exporter.serve("127.0.0.1", 0) as server:      # doctest: +SKIP
        ...     print(server.url + "/metrics")

    `start_at_s` is the simulated time the clock reads now (default: the span's start), e.g. a
    few minutes before an injected precursor to keep a live test short.
    """

    def __init__(self, scenario: Scenario, speed: float = 60.0, *,
                 start_at_s: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        cfg = scenario.cfg
        sim_start = float(cfg.start_s if start_at_s is None else start_at_s)
        if not cfg.start_s <= sim_start < cfg.end_s:
            raise InvalidValue("simulate.start_at", f"must lie in the simulated span "
                                                    f"[{cfg.start_s}, {cfg.end_s})")
        self.scenario = scenario
        self.clock = SimClock(speed, sim_start, clock(), clock)
        self._lock = threading.Lock()
        self._model: WindowModel | None = None
        self._next_window = 0
        self._chunk: SimChunk | None = None
        self._window = -1
        self._rendered: dict[int, str] = {}
        """Per sample index of the current window: its exposition text (scrapes repeat)."""
        self._prefixes: dict[str, list[str]] = {}

    @classmethod
    def from_config(cls, cfg: SimConfig, speed: float = 60.0, *,
                    start_at_s: float | None = None,
                    clock: Callable[[], float] = time.time) -> LiveExporter:
        return cls(build_scenario(cfg), speed, start_at_s=start_at_s, clock=clock)

    @property
    def cfg(self) -> SimConfig:
        return self.scenario.cfg

    # -- samples ----------------------------------------------------------------------------
    def exposition(self, sim_s: float | None = None, *, timestamps: bool = False) -> str:
        """Prometheus text of every series' latest sample at or before `sim_s` (default: now).

        Empty (no series) before the first sample and after the span. `timestamps` appends
        each sample's own time mapped to wall milliseconds (for offline parsing; the HTTP
        endpoint never does, see the module docstring).
        """
        t = self.clock.now() if sim_s is None else sim_s
        cfg = self.cfg
        if not cfg.start_s <= t < cfg.end_s:
            return ""
        w = int((t - cfg.first_window_s) // WINDOW_S)
        with self._lock:
            chunk = self._chunk_for(w)
            k = int(np.searchsorted(chunk.times, t, side="right")) - 1
            if k < 0:
                return ""
            if timestamps:
                return self._render(chunk, k, timestamps=True)
            text = self._rendered.get(k)
            if text is None:
                text = self._rendered[k] = self._render(chunk, k, timestamps=False)
            return text

    def _chunk_for(self, w: int) -> SimChunk:
        """Window `w`, generating the windows up to it in order (call with the lock held)."""
        if w == self._window and self._chunk is not None:
            return self._chunk
        if self._model is None or w < self._next_window:
            self._model, self._next_window = WindowModel(self.scenario), 0
        t0 = time.perf_counter()
        # Here w >= self._next_window: at least one window is generated. Earlier windows are
        # generated only for the state they carry, then dropped.
        chunk = self._model.window(self._next_window)
        self._next_window += 1
        while self._next_window <= w:
            chunk = self._model.window(self._next_window)
            self._next_window += 1
        self._chunk, self._window, self._rendered = chunk, w, {}
        log.debug("generated window %d (%d s) in %.3f s", w, chunk.start_s,
                  time.perf_counter() - t0)
        return chunk

    def _render(self, chunk: SimChunk, k: int, *, timestamps: bool) -> str:
        suffix = "\n"
        if timestamps:
            suffix = f" {round(self.clock.to_wall(int(chunk.times[k])) * 1000)}\n"
        job_ids = chunk.job_ids
        parts: list[str] = []
        for block in chunk.metrics:
            spec = block.spec
            col = block.values[:, k]
            ok = ~np.isnan(col)
            if not ok.any():
                continue
            name = spec.sample_name
            parts.append(f"# HELP {name} {spec.help}\n# TYPE {name} {spec.type_word}\n")
            vals = (np.where(ok, col, 0).astype(np.int64).tolist() if spec.decimals == 0
                    else np.round(np.where(ok, col, 0), spec.decimals).tolist())
            prefixes = self._prefix_list(block.spec.name, name, block.labels)
            gpn = col.shape[0] // len(chunk.node_names)
            for r, (good, v) in enumerate(zip(ok.tolist(), vals, strict=True)):
                if not good:
                    continue
                extra = ""
                if spec.per_gpu and self.cfg.job_label:
                    j = int(chunk.node_job[r // gpn, k])
                    extra = f',hpc_job="{job_ids[j]}"' if j >= 0 else ""
                parts.append(f"{prefixes[r]}{extra}}} {v}{suffix}")
        return "".join(parts)

    def _prefix_list(self, family: str, sample_name: str,
                     labels: tuple[tuple[tuple[str, str], ...], ...]) -> list[str]:
        cached = self._prefixes.get(family)
        if cached is None:
            cached = self._prefixes[family] = [
                sample_name + "{" + ",".join(f'{k}="{v}"' for k, v in row) for row in labels]
        return cached

    # -- truth and health -------------------------------------------------------------------
    def truth(self) -> dict[str, Any]:
        """The clock and the ground truth (`labels.jsonl` records), each time also in wall
        seconds as `<key>_wall`."""
        to_wall = self.clock.to_wall
        records = []
        for rec in label_records(self.scenario):
            rec = dict(rec)
            for key in _TIME_KEYS:
                if isinstance(rec.get(key), int | float):
                    rec[f"{key}_wall"] = round(to_wall(rec[key]), 3)
            records.append(rec)
        return {"clock": self._clock_info(), "nodes": list(self.scenario.fleet.node_names),
                "failures": [r for r in records if r["type"] == "failure"],
                "events": [r for r in records if r["type"] != "failure"]}

    def health(self) -> dict[str, Any]:
        now = self.clock.now()
        state = ("waiting" if now < self.cfg.start_s
                 else "running" if now < self.cfg.end_s else "finished")
        return {"status": state, "sim_now": round(now, 3), **self._clock_info()}

    def _clock_info(self) -> dict[str, Any]:
        c, cfg = self.clock, self.cfg
        return {"speed": c.speed, "sim_start": c.sim_start, "wall_start": round(c.wall_start, 3),
                "interval_s": cfg.interval_s,
                "interval_wall_s": cfg.interval_s / c.speed,
                "span_start": cfg.start_s, "span_end": cfg.end_s,
                "span_end_wall": round(c.to_wall(cfg.end_s), 3)}

    # -- HTTP -------------------------------------------------------------------------------
    def serve(self, host: str = "127.0.0.1", port: int = 0) -> ExporterServer:
        """Bind `host:port` (0: a free port) and serve on a background thread."""
        server = ExporterServer(self, host, port)
        server.start()
        return server


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # http.server names it
        exporter = self.server.exporter
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, CONTENT_TYPE, exporter.exposition())
        elif path == "/truth":
            self._send(200, "application/json", json.dumps(exporter.truth()))
        elif path in ("/healthz", "/-/healthy"):
            self._send(200, "application/json", json.dumps(exporter.health()))
        else:
            self._send(404, "text/plain; charset=utf-8", "not found: try /metrics\n")

    def _send(self, code: int, content_type: str, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], exporter: LiveExporter) -> None:
        self.exporter = exporter
        super().__init__(address, _Handler)


class ExporterServer:
    """A bound HTTP server for a `LiveExporter`; `url` is `http://host:port`.

    `start()` serves on a daemon thread, `serve_forever()` on the caller's; `close()` (or
    leaving the `with` block) stops serving and releases the port.
    """

    def __init__(self, exporter: LiveExporter, host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            self._httpd = _HTTPServer((host, port), exporter)
        except OSError as exc:
            raise InvalidValue("simulate.serve", f"{host}:{port}: cannot listen there: "
                                                 f"{exc.strerror or exc}") from exc
        self.exporter = exporter
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name="trainguard-exporter", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ExporterServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_listen(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """`--serve [HOST:]PORT` -> (host, port); `[::1]:9400` for IPv6."""
    host, sep, port_text = text.strip().rpartition(":")
    host = host.strip("[]") if sep else default_host
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535 or (sep and not host):
        raise InvalidValue("simulate.serve", f"{text!r} is not [HOST:]PORT (port 0..65535)")
    return host, int(port_text)
