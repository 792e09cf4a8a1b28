"""What a host check measures and concludes: probe results, and findings about hosts and links.

Probes run on the hosts (by their agents) and return :class:`ProbeResult`; the controller
compares hosts with each other and with floors (:mod:`trainguard.check.judge`) and localizes
slow links (:mod:`trainguard.check.pairing`), both producing :class:`Finding`. Everything here
crosses the agent wire as plain dicts (:meth:`ProbeResult.to_dict` / :meth:`from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """How a probe went on its host."""

    OK = "ok"
    """It ran; its figures are the evidence."""
    SKIPPED = "skipped"
    """Not possible there (no GPU, no DCGM, no checkpoint dir): the reason says why. Never a
    pass."""
    ERROR = "error"
    """It could not run or it failed outright (an NVML error, an fsync error, a timeout)."""


class Level(StrEnum):
    """A finding's verdict."""

    PASS = "pass"
    SLOW = "slow"
    FAIL = "fail"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured number, e.g. ``Figure("gemm_gflops", 48.2, "GFLOP/s")``."""

    name: str
    value: float
    unit: str
    higher_is_better: bool = True
    spread: float = 0.0
    """How much this figure moved between the probe's own repeats on its host, relative
    (:func:`trainguard.check.spread.relative_spread`: 0.2 = the worst repeat was 20% below the
    best); 0 when the probe measured once. The judge widens its margin by it."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "value": self.value, "unit": self.unit,
                               "higher_is_better": self.higher_is_better}
        if self.spread:
            out["spread"] = self.spread
        return out

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Figure:
        spread = float(d.get("spread", 0.0) or 0.0)
        # a host's report: not a number, or negative, is no measured spread (the plain peer
        # comparison); more than 1 is 1
        spread = min(spread, 1.0) if spread > 0.0 else 0.0
        return Figure(str(d["name"]), float(d["value"]), str(d.get("unit", "")),
                      bool(d.get("higher_is_better", True)), spread)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe (``check``) on one host."""

    check: str
    host: str
    status: Status
    figures: tuple[Figure, ...] = ()
    reason: str = ""
    """Why it was skipped or failed; empty when it ran."""
    duration_s: float = 0.0
    facts: tuple[tuple[str, str], ...] = ()
    """Non-numeric observations (GPU model, driver, ECC mode), for the evidence."""

    def figure(self, name: str) -> Figure | None:
        return next((f for f in self.figures if f.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "host": self.host, "status": self.status.value,
                "figures": [f.to_dict() for f in self.figures], "reason": self.reason,
                "duration_s": self.duration_s, "facts": [list(kv) for kv in self.facts]}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ProbeResult:
        figures = d.get("figures") or []
        facts = d.get("facts") or []
        return ProbeResult(
            check=str(d["check"]), host=str(d["host"]), status=Status(str(d["status"])),
            figures=tuple(Figure.from_dict(f) for f in figures if isinstance(f, Mapping)),
            reason=str(d.get("reason", ""))[:2000],
            duration_s=float(d.get("duration_s", 0.0)),
            facts=tuple((str(k), str(v)) for k, v in facts))


@dataclass(frozen=True, slots=True)
class Finding:
    """A verdict on a host (``subject="node3"``) or a link (``subject="node2<->node5"``)."""

    subject: str
    kind: str
    """``host`` or ``link``."""
    level: Level
    check: str
    reason: str
    """The evidence in words, with the figures: 'gemm 12.1 GFLOP/s, 0.21x the hosts' median
    57.3'."""
    figure: str = ""
    value: float | None = None
    reference: float | None = None
    """What ``value`` was compared with (the other hosts' median, or the floor)."""

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self.subject.split("<->")) if self.kind == "link" else (self.subject,)

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "kind": self.kind, "level": self.level.value,
                "check": self.check, "reason": self.reason, "figure": self.figure,
                "value": self.value, "reference": self.reference}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Finding:
        value, ref = d.get("value"), d.get("reference")
        return Finding(str(d["subject"]), str(d["kind"]), Level(str(d["level"])),
                       str(d["check"]), str(d.get("reason", "")), str(d.get("figure", "")),
                       None if value is None else float(value),
                       None if ref is None else float(ref))


def link_name(a: str, b: str) -> str:
    """The canonical name of the link between two hosts (sorted)."""
    x, y = sorted((a, b))
    return f"{x}<->{y}"


__all__ = ["Figure", "Finding", "Level", "ProbeResult", "Status", "link_name"]
