"""``/metrics``: the watch service's state in the Prometheus text format.

The service loop builds a :class:`MetricsSnapshot` after each round and hands it to
:meth:`MetricsExporter.update`; a scrape renders the latest snapshot. Counters come from the
snapshot too (not incremented here), so a restarted service that restores its persisted counts
exports them unchanged. The exporter has its own ``CollectorRegistry``: nothing is registered in
prometheus_client's global one, and two exporters in one process do not collide.

    >>> exporter = MetricsExporter()
    >>> exporter.update(MetricsSnapshot(node_scores={"gpu-node-1": 3.5}))
    >>> b'trainguard_node_risk_score{node="gpu-node-1"} 3.5' in exporter.render()
    True
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from trainguard.watch import names
from trainguard.watch.http import Request, Response, Routes

METRICS_PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""What ``generate_latest`` writes (newer prometheus_client advertise 1.0.0 for the same text,
which older Prometheus servers do not know)."""


@dataclass(frozen=True, slots=True)
class OpenAlert:
    """An alert that is open right now on one node."""

    node: str
    severity: str
    kind: str
    """``predictive`` or ``hard`` (the detector's alert kinds)."""


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """What ``/metrics`` shows: the watch service's state after one round."""

    node_scores: Mapping[str, float] = field(default_factory=dict)
    """Current risk score per node (0 = normal)."""
    open_alerts: tuple[OpenAlert, ...] = ()
    alerts_total: Mapping[str, int] = field(default_factory=dict)
    """Alerts raised so far, by severity."""
    errors_total: Mapping[str, int] = field(default_factory=dict)
    """Errors so far, by stage (``query``, ``score``, ``alertmanager``, ``webhook``)."""
    actions_total: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """Actions so far, by ``(action, outcome)``."""
    last_success: float | None = None
    """Unix time of the last interval the detector scored; None before the first."""
    lag_s: float | None = None
    """How far the scored data lags behind wall time; None before the first round."""

    def __post_init__(self) -> None:
        for label, counts in (("alerts_total", self.alerts_total),
                              ("errors_total", self.errors_total)):
            for key, value in counts.items():
                if value < 0:
                    raise ValueError(f"snapshot.{label}[{key!r}] must be >= 0, got {value}")
        for akey, value in self.actions_total.items():
            if value < 0:
                raise ValueError(f"snapshot.actions_total[{akey!r}] must be >= 0, got {value}")


class _SnapshotCollector:
    """A custom collector: yields the families of whatever snapshot is current."""

    def __init__(self) -> None:
        self.snapshot = MetricsSnapshot()

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        risk = GaugeMetricFamily(names.NODE_RISK, "Current risk score of the node (0 = normal).",
                                 labels=[names.LABEL_NODE])
        for node, score in sorted(snap.node_scores.items()):
            risk.add_metric([node], float(score))
        yield risk

        active = GaugeMetricFamily(names.NODE_ALERT_ACTIVE, "1 while an alert on the node is open.",
                                   labels=[names.LABEL_NODE, names.LABEL_SEVERITY, "kind"])
        for node, severity, kind in sorted({(a.node, a.severity, a.kind)
                                            for a in snap.open_alerts}):
            active.add_metric([node, severity, kind], 1.0)
        yield active

        alerts = CounterMetricFamily(names.ALERTS_TOTAL, "Alerts raised, by severity.",
                                     labels=[names.LABEL_SEVERITY])
        for severity, count in sorted(snap.alerts_total.items()):
            alerts.add_metric([severity], float(count))
        yield alerts

        if snap.last_success is not None:
            yield GaugeMetricFamily(names.SCRAPE_LAST_SUCCESS,
                                    "Unix time of the last interval the detector scored.",
                                    value=snap.last_success)
        if snap.lag_s is not None:
            yield GaugeMetricFamily(names.SCRAPE_LAG,
                                    "How far the scored data lags behind wall time, seconds.",
                                    value=snap.lag_s)

        errors = CounterMetricFamily(names.SCRAPE_ERRORS_TOTAL, "Watch errors, by stage.",
                                     labels=["stage"])
        for stage, count in sorted(snap.errors_total.items()):
            errors.add_metric([stage], float(count))
        yield errors

        actions = CounterMetricFamily(names.ACTIONS_TOTAL, "Actions taken, by action and outcome.",
                                      labels=["action", "outcome"])
        for (action, outcome), count in sorted(snap.actions_total.items()):
            actions.add_metric([action, outcome], float(count))
        yield actions


class MetricsExporter:
    """Serves the latest :class:`MetricsSnapshot` at ``/metrics``.

        >>> exporter = MetricsExporter()  # doctest: +SKIP
        >>> server = HttpServer(ServerConfig(), exporter.routes())  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = _SnapshotCollector()
        self._lock = threading.Lock()
        self.registry.register(self._collector)

    def update(self, snapshot: MetricsSnapshot) -> None:
        # One reference swap: a scrape sees either the old or the new snapshot, never a mix.
        with self._lock:
            self._collector.snapshot = snapshot

    @property
    def snapshot(self) -> MetricsSnapshot:
        with self._lock:
            return self._collector.snapshot

    def render(self) -> bytes:
        with self._lock:
            return generate_latest(self.registry)

    def handle(self, request: Request) -> Response:
        return Response(200, self.render(), CONTENT_TYPE)

    def routes(self) -> Routes:
        return {("GET", METRICS_PATH): self.handle, ("HEAD", METRICS_PATH): self.handle}


__all__ = ["METRICS_PATH", "MetricsExporter", "MetricsSnapshot", "OpenAlert"]
