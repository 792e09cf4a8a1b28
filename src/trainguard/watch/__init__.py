"""``trainguard watch``: the live service's outputs.

- :mod:`~trainguard.watch.http`: a small threaded HTTP server (loopback by default, bearer token
  required elsewhere, bounded bodies, 4xx for bad requests);
- :mod:`~trainguard.watch.exporter`: ``/metrics`` in the Prometheus text format;
- :mod:`~trainguard.watch.webhook`: ``/alertmanager/webhook``, Alertmanager alerts as evidence;
- :mod:`~trainguard.watch.alertmanager`: posts trainguard's alerts to Alertmanager;
- :mod:`~trainguard.watch.names`: the metric names and alert labels they share.
"""

from __future__ import annotations

from trainguard.watch.alertmanager import AlertmanagerClient, NodeAlert
from trainguard.watch.exporter import MetricsExporter, MetricsSnapshot, OpenAlert
from trainguard.watch.http import HttpError, HttpServer, Request, Response, ServerConfig
from trainguard.watch.webhook import (
    ReceivedAlert,
    WebhookPayloadError,
    WebhookReceiver,
    parse_payload,
)

__all__ = [
    "AlertmanagerClient",
    "HttpError",
    "HttpServer",
    "MetricsExporter",
    "MetricsSnapshot",
    "NodeAlert",
    "OpenAlert",
    "ReceivedAlert",
    "Request",
    "Response",
    "ServerConfig",
    "WebhookPayloadError",
    "WebhookReceiver",
    "parse_payload",
]
