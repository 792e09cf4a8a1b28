"""Post trainguard's node alerts to Alertmanager (``POST <url>/api/v2/alerts``).

Alertmanager's API takes a JSON list of ``{labels, annotations, startsAt, endsAt, generatorURL}``;
it groups, silences and routes them like any Prometheus alert. An open alert is re-posted every
round (Alertmanager resolves an alert it has not heard of for ``resolve_timeout``); a closed one is
posted once more with ``endsAt`` so it resolves at once.

Failures never reach the service loop: each post is retried with exponential backoff (the sleep
is injected, so tests do not wait), then counted in :attr:`AlertmanagerClient.errors` and
reported as ``False``.

    >>> client = AlertmanagerClient("http://127.0.0.1:9093")  # doctest: +SKIP
    >>> alert = NodeAlert(node="gpu-node-7", severity="warning", start=1.7e9)  # doctest: +SKIP
    >>> client.post([alert])  # doctest: +SKIP
    True
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from trainguard.errors import ConfigError
from trainguard.watch import names

log = logging.getLogger(__name__)

ALERTS_PATH = "/api/v2/alerts"

Transport = Callable[[str, bytes, Mapping[str, str], float], int]
"""``(url, body, headers, timeout_s) -> HTTP status``; raises ``OSError`` when unreachable."""


def urllib_transport(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> int:
    """The default transport: one POST with :mod:`urllib.request`."""
    req = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        return int(exc.code)
    except http.client.HTTPException as exc:  # a garbled answer: as unreachable
        raise ConnectionError(f"bad HTTP response: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class NodeAlert:
    """One trainguard alert on one node, as Alertmanager will see it."""

    node: str
    severity: str
    start: float
    """Unix seconds the alert opened."""
    end: float | None = None
    """Unix seconds it closed; None while open."""
    kind: str = "predictive"
    score: float | None = None
    summary: str = ""
    generator_url: str = ""
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Extra annotations (e.g. the calibrated ``expected_fp_per_day``)."""

    def __post_init__(self) -> None:
        if not self.node:
            raise ValueError("alert.node must not be empty")
        if not self.severity:
            raise ValueError("alert.severity must not be empty")


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def to_payload(alerts: Sequence[NodeAlert]) -> list[dict[str, Any]]:
    """The ``/api/v2/alerts`` body for ``alerts`` (pure)."""
    out: list[dict[str, Any]] = []
    for a in alerts:
        labels = {**a.extra_labels, "alertname": names.ALERT_NAME, names.LABEL_NODE: a.node,
                  names.LABEL_SEVERITY: a.severity, names.LABEL_SOURCE: names.SOURCE,
                  "kind": a.kind}
        annotations = {**a.annotations,
                       "summary": a.summary or f"trainguard {a.kind} alert on {a.node}"}
        if a.score is not None:
            annotations["score"] = f"{a.score:.3g}"
        item: dict[str, Any] = {"labels": labels, "annotations": annotations,
                                "startsAt": _rfc3339(a.start)}
        if a.end is not None:
            item["endsAt"] = _rfc3339(a.end)
        if a.generator_url:
            item["generatorURL"] = a.generator_url
        out.append(item)
    return out


class AlertmanagerClient:
    """Posts :class:`NodeAlert` batches to one Alertmanager.

    ``retries`` extra attempts follow a failed one after ``backoff_s``, ``2 * backoff_s``, ...;
    connection errors, 5xx and 429 are retried, other 4xx are not (the payload will not improve).
    """

    def __init__(self, url: str, *, transport: Transport = urllib_transport, retries: int = 3,
                 backoff_s: float = 0.5, timeout_s: float = 5.0,
                 sleep: Callable[[float], None] = time.sleep, token: str | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"watch.alertmanager.url must be http(s)://..., got {url!r}")
        if retries < 0:
            raise ConfigError("watch.alertmanager.retries must be >= 0")
        if backoff_s < 0:
            raise ConfigError("watch.alertmanager.backoff_s must be >= 0")
        if timeout_s <= 0:
            raise ConfigError("watch.alertmanager.timeout_s must be > 0")
        self.url = url.rstrip("/") + ALERTS_PATH
        self._transport = transport
        self._retries = retries
        self._backoff_s = backoff_s
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.errors = 0
        """Posts that failed after every retry."""
        self.last_error: str | None = None

    def post(self, alerts: Sequence[NodeAlert]) -> bool:
        """Post one batch; True once Alertmanager accepted it, False (counted) otherwise."""
        if not alerts:
            return True
        body = json.dumps(to_payload(alerts)).encode()
        for attempt in range(self._retries + 1):
            if attempt:
                self._sleep(self._backoff_s * 2 ** (attempt - 1))
            try:
                status = self._transport(self.url, body, self._headers, self._timeout_s)
            except OSError as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.debug("alertmanager: post to %s failed: %s", self.url, self.last_error)
                continue
            if 200 <= status < 300:
                return True
            self.last_error = f"HTTP {status}"
            if status < 500 and status != 429:
                break
        self.errors += 1
        # Debug only: the caller reports the failure (the watch service, once per round).
        log.debug("alertmanager: %d alert(s) not delivered to %s: %s", len(alerts), self.url,
                  self.last_error)
        return False


__all__ = ["ALERTS_PATH", "AlertmanagerClient", "NodeAlert", "Transport", "to_payload",
           "urllib_transport"]
