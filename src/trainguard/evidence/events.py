"""Failure evidence as typed, immutable events.

A :class:`FailureEvent` is one piece of evidence (an XID line, an NCCL watchdog timeout, an OOM
kill...) with where it came from and what it means. Every later stage (incidents, the store, the
supervisor's decisions, the detector's ground truth) consumes these.

    >>> ev = FailureEvent(category=Category.GPU_HARDWARE, action=Action.REBOOT_NODE,
    ...                   severity=Severity.FATAL, signature="xid", summary="XID 79", xid=79)
    >>> ev.to_dict()["xid"]
    79
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from trainguard.evidence.unwrap import unwrap_line
from trainguard.taxonomy import Action, Category, Severity


class TimeKind(StrEnum):
    """How an event's time should be read."""

    ABSOLUTE = "absolute"  # unix seconds (UTC)
    RELATIVE = "relative"  # seconds since boot (`dmesg` without -T); not comparable across hosts
    NONE = "none"


STORED_CHARS = 2000
"""An evidence line or event summary is stored, sent and shown up to this many characters: a
multi-megabyte line (a JSON dump, a tensor printed whole) must not travel whole with an event."""

CUE_CHARS = 2000
"""The cue readers (actions, alternatives, remedies, suspicion) read a line only up to this many
characters: a bound on their regex work, and the same cut however long a stored line is."""


@dataclass(frozen=True, slots=True)
class EvidenceLine:
    """One raw log line that supports an event."""

    path: str
    line_no: int
    text: str

    @property
    def program_text(self) -> str:
        """The line as the program wrote it (``unwrap.unwrap_line``): what the models read."""
        return unwrap_line(self.text)

    def to_dict(self) -> dict[str, Any]:
        """As JSON: ``{"path", "line", "text"}``, the form every evidence list is written in."""
        return {"path": self.path, "line": self.line_no, "text": self.text}


@dataclass(frozen=True, slots=True)
class FailureEvent:
    """One classified piece of failure evidence."""

    category: Category
    action: Action
    severity: Severity
    signature: str
    """Id of the rule that matched (``xid``, ``nccl_watchdog_timeout``...)."""
    summary: str
    time: float | None = None
    """Unix seconds when ``time_kind`` is absolute, seconds since boot when relative."""
    time_kind: TimeKind = TimeKind.NONE
    host: str | None = None
    gpu_pci: str | None = None
    """PCI bus id as written by the driver, normalized to ``0000:3b:00.0``."""
    gpu_index: int | None = None
    rank: int | None = None
    xid: int | None = None
    caused_by_xid: int | None = None
    """For XID 43/45-style follow-ups: the primary XID the driver names."""
    confidence: float = 1.0
    fields: tuple[tuple[str, str], ...] = ()
    """Named values the rule extracted (op type, sequence number, exit code...)."""
    evidence: tuple[EvidenceLine, ...] = field(default_factory=tuple)
    context: tuple[EvidenceLine, ...] = field(default=(), compare=False, repr=False)
    """The lines around the one the scanner matched (``scanner.CONTEXT_LINES`` either side), as
    the text model reads them (``textmodel.py``); not evidence, not compared, not stored."""

    def field_value(self, name: str) -> str | None:
        for key, value in self.fields:
            if key == name:
                return value
        return None

    def to_dict(self) -> dict[str, Any]:
        """As JSON: ``time`` is unix seconds or null; seconds since boot are ``since_boot_s``
        (a reader taking them for unix seconds would see a date in 1970)."""
        boot = self.time_kind is TimeKind.RELATIVE
        d: dict[str, Any] = {
            "category": self.category.value,
            "action": self.action.value,
            "severity": self.severity.value,
            "signature": self.signature,
            "summary": self.summary,
            "time": None if boot else self.time,
            "time_kind": self.time_kind.value,
            "host": self.host,
            "gpu": self.gpu_pci,
            "gpu_index": self.gpu_index,
            "rank": self.rank,
            "xid": self.xid,
            "caused_by_xid": self.caused_by_xid,
            "confidence": round(self.confidence, 3),
            "fields": dict(self.fields),
            "evidence": [e.to_dict() for e in self.evidence],
        }
        if boot:
            d["since_boot_s"] = self.time
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> FailureEvent:
        """The event :meth:`to_dict` wrote; ValueError, KeyError or TypeError otherwise."""
        def opt(key: str, kind: type) -> Any:
            value = d.get(key)
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{key} must be {kind.__name__}")
            return value

        fields = d.get("fields") or {}
        evidence = d.get("evidence") or []
        if not isinstance(fields, dict) or not isinstance(evidence, list):
            raise TypeError("fields must be a map and evidence a list")
        kind = TimeKind(d.get("time_kind", "none"))
        t = d.get("since_boot_s", d.get("time")) if kind is TimeKind.RELATIVE else d.get("time")
        return FailureEvent(
            category=Category(d["category"]), action=Action(d["action"]),
            severity=Severity(d["severity"]), signature=str(d["signature"])[:200],
            summary=str(d["summary"])[:STORED_CHARS], time=_number(t),
            time_kind=kind, host=opt("host", str),
            gpu_pci=opt("gpu", str), gpu_index=opt("gpu_index", int), rank=opt("rank", int),
            xid=opt("xid", int), caused_by_xid=opt("caused_by_xid", int),
            confidence=_number(d.get("confidence")) or 1.0,
            fields=tuple((str(k), str(v)) for k, v in fields.items()),
            evidence=tuple(EvidenceLine(str(e["path"]), int(e["line"]), str(e["text"])[:4000])
                           for e in evidence[:64]))


def _number(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("expected a number")
    return float(value)


__all__ = ["CUE_CHARS", "STORED_CHARS", "EvidenceLine", "FailureEvent", "TimeKind"]
