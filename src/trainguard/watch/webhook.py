"""``POST /alertmanager/webhook``: Alertmanager's notifications become trainguard evidence.

Point an Alertmanager ``webhook_config`` at this endpoint and the alerts of existing rules (DCGM
XID counters, node-exporter, anything with a node label) reach the supervisor the same way the
detector's alerts do:

1. the payload is validated strictly (Alertmanager's webhook format, ``version: "4"``); any
   deviation is a 400 whose message names the field (``alerts[2].startsAt: ...``);
2. each alert with a ``node``, ``instance`` or ``Hostname`` label (first one present; an
   ``instance``'s ``:port`` is dropped) is kept; the others are counted as skipped;
3. Alertmanager re-sends a group's alerts on every notification: an alert is delivered once per
   ``(fingerprint, startsAt, status)``;
4. delivery: one JSON line per alert appended to ``alerts_file`` (the format
   :class:`trainguard.recover.watch.NodeWatch` reads, plus ``status``/``end``), firing alerts
   added to the store (``source="alertmanager"``), and ``on_alert`` called with the
   :class:`ReceivedAlert` (its :meth:`ReceivedAlert.to_event` is the :class:`FailureEvent`).

The answer is 200 with the counts: ``{"received": 3, "delivered": 2, "duplicates": 0,
"skipped": 1, "firing": 2, "resolved": 0}``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from trainguard.errors import TrainguardError
from trainguard.evidence.events import EvidenceLine, FailureEvent, TimeKind
from trainguard.store import Store
from trainguard.taxonomy import Action, Category, Severity
from trainguard.watch.http import HttpError, Request, Response, Routes

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/alertmanager/webhook"
NODE_LABELS: tuple[str, ...] = ("node", "instance", "Hostname")
"""Labels that name the node an alert is about, in order of preference."""
SOURCE = "alertmanager"
_ZERO_TIME_YEAR = 1  # Go's zero time ("0001-01-01T00:00:00Z"): no endsAt
_MAX_SEEN = 10_000
_MAX_LABEL_CHARS = 4096


class WebhookPayloadError(TrainguardError):
    """An Alertmanager webhook payload that does not follow the format; names the field."""


@dataclass(frozen=True, slots=True)
class WebhookAlert:
    """One alert of a webhook notification."""

    status: str
    """``firing`` or ``resolved``."""
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: float
    """Unix seconds."""
    ends_at: float | None
    """Unix seconds; None when Alertmanager sends Go's zero time."""
    fingerprint: str
    generator_url: str = ""


@dataclass(frozen=True, slots=True)
class WebhookPayload:
    """A whole Alertmanager webhook notification (``version: "4"``)."""

    status: str
    receiver: str
    group_labels: Mapping[str, str]
    common_labels: Mapping[str, str]
    common_annotations: Mapping[str, str]
    alerts: tuple[WebhookAlert, ...]
    external_url: str = ""
    group_key: str = ""
    truncated_alerts: int = 0


@dataclass(frozen=True, slots=True)
class ReceivedAlert:
    """A webhook alert about one of our nodes, as delivered to the sinks."""

    node: str
    alert: WebhookAlert
    receiver: str

    @property
    def name(self) -> str:
        return self.alert.labels.get("alertname", "alert")

    @property
    def summary(self) -> str:
        ann = self.alert.annotations
        text = ann.get("summary") or ann.get("description") or ""
        return f"alertmanager {self.name}" + (f": {text}" if text else "")

    def to_record(self) -> dict[str, Any]:
        """The JSON line for the alerts file (NodeWatch's format, plus status and end)."""
        return {
            "node": self.node,
            "start": self.alert.starts_at,
            "end": self.alert.ends_at,
            "status": self.alert.status,
            "kind": "predictive",
            "peak_score": 0.0,
            "signals": [],
            "source": SOURCE,
            "alertname": self.name,
            "severity": self.alert.labels.get("severity", ""),
            "fingerprint": self.alert.fingerprint,
            "summary": self.summary[:300],
            "labels": dict(self.alert.labels),
        }

    def to_event(self) -> FailureEvent:
        """The alert as evidence: a non-fatal hint that the node is unhealthy."""
        info = self.alert.status == "resolved"
        return FailureEvent(
            category=Category.UNKNOWN, action=Action.EXCLUDE_NODE,
            severity=Severity.INFO if info else Severity.NON_FATAL,
            signature="alertmanager_alert", summary=self.summary[:300],
            time=self.alert.starts_at, time_kind=TimeKind.ABSOLUTE, host=self.node,
            confidence=0.5,
            fields=(("alertname", self.name), ("status", self.alert.status),
                    ("fingerprint", self.alert.fingerprint), ("source", SOURCE),
                    ("severity", self.alert.labels.get("severity", ""))),
            evidence=(EvidenceLine(f"alertmanager:{self.receiver}", 0, self.summary[:2000]),))


# -- parsing -----------------------------------------------------------------------------------

def _str(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise WebhookPayloadError(f"{where}{key}: expected a string, got {_kind(value)}")
    return value


def _labels(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True
            ) -> dict[str, str]:
    value = obj.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise WebhookPayloadError(f"{where}{key}: expected an object, got {_kind(value)}")
    for name, item in value.items():
        if not isinstance(item, str):
            raise WebhookPayloadError(f"{where}{key}.{name[:80]}: expected a string, "
                                      f"got {_kind(item)}")
        if len(name) > _MAX_LABEL_CHARS or len(item) > _MAX_LABEL_CHARS:
            raise WebhookPayloadError(f"{where}{key}.{name[:80]}: longer than "
                                      f"{_MAX_LABEL_CHARS} characters")
    return value


def _time(obj: Mapping[str, Any], key: str, where: str) -> float | None:
    raw = _str(obj, key, where)
    try:
        when = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise WebhookPayloadError(f"{where}{key}: not an RFC 3339 time: {raw[:60]!r}") from exc
    if when.tzinfo is None:
        raise WebhookPayloadError(f"{where}{key}: time without a timezone: {raw[:60]!r}")
    if when.year == _ZERO_TIME_YEAR:
        return None
    return when.timestamp()


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def parse_payload(data: Any) -> WebhookPayload:
    """Validate a decoded webhook body; :class:`WebhookPayloadError` names the bad field."""
    if not isinstance(data, dict):
        raise WebhookPayloadError(f"body: expected a JSON object, got {_kind(data)}")
    version = _str(data, "version", "")
    if version != "4":
        raise WebhookPayloadError(f"version: expected \"4\", got {version[:20]!r}")
    status = _str(data, "status", "")
    if status not in ("firing", "resolved"):
        raise WebhookPayloadError(f"status: expected firing or resolved, got {status[:20]!r}")
    truncated = data.get("truncatedAlerts", 0)
    if not isinstance(truncated, int) or isinstance(truncated, bool) or truncated < 0:
        raise WebhookPayloadError("truncatedAlerts: expected a non-negative integer")
    raw_alerts = data.get("alerts")
    if not isinstance(raw_alerts, list):
        raise WebhookPayloadError(f"alerts: expected a list, got {_kind(raw_alerts)}")
    alerts = tuple(_parse_alert(a, f"alerts[{i}].") for i, a in enumerate(raw_alerts))
    return WebhookPayload(
        status=status, receiver=_str(data, "receiver", ""),
        group_labels=_labels(data, "groupLabels", ""),
        common_labels=_labels(data, "commonLabels", ""),
        common_annotations=_labels(data, "commonAnnotations", "", required=False),
        alerts=alerts, external_url=_str(data, "externalURL", "", required=False),
        group_key=_str(data, "groupKey", "", required=False), truncated_alerts=truncated)


def _parse_alert(raw: Any, where: str) -> WebhookAlert:
    if not isinstance(raw, dict):
        raise WebhookPayloadError(f"{where.rstrip('.')}: expected an object, got {_kind(raw)}")
    status = _str(raw, "status", where)
    if status not in ("firing", "resolved"):
        raise WebhookPayloadError(f"{where}status: expected firing or resolved, "
                                  f"got {status[:20]!r}")
    starts_at = _time(raw, "startsAt", where)
    if starts_at is None:
        raise WebhookPayloadError(f"{where}startsAt: must not be the zero time")
    fingerprint = _str(raw, "fingerprint", where)
    if not fingerprint or len(fingerprint) > 128:
        raise WebhookPayloadError(f"{where}fingerprint: expected 1-128 characters")
    return WebhookAlert(status=status, labels=_labels(raw, "labels", where),
                        annotations=_labels(raw, "annotations", where, required=False),
                        starts_at=starts_at, ends_at=_time(raw, "endsAt", where),
                        fingerprint=fingerprint,
                        generator_url=_str(raw, "generatorURL", where, required=False))


def node_of(labels: Mapping[str, str], keys: Sequence[str] = NODE_LABELS) -> str | None:
    """The node an alert is about: the first of ``keys`` present, ``instance`` without a port."""
    for key in keys:
        value = labels.get(key, "").strip()
        if not value:
            continue
        if key == "instance":
            host, sep, port = value.rpartition(":")
            if sep and port.isdigit() and host and not host.endswith(":"):
                value = host.strip("[]")
        return value
    return None


# -- receiving ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ReceiveCounts:
    """What one notification changed."""

    received: int = 0
    delivered: int = 0
    duplicates: int = 0
    skipped: int = 0
    """Alerts without a node label."""
    firing: int = 0
    resolved: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"received": self.received, "delivered": self.delivered,
                "duplicates": self.duplicates, "skipped": self.skipped,
                "firing": self.firing, "resolved": self.resolved}


@dataclass
class WebhookReceiver:
    """Turns Alertmanager notifications into trainguard evidence.

        >>> receiver = WebhookReceiver(alerts_file=Path("alerts.jsonl"))
        >>> server = HttpServer(ServerConfig(), receiver.routes())
        >>> # NodeWatch(..., alerts_file=Path("alerts.jsonl")) now sees the alerts
    """

    alerts_file: Path | None = None
    store: Store | None = None
    on_alert: Callable[[ReceivedAlert], None] | None = None
    node_labels: tuple[str, ...] = NODE_LABELS
    errors: int = field(default=0, init=False)
    """Delivery failures so far (a sink raised); the notification is still answered."""
    _seen: OrderedDict[tuple[str, float, str], None] = field(
        default_factory=OrderedDict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def receive(self, payload: WebhookPayload) -> ReceiveCounts:
        received = delivered = duplicates = skipped = firing = resolved = 0
        for alert in payload.alerts:
            received += 1
            node = node_of(alert.labels, self.node_labels)
            if node is None:
                skipped += 1
                continue
            key = (alert.fingerprint, alert.starts_at, alert.status)
            with self._lock:
                if key in self._seen:
                    duplicates += 1
                    continue
                self._seen[key] = None
                while len(self._seen) > _MAX_SEEN:
                    self._seen.popitem(last=False)
            self._deliver(ReceivedAlert(node, alert, payload.receiver))
            delivered += 1
            if alert.status == "firing":
                firing += 1
            else:
                resolved += 1
        return ReceiveCounts(received, delivered, duplicates, skipped, firing, resolved)

    def _deliver(self, item: ReceivedAlert) -> None:
        # Each sink on its own: a full disk must not keep the alert from the store or callback.
        if self.alerts_file is not None:
            try:
                line = json.dumps(item.to_record(), sort_keys=True).encode() + b"\n"
                with self._lock:
                    # One O_APPEND write per line: concurrent writers never interleave lines.
                    fd = os.open(self.alerts_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        os.write(fd, line)
                    finally:
                        os.close(fd)
            except OSError:
                self.errors += 1
                log.warning("webhook: cannot append to %s", self.alerts_file, exc_info=True)
        # The store has no "end an alert" call: only firing alerts are added, resolved ones
        # are recorded in the alerts file and passed to on_alert.
        if self.store is not None and item.alert.status == "firing":
            try:
                self.store.add_alert(node=item.node, start=item.alert.starts_at, end=None,
                                     peak_score=0.0, kind="predictive",
                                     signals=[{"metric": item.name}], source=SOURCE)
            except TrainguardError:
                self.errors += 1
                log.warning("webhook: cannot add the alert to the store", exc_info=True)
        if self.on_alert is not None:
            try:
                self.on_alert(item)
            except Exception:  # a service boundary: a callback bug must not fail Alertmanager
                self.errors += 1
                log.exception("webhook: on_alert failed")

    def handle(self, request: Request) -> Response:
        try:
            payload = parse_payload(request.json())
        except WebhookPayloadError as exc:
            raise HttpError(400, str(exc)) from exc
        counts = self.receive(payload)
        log.info("webhook: %s from receiver %r", counts.to_dict(), payload.receiver)
        return Response.json(counts.to_dict())

    def routes(self) -> Routes:
        return {("POST", WEBHOOK_PATH): self.handle}


__all__ = [
    "NODE_LABELS",
    "WEBHOOK_PATH",
    "ReceiveCounts",
    "ReceivedAlert",
    "WebhookAlert",
    "WebhookPayload",
    "WebhookPayloadError",
    "WebhookReceiver",
    "node_of",
    "parse_payload",
]
