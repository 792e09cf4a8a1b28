"""An in-memory Prometheus for the watch service's unit tests: it "scrapes" the simulator's
live exporter at every multiple of the scrape interval (Prometheus time = simulated time) and
answers the few HTTP API calls the service makes, with Prometheus' evaluation rules (latest
sample at or before the evaluation time, 5-minute lookback, staleness when a series vanishes).
The integration tests run the real server; this one lets unit tests drive time."""

from __future__ import annotations

import bisect
import json
import math
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from trainguard.simulate.serve import LiveExporter
from trainguard.telemetry.openmetrics import parse_series_text

LOOKBACK_S = 300.0
_LAST_OVER_TIME = re.compile(r"last_over_time\((\w+)\[(\d+)ms\]\)")


@dataclass
class _Series:
    labels: dict[str, str]
    ts: list[float] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)
    """None: a staleness marker."""


class FakePrometheus:
    def __init__(self, exporter: LiveExporter, scrape_s: int = 30) -> None:
        self.exporter = exporter
        self.scrape_s = scrape_s
        self.series: dict[tuple[tuple[str, str], ...], _Series] = {}
        self.kinds: dict[str, str] = {}
        self.last_scrape: float | None = None
        self.down = False
        self.requests = 0

    def advance(self, now: float) -> None:
        """Scrape every scrape time up to `now` not scraped yet."""
        cfg = self.exporter.cfg
        s = cfg.start_s if self.last_scrape is None else self.last_scrape + self.scrape_s
        while s <= now:
            self._scrape(s)
            self.last_scrape = s
            s += self.scrape_s

    def _scrape(self, t: float) -> None:
        seen = set()
        for line in self.exporter.exposition(t).splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.kinds[name] = kind
                continue
            if not line or line.startswith("#"):
                continue
            text, _, value = line.rpartition(" ")
            name, labels = parse_series_text(text)
            labels = {"__name__": name, **labels}
            key = tuple(sorted(labels.items()))
            seen.add(key)
            s = self.series.setdefault(key, _Series(labels))
            s.ts.append(t)
            s.values.append(float(value))
        for key, s in self.series.items():
            if key not in seen and s.values and s.values[-1] is not None:
                s.ts.append(t)
                s.values.append(None)

    def _at(self, s: _Series, e: float, window: float | None = None) -> float | None:
        """The instant value at `e`; with `window`, ``last_over_time(x[window])``: the newest
        sample in [e - window, e] (a staleness marker is no sample)."""
        i = bisect.bisect_right(s.ts, e + 1e-9) - 1
        if window is not None:
            while i >= 0 and s.values[i] is None:
                i -= 1
            if i < 0 or e - s.ts[i] > window + 1e-9:
                return None
            return s.values[i]
        if i < 0 or s.values[i] is None or e - s.ts[i] > LOOKBACK_S:
            return None
        return s.values[i]

    # -- HTTP ---------------------------------------------------------------------------------
    def transport(self, request: urllib.request.Request, _timeout: float) -> tuple[int, bytes]:
        if self.down:
            raise OSError("connection refused")
        self.requests += 1
        url = urllib.parse.urlsplit(request.full_url)
        q = urllib.parse.parse_qs(url.query)
        data: object
        if url.path == "/api/v1/targets":
            data = {"activeTargets": [{"scrapeInterval": f"{self.scrape_s}s"}]}
        elif url.path == "/api/v1/metadata":
            data = {n: [{"type": k, "help": "", "unit": ""}] for n, k in self.kinds.items()}
        elif url.path == "/api/v1/label/__name__/values":
            data = sorted({s.labels["__name__"] for s in self.series.values()})
        elif url.path == "/api/v1/query_range":
            start, end, step = (float(q[k][0]) for k in ("start", "end", "step"))
            name = q["query"][0]
            window: float | None = None
            if (m := _LAST_OVER_TIME.fullmatch(name)) is not None:
                name, window = m.group(1), int(m.group(2)) / 1000.0
            n = math.floor((end - start) / step + 1e-9) + 1
            evals = [start + k * step for k in range(n)]
            result = []
            for s in self.series.values():
                if s.labels["__name__"] != name:
                    continue
                points = [[e, str(v)] for e in evals
                          if (v := self._at(s, e, window)) is not None]
                labels = s.labels if window is None else {
                    k: v for k, v in s.labels.items() if k != "__name__"}
                if points:
                    result.append({"metric": labels, "values": points})
            data = {"resultType": "matrix", "result": result}
        else:
            return 404, b'{"status":"error","error":"not found"}'
        return 200, json.dumps({"status": "success", "data": data}).encode()
