"""Prometheus HTTP API client (standard library only) and a reader into `TelemetryBuilder`.

Range queries are split into windows of at most `MAX_POINTS` points per series (Prometheus
refuses more than 11,000): each window starts one step after the previous one ended, so the
samples are neither duplicated nor missing. Connection errors, 5xx and 429 are retried with
exponential backoff; any other 4xx is not, and its Prometheus error message is shown. An answer
that is not the Prometheus API's JSON (an HTML page, a proxy's login form: a wrong URL) is a
`NotPrometheus` error quoting a short excerpt (`telemetry.promanswer`), never the whole body.

    >>> client = PrometheusClient("http://prometheus:9090", bearer_token="...")  # doctest: +SKIP
    >>> read_prometheus(client, builder, metrics=["DCGM_FI_DEV_GPU_TEMP"],
    ...                 start=t0, end=t1, step_s=30)                             # doctest: +SKIP
"""

from __future__ import annotations

import base64
import http.client
import logging
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainguard.errors import ConfigError, TelemetryError
from trainguard.telemetry.builder import TelemetryBuilder
from trainguard.telemetry.frame import FloatArray, MetricKind
from trainguard.telemetry.promanswer import Answer, classify
from trainguard.valueorigin import InvalidValue

__all__ = ["MAX_POINTS", "NotPrometheus", "PrometheusClient", "PrometheusStats",
           "PrometheusUnreachable", "RangeSeries", "Transport", "metric_kinds", "read_prometheus"]

log = logging.getLogger(__name__)

MAX_POINTS = 11_000
"""Prometheus' limit on points per series in one range query."""

Transport = Callable[[urllib.request.Request, float], tuple[int, bytes]]
"""Sends a request with a timeout; returns (HTTP status, body); raises OSError when unreachable."""

RangeSeries = tuple[dict[str, str], FloatArray, FloatArray]
"""One series of a range query: (labels including `__name__`, timestamps s, values)."""

_PLAIN_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KINDS = {"counter": MetricKind.COUNTER, "gauge": MetricKind.GAUGE}


def _urllib_transport(request: urllib.request.Request, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


class _Unreachable(Exception):
    """Internal: a connection-level failure worth retrying."""


class PrometheusUnreachable(TelemetryError):
    """No connection to the Prometheus server, after every retry."""


class NotPrometheus(TelemetryError):
    """The server answered, but not as the Prometheus HTTP API does (a wrong URL, a proxy's or
    a web server's page): what it answered is in the message, as a short excerpt."""


class PrometheusClient:
    """A small Prometheus HTTP API client with retries; `transport`/`sleep` are injectable.

        >>> c = PrometheusClient("http://localhost:9090", retries=0)
        >>> c.url
        'http://localhost:9090'
    """

    def __init__(self, url: str, *, bearer_token: str | None = None,
                 basic_auth: tuple[str, str] | None = None, timeout_s: float = 30,
                 retries: int = 4, backoff_s: float = 0.5, max_concurrency: int = 4,
                 transport: Transport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidValue("telemetry.prometheus.url",
                               f"must start with http:// or https://, got {url!r}")
        if bearer_token is not None and basic_auth is not None:
            raise ConfigError("telemetry.prometheus: give bearer_token or basic_auth, not both")
        if retries < 0 or timeout_s <= 0 or backoff_s < 0 or max_concurrency < 1:
            raise ConfigError("telemetry.prometheus: retries >= 0, timeout_s > 0, backoff_s >= 0 "
                              "and max_concurrency >= 1 are required")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_concurrency = max_concurrency
        self._transport = transport or _urllib_transport
        self._sleep = sleep
        self._headers = {"Accept": "application/json", "Accept-Encoding": "identity",
                         "User-Agent": "trainguard"}
        if bearer_token is not None:
            self._headers["Authorization"] = f"Bearer {bearer_token}"
        elif basic_auth is not None:
            raw = f"{basic_auth[0]}:{basic_auth[1]}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()

    # -- HTTP -------------------------------------------------------------------------------
    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        """GET `path` (e.g. `/api/v1/query_range`) and return the response's `data` field.

        Raises PrometheusUnreachable (no connection, after the retries), NotPrometheus (the
        answer is not the Prometheus API's: a wrong URL) or TelemetryError (Prometheus
        refused or failed the request); each message is one short line.
        """
        query = urllib.parse.urlencode(params or {}, doseq=True)
        url = f"{self.url}{path}" + (f"?{query}" if query else "")
        problem: TelemetryError = TelemetryError(f"no request made to {self.url}")
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            request = urllib.request.Request(url, headers=self._headers, method="GET")
            try:
                status, body = self._send(request)
            except _Unreachable as exc:
                problem = PrometheusUnreachable(f"cannot reach Prometheus at {self.url}: {exc}")
                log.debug("attempt %d: %s", attempt + 1, problem)
                continue
            answer = classify(status, body)
            if status == 429 or status >= 500:
                # Retried whatever the body: a proxy in front of a restarting Prometheus
                # answers 502/503 with its own page.
                problem = TelemetryError(
                    f"Prometheus at {self.url} answered HTTP {status} to {path} after "
                    f"{attempt + 1} attempts: {answer.error}")
                log.debug("attempt %d: %s", attempt + 1, problem)
                continue
            return _data(answer, self.url, path)
        raise problem

    def _send(self, request: urllib.request.Request) -> tuple[int, bytes]:
        try:
            return self._transport(request, self.timeout_s)
        except urllib.error.URLError as exc:
            raise _Unreachable(str(exc.reason)) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise _Unreachable(str(exc) or type(exc).__name__) from exc

    # -- API --------------------------------------------------------------------------------
    def series_names(self, match: list[str] | None = None, start: float | None = None,
                     end: float | None = None) -> list[str]:
        """Metric names, optionally of series matching the `match[]` selectors in [start, end]."""
        params: dict[str, Any] = {}
        if match:
            params["match[]"] = match
        if start is not None:
            params["start"] = _fmt(start)
        if end is not None:
            params["end"] = _fmt(end)
        data = self.get("/api/v1/label/__name__/values", params)
        return sorted(str(n) for n in data or [])

    def metadata(self) -> dict[str, MetricKind]:
        """Declared types per metric name (counter/gauge); {} when the server has none."""
        data = self.get("/api/v1/metadata")
        out: dict[str, MetricKind] = {}
        if isinstance(data, dict):
            for name, entries in data.items():
                if entries and isinstance(entries, list) and isinstance(entries[0], dict):
                    out[str(name)] = _KINDS.get(str(entries[0].get("type")), MetricKind.UNKNOWN)
        return out

    def windows(self, start: float, end: float, step_s: float) -> list[tuple[float, float]]:
        """Query windows covering [start, end] with <= MAX_POINTS points each, back to back."""
        span = (MAX_POINTS - 1) * step_s
        out: list[tuple[float, float]] = []
        s = start
        while s <= end:
            e = min(s + span, end)
            out.append((s, e))
            s = e + step_s
        return out

    def query_range(self, query: str, start: float, end: float, step_s: float,
                    ) -> list[RangeSeries]:
        """Run a range query in windows of <= MAX_POINTS points; series merged across windows."""
        if step_s <= 0:
            raise ConfigError("telemetry.prometheus.step_s must be > 0")
        merged: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], list[FloatArray],
                                                         list[FloatArray]]] = {}
        for s, e in self.windows(start, end, step_s):
            data = self.get("/api/v1/query_range", {
                "query": query, "start": _fmt(s), "end": _fmt(e), "step": _fmt(step_s)})
            for item in (data or {}).get("result", []):
                labels = {str(k): str(v) for k, v in item.get("metric", {}).items()}
                points = item.get("values") or []
                if not points:
                    continue
                ts = np.fromiter((p[0] for p in points), dtype=np.float64, count=len(points))
                vals = np.array([p[1] for p in points], dtype=np.float64)
                key = tuple(sorted(labels.items()))
                entry = merged.setdefault(key, (labels, [], []))
                entry[1].append(ts)
                entry[2].append(vals)
        return [(labels, np.concatenate(ts), np.concatenate(vals))
                for labels, ts, vals in merged.values()]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _fmt(t: float) -> str:
    return f"{t:.3f}".rstrip("0").rstrip(".")


def _data(answer: Answer, url: str, path: str) -> Any:
    """The `data` of a successful answer; one short error line otherwise."""
    status = answer.status
    if not answer.is_prometheus:
        if status in (401, 403, 407):
            raise TelemetryError(f"{url} refused {path} (HTTP {status}: not authorised; check "
                                 f"the bearer token or basic auth): {answer.what}")
        raise NotPrometheus(f"{url} does not look like a Prometheus server: {path} answered "
                            f"HTTP {status} with {answer.what} (give the server's base URL, "
                            "e.g. http://prometheus:9090)")
    if status >= 400 or answer.envelope is None or answer.envelope.get("status") != "success":
        raise TelemetryError(f"Prometheus at {url} rejected {path} (HTTP {status}): "
                             f"{answer.error}")
    return answer.envelope.get("data")


@dataclass(frozen=True, slots=True)
class PrometheusStats:
    metrics: int
    series: int
    samples: int
    start: float
    end: float


def read_prometheus(client: PrometheusClient, builder: TelemetryBuilder, *,
                    metrics: list[str] | None = None, start: float, end: float, step_s: float,
                    progress: Callable[[int, int], None] | None = None, align: bool = True,
                    kinds: Mapping[str, MetricKind] | None = None,
                    retime: Callable[[FloatArray], FloatArray] | None = None,
                    ) -> PrometheusStats:
    """Fetch `metrics` (names or PromQL selectors; None = every metric name in the range) over
    [start, end] (unix seconds, aligned down/up to multiples of `step_s` unless `align` is
    false) into `builder`.

    Queries run `client.max_concurrency` at a time; types come from `kinds`, else from
    `/api/v1/metadata` when the server has it. `retime` maps the returned timestamps before
    they reach `builder` (the watch service's replay clock). `progress(metrics_done,
    metrics_total)` follows the queries.
    """
    if step_s <= 0:
        raise ConfigError("telemetry.prometheus.step_s must be > 0")
    if end < start:
        raise ConfigError("telemetry.prometheus: end is before start")
    a = math.floor(start / step_s) * step_s if align else start
    b = math.ceil(end / step_s) * step_s if align else end
    if kinds is None:
        kinds = metric_kinds(client)
    if metrics is not None:
        queries = list(metrics)
    else:
        # Names that are not plain identifiers (Prometheus 3 allows UTF-8) need a selector.
        queries = [n if _PLAIN_NAME.fullmatch(n) else f'{{__name__="{_escape(n)}"}}'
                   for n in client.series_names(None, a, b)]
    n_series = n_samples = 0
    sampled = {q: sampled_query(q, step_s) for q in queries}
    with ThreadPoolExecutor(max_workers=client.max_concurrency) as pool:
        futures: dict[Future[list[RangeSeries]], str] = {
            pool.submit(client.query_range, sampled[q][0], a, b, step_s): q for q in queries}
        pending = set(futures)
        done_count = 0
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in done:
                failure = fut.exception()
                if failure is not None:
                    for other in pending:
                        other.cancel()
                    raise failure
                query = futures[fut]
                for labels, ts, vals in fut.result():
                    name = labels.pop("__name__", sampled[query][1] or query)
                    builder.add_series(name, kinds.get(name, MetricKind.UNKNOWN), labels,
                                       ts if retime is None else retime(ts), vals)
                    n_series += 1
                    n_samples += int(ts.size)
                done_count += 1
                if progress is not None:
                    progress(done_count, len(queries))
    return PrometheusStats(len(queries), n_series, n_samples, a, b)


_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?", re.DOTALL)
_NAME_MATCHER = re.compile(r'__name__\s*=\s*"((?:[^"\\]|\\.)*)"')


def sampled_query(query: str, step_s: float) -> tuple[str, str | None]:
    """The query that reads `query` on the grid as the file readers do, and its metric name.

    Prometheus evaluates a plain selector at time t with the newest sample of the last 5 min
    (its lookback): a backfilled series (no staleness markers) would read as present 5 min
    after it stopped (a GPU that fell off the bus) and a gap would be filled. The file readers
    put each sample on the first grid point at or after it (`grid_index`) and leave gaps
    empty. ``last_over_time(x[step - 1ms])`` is exactly that: the newest sample in (t - step,
    t]. Only a selector of one metric name is wrapped (the function drops ``__name__``, which
    is returned here instead); any other PromQL expression runs as given.

    >>> sampled_query("DCGM_FI_DEV_GPU_TEMP", 30)
    ('last_over_time(DCGM_FI_DEV_GPU_TEMP[29999ms])', 'DCGM_FI_DEV_GPU_TEMP')
    >>> sampled_query('rate(x_total[5m])', 30)
    ('rate(x_total[5m])', None)
    """
    q = query.strip()
    m = _SELECTOR.fullmatch(q)
    name: str | None = None
    if m is not None and not q.startswith("{"):
        name = m.group(1)
    elif q.startswith("{") and q.endswith("}"):
        found = _NAME_MATCHER.findall(q)
        if len(found) == 1 and "__name__=~" not in q.replace(" ", ""):
            name = found[0].replace('\\"', '"').replace("\\\\", "\\")
    if name is None:
        return query, None
    window_ms = max(1, round(step_s * 1000) - 1)
    return f"last_over_time({q}[{window_ms}ms])", name


def metric_kinds(client: PrometheusClient) -> dict[str, MetricKind]:
    """Declared metric types, or {} (with a log line) when the server cannot tell.

    An unreachable server is an error; any other failure is not, here: a Prometheus older than
    2.15 has no /api/v1/metadata (it answers a plain 404), and the next request, which every
    Prometheus answers, says clearly when the URL is not a Prometheus at all.
    """
    try:
        return client.metadata()
    except PrometheusUnreachable:
        raise
    except TelemetryError as exc:
        log.info("no metric metadata from %s (%s); types from names only", client.url, exc)
        return {}
