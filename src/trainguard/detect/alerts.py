"""Alert episodes: what the detector (and each baseline) hands to a person or a backtest."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["AlertEpisode", "AlertKind", "Signal"]


class AlertKind(StrEnum):
    PREDICTIVE = "predictive"
    """Soft evidence: sustained deviation from peers and from the node's own history."""
    HARD = "hard"
    """Hard evidence: an XID, an uncorrectable error, a GPU that stopped reporting."""


@dataclass(frozen=True, slots=True)
class Signal:
    """One contributing metric: `deviation` is in robust standard deviations (signed) for
    predictive signals, or the raw value that tripped a hard rule (e.g. the XID number)."""

    metric: str
    gpu: str | None
    deviation: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"metric": self.metric, "gpu": self.gpu,
                             "deviation": round(self.deviation, 3)}
        if self.detail:
            d["detail"] = self.detail
        return d


@dataclass(frozen=True, slots=True)
class AlertEpisode:
    """One alert on one node from its onset (when someone would be paged) to its end.

    `start` is the onset: an episode that stays on cannot claim a failure that happens later.
    Times are unix seconds.
    """

    node: str
    start: float
    end: float
    peak_score: float
    kind: AlertKind
    signals: tuple[Signal, ...]
    source: str = "trainguard"
    expected_fp_per_day: float | None = None
    """False alarms per day per `expected_fp_per_nodes` nodes that alerts of this kind raised on
    held-out history (`trainguard tune`); None when no calibration was given."""
    expected_fp_per_nodes: int | None = None
    expected_fp_per_day_upper95: float | None = None
    """The 95% upper bound of `expected_fp_per_day` (a short held-out part allows far more
    than its point estimate)."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "node": self.node,
            "start": self.start,
            "end": self.end,
            "peak_score": round(self.peak_score, 3),
            "kind": self.kind.value,
            "signals": [s.to_dict() for s in self.signals],
            "source": self.source,
        }
        if self.expected_fp_per_day is not None:
            d["expected_fp_per_day"] = round(self.expected_fp_per_day, 4)
            d["expected_fp_per_nodes"] = self.expected_fp_per_nodes
        if self.expected_fp_per_day_upper95 is not None:
            d["expected_fp_per_day_upper95"] = round(self.expected_fp_per_day_upper95, 4)
        return d
