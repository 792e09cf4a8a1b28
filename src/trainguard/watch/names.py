"""Names shared by `trainguard watch`'s outputs: the metrics it exports, the labels its alerts
carry. The Grafana dashboard and the generated rules refer to these; a test checks they agree."""

from __future__ import annotations

PREFIX = "trainguard_"

NODE_RISK = "trainguard_node_risk_score"
"""Gauge, labels ``node``: the detector's current risk score of the node (0 = normal)."""
NODE_ALERT_ACTIVE = "trainguard_node_alert_active"
"""Gauge, labels ``node``, ``severity``, ``kind``: 1 while an alert on the node is open."""
ALERTS_TOTAL = "trainguard_alerts_total"
"""Counter, labels ``severity``: alerts raised since the service started (restarts continue
from the persisted state)."""
SCRAPE_LAST_SUCCESS = "trainguard_watch_last_success_timestamp_seconds"
"""Gauge: unix time of the last interval the detector scored."""
SCRAPE_LAG = "trainguard_watch_lag_seconds"
"""Gauge: how far the detector's scored data lags behind wall time."""
SCRAPE_ERRORS_TOTAL = "trainguard_watch_errors_total"
"""Counter, labels ``stage`` (``query``, ``score``, ``alertmanager``, ``webhook``)."""
ACTIONS_TOTAL = "trainguard_watch_actions_total"
"""Counter, labels ``action`` (``exclude``, ``drain``, ``notify``), ``outcome`` (``done``,
``dry_run``, ``rate_limited``, ``failed``)."""
ETTR = "trainguard_ettr_ratio"
"""Gauge, labels ``job``: effective training time ratio of the latest sessions (the report's)."""

ALERT_NAME = "TrainguardNodeRisk"
"""``alertname`` of the alerts posted to Alertmanager."""
LABEL_NODE = "node"
LABEL_SEVERITY = "severity"
LABEL_SOURCE = "source"
SOURCE = "trainguard"

__all__ = [
    "ACTIONS_TOTAL",
    "ALERTS_TOTAL",
    "ALERT_NAME",
    "ETTR",
    "LABEL_NODE",
    "LABEL_SEVERITY",
    "LABEL_SOURCE",
    "NODE_ALERT_ACTIVE",
    "NODE_RISK",
    "PREFIX",
    "SCRAPE_ERRORS_TOTAL",
    "SCRAPE_LAG",
    "SCRAPE_LAST_SUCCESS",
    "SOURCE",
]
