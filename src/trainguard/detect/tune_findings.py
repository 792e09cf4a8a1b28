"""What `trainguard tune` cannot tune away: hard-evidence false alarms, by the metric that
raised them. Thresholds and persistence do not change a hard rule's alerts (an XID, a counter
past its limit), so a hard-evidence false alarm is a finding about the cluster or its telemetry
(which metric, on how many nodes, how often), not a reason to loosen the predictive detector.

    >>> from trainguard.detect.alerts import AlertEpisode, AlertKind, Signal
    >>> a = AlertEpisode("n1", 0.0, 60.0, 9.0, AlertKind.HARD, (Signal("xid", "0", 79.0),))
    >>> [f.metric for f in hard_findings([a, a], days=1.0, n_nodes=64, per_nodes=64)]
    ['xid']
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.detect.alerts import AlertEpisode, AlertKind


@dataclass(frozen=True, slots=True)
class HardFinding:
    """Hard-evidence false alarms raised by one metric on one part of the history."""

    metric: str
    false_positives: int
    nodes: tuple[str, ...]
    fp_per_day: float
    """Per day per ``per_nodes`` nodes."""

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "false_positives": self.false_positives,
                "nodes": list(self.nodes), "fp_per_day": round(self.fp_per_day, 4)}

    def text(self, per_nodes: int, part: str) -> str:
        shown = ", ".join(self.nodes[:5]) + (" ..." if len(self.nodes) > 5 else "")
        return (f"finding: hard-evidence alerts on {self.metric} raised {self.false_positives} "
                f"false alarm(s) on {len(self.nodes)} node(s) ({shown}) in the {part}, "
                f"{self.fp_per_day:.2f}/day per {per_nodes} nodes; no threshold changes them: "
                "check those nodes and the metric's source (backtest --alerts-out lists them)")


def _metric(alert: AlertEpisode) -> str:
    return alert.signals[0].metric if alert.signals else "(no signal)"


def hard_findings(fp_alerts: Sequence[AlertEpisode], *, days: float, n_nodes: int,
                  per_nodes: int) -> tuple[HardFinding, ...]:
    """Hard-evidence false alarms grouped by the metric that raised them, most first."""
    scale = per_nodes / n_nodes / days if days > 0 and n_nodes > 0 else 0.0
    by_metric: dict[str, list[AlertEpisode]] = defaultdict(list)
    for alert in fp_alerts:
        if alert.kind is AlertKind.HARD:
            by_metric[_metric(alert)].append(alert)
    found = [HardFinding(metric, len(alerts), tuple(sorted({a.node for a in alerts})),
                         len(alerts) * scale) for metric, alerts in by_metric.items()]
    return tuple(sorted(found, key=lambda f: (-f.false_positives, f.metric)))


__all__ = ["HardFinding", "hard_findings"]
