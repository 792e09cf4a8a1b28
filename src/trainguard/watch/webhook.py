"""``POST /alertmanager/webhook``: Alertmanager's notifications become trainguard evidence.

Point an Alertmanager ``webhook_config`` at this endpoint and the alerts of existing rules (DCGM
XID counters, node-exporter, anything with a node label) reach the supervisor the same way the
detector's alerts do:

1. the payload is validated strictly (Alertmanager's webhook format, ``version: "4"``); any
   deviation is a 400 whose message names the field (``alerts[2].startsAt: ...``): strings are
   bounded and hold no control characters (annotations may hold tabs and newlines), times lie
   between 2000 and 2100 and no alert ends before it starts;
2. each alert with a ``node``, ``instance`` or ``Hostname`` label (first one present; an
   ``instance``'s ``:port`` is dropped, an ``instance`` that is a URL names no node) is kept; the
   others are counted as skipped. The node must be a hostname-like name
   (:func:`trainguard.recover.nodename.node_name_problem`) or an IP address: it reaches the
   alerts file, the store and the supervisor, so ``$(...)`` or a newline in it is a 400 (and
   nothing of that notification is delivered);
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

import ipaddress
import json
import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from trainguard.errors import TrainguardError
from trainguard.evidence.events import STORED_CHARS, EvidenceLine, FailureEvent, TimeKind
from trainguard.recover.nodename import node_name_problem
from trainguard.store import Store
from trainguard.taxonomy import Action, Category, Severity
from trainguard.telemetry.limits import EPOCH_MAX_S, EPOCH_MIN_S
from trainguard.watch.http import HttpError, Request, Response, Routes

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/alertmanager/webhook"
NODE_LABELS: tuple[str, ...] = ("node", "instance", "Hostname")
"""Labels that name the node an alert is about, in order of preference."""
SOURCE = "alertmanager"
_ZERO_TIME_YEAR = 1  # Go's zero time ("0001-01-01T00:00:00Z"): no endsAt
_MAX_SEEN = 10_000
_MAX_LABEL_CHARS = 4096
_MAX_LABELS = 256
"""Labels (or annotations) per alert: Alertmanager sends tens."""
_MAX_TRUNCATED = 1 << 31
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_IN_TEXT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Annotations are prose: tabs, newlines and line separators are allowed there."""
_FINGERPRINT = re.compile(r"[0-9A-Za-z_.:-]{1,128}")


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
            evidence=(EvidenceLine(f"alertmanager:{self.receiver}", 0,
                                   self.summary[:STORED_CHARS]),))


# -- parsing -----------------------------------------------------------------------------------

def _str(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = obj.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise WebhookPayloadError(f"{where}{key}: expected a string, got {_kind(value)}")
    _check_text(value, f"{where}{key}", _CONTROL)
    return value


def _check_text(value: str, field_name: str, forbidden: re.Pattern[str]) -> None:
    if len(value) > _MAX_LABEL_CHARS:
        raise WebhookPayloadError(f"{field_name}: longer than {_MAX_LABEL_CHARS} characters")
    bad = forbidden.search(value)
    if bad is not None:
        raise WebhookPayloadError(f"{field_name}: control character {bad.group()!r} at "
                                  f"position {bad.start()}")


def _labels(obj: Mapping[str, Any], key: str, where: str, *, required: bool = True,
            text: bool = False) -> dict[str, str]:
    """A label set (``text``: annotations, whose values may hold tabs and newlines)."""
    value = obj.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise WebhookPayloadError(f"{where}{key}: expected an object, got {_kind(value)}")
    if len(value) > _MAX_LABELS:
        raise WebhookPayloadError(f"{where}{key}: more than {_MAX_LABELS} entries")
    for name, item in value.items():
        if not name or len(name) > _MAX_LABEL_CHARS or _CONTROL.search(name):
            raise WebhookPayloadError(f"{where}{key}: bad name {name[:80]!r} (empty, longer "
                                      f"than {_MAX_LABEL_CHARS} or with control characters)")
        shown = f"{where}{key}.{name[:80]}"
        if not isinstance(item, str):
            raise WebhookPayloadError(f"{shown}: expected a string, got {_kind(item)}")
        _check_text(item, shown, _CONTROL_IN_TEXT if text else _CONTROL)
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
    t = when.timestamp()
    # outside [2000, 2100): a broken clock or a crafted payload, as for telemetry samples
    if not EPOCH_MIN_S <= t < EPOCH_MAX_S:
        raise WebhookPayloadError(f"{where}{key}: {raw[:60]!r} is outside 2000-2100 (UTC)")
    return t


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
    if (not isinstance(truncated, int) or isinstance(truncated, bool)
            or not 0 <= truncated < _MAX_TRUNCATED):
        raise WebhookPayloadError(f"truncatedAlerts: expected an integer in [0, "
                                  f"{_MAX_TRUNCATED})")
    raw_alerts = data.get("alerts")
    if not isinstance(raw_alerts, list):
        raise WebhookPayloadError(f"alerts: expected a list, got {_kind(raw_alerts)}")
    alerts = tuple(_parse_alert(a, f"alerts[{i}].") for i, a in enumerate(raw_alerts))
    return WebhookPayload(
        status=status, receiver=_str(data, "receiver", ""),
        group_labels=_labels(data, "groupLabels", ""),
        common_labels=_labels(data, "commonLabels", ""),
        common_annotations=_labels(data, "commonAnnotations", "", required=False, text=True),
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
    ends_at = _time(raw, "endsAt", where)
    if ends_at is not None and ends_at < starts_at:
        raise WebhookPayloadError(f"{where}endsAt: before startsAt")
    fingerprint = _str(raw, "fingerprint", where)
    if _FINGERPRINT.fullmatch(fingerprint) is None:
        raise WebhookPayloadError(f"{where}fingerprint: expected 1-128 letters, digits, "
                                  f"'_', '.', ':' or '-'")
    return WebhookAlert(status=status, labels=_labels(raw, "labels", where),
                        annotations=_labels(raw, "annotations", where, required=False,
                                            text=True),
                        starts_at=starts_at, ends_at=ends_at, fingerprint=fingerprint,
                        generator_url=_str(raw, "generatorURL", where, required=False))


def node_of(labels: Mapping[str, str], keys: Sequence[str] = NODE_LABELS) -> str | None:
    """The node an alert is about: the first of ``keys`` present, ``instance`` without a port
    (an ``instance`` that is a URL, a blackbox probe's target, names no node)."""
    found = _node_label(labels, keys)
    return None if found is None else found[1]


def _node_label(labels: Mapping[str, str], keys: Sequence[str]) -> tuple[str, str] | None:
    """(label, node) of :func:`node_of`."""
    for key in keys:
        value = labels.get(key, "").strip()
        if not value:
            continue
        if key == "instance":
            if "://" in value:
                continue
            host, sep, port = value.rpartition(":")
            if sep and port.isdigit() and host and not host.endswith(":"):
                value = host.strip("[]")
        return key, value
    return None


def node_problem(node: str) -> str | None:
    """Why ``node`` cannot be a node name, or None: a hostname-like name or an IP address (no
    IPv6 zone: ``%...`` is free text)."""
    if "%" not in node:
        try:
            ipaddress.ip_address(node)
            return None
        except ValueError:
            pass
    return node_name_problem(node)


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

        >>> receiver = WebhookReceiver(alerts_file=Path("alerts.jsonl"))  # doctest: +SKIP
        >>> server = HttpServer(ServerConfig(), receiver.routes())  # doctest: +SKIP
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

    def nodes(self, payload: WebhookPayload) -> list[str | None]:
        """The node of each alert (None: about no node); WebhookPayloadError naming the label
        when one is not a node name. Checked for the whole notification before any delivery."""
        out: list[str | None] = []
        for i, alert in enumerate(payload.alerts):
            found = _node_label(alert.labels, self.node_labels)
            problem = None if found is None else node_problem(found[1])
            if found is not None and problem is not None:
                raise WebhookPayloadError(f"alerts[{i}].labels.{found[0]}: {found[1][:80]!r} is "
                                          f"not a node name: {problem}")
            out.append(None if found is None else found[1])
        return out

    def receive(self, payload: WebhookPayload) -> ReceiveCounts:
        """Deliver a notification's new alerts; WebhookPayloadError (nothing delivered) when an
        alert's node label is not a node name."""
        received = delivered = duplicates = skipped = firing = resolved = 0
        for alert, node in zip(payload.alerts, self.nodes(payload), strict=True):
            received += 1
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
            counts = self.receive(payload)
        except WebhookPayloadError as exc:
            raise HttpError(400, str(exc)) from exc
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
    "node_problem",
    "parse_payload",
]
