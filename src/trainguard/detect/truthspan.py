"""Which known failures the telemetry can speak for: those inside its time span, on its nodes.

A backtest scores only failures between the first and the last sample (plus one step); a
failure outside (kernel logs that reach back further than the metrics, a syslog year guessed
wrong) is not scored. It must never vanish silently: `check_span` counts them, keeps examples
and says in one line what happened. It also counts failures in span on a node the telemetry
does not name (after the truth's aliases are applied): a failure there cannot be detected, and
the usual cause is the node label (on Kubernetes, `Hostname` names the exporter pod).

    >>> from trainguard.detect.truth import Failure, GroundTruth
    >>> gt = GroundTruth(failures=(Failure("n1", 50.0, 79), Failure("n2", 500.0, 48)))
    >>> check_span(gt, (100.0, 1000.0)).in_span
    1
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from trainguard.detect.truth import Failure, GroundTruth, align_nodes
from trainguard.telemetry.frame import Telemetry

__all__ = ["SpanCheck", "check_span", "telemetry_span"]

_EXAMPLES = 3


def telemetry_span(tel: Telemetry) -> tuple[float, float]:
    """[first sample, last sample + one step] in unix seconds: the span a backtest scores."""
    return float(tel.times[0]), float(tel.times[-1]) + tel.step_s


def _fmt(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _example(f: Failure) -> str:
    xid = "" if f.xid is None else f" XID {f.xid}"
    return f"{f.node} {_fmt(f.time)}{xid}"


@dataclass(frozen=True, slots=True)
class SpanCheck:
    """How many failures fall inside `span`, and the ones before and after it."""

    span: tuple[float, float]
    in_span: int
    before: tuple[Failure, ...]
    after: tuple[Failure, ...]
    unknown_node: tuple[Failure, ...] = ()
    """Failures in span on a node the telemetry does not name (counted in `in_span`)."""

    @property
    def total(self) -> int:
        return self.in_span + len(self.before) + len(self.after)

    @property
    def outside(self) -> int:
        return len(self.before) + len(self.after)

    def warning(self, hint: str = "") -> str | None:
        """One line for the user when failures fall outside the span (None when none do)."""
        if not self.outside:
            return None
        examples = [_example(f) for f in (*self.before, *self.after)[:_EXAMPLES]]
        more = f", ... ({self.outside - len(examples)} more)" if self.outside > len(examples) \
            else ""
        return (f"{self.outside} of {self.total} failures fall outside the telemetry's time "
                f"span {_fmt(self.span[0])} .. {_fmt(self.span[1])} UTC and are not scored "
                f"({len(self.before)} before, {len(self.after)} after): "
                f"{'; '.join(examples)}{more}{hint}")

    def node_warning(self) -> str | None:
        """One line when failures in span sit on nodes the telemetry does not name."""
        if not self.unknown_node:
            return None
        nodes = sorted({f.node for f in self.unknown_node})
        shown = ", ".join(nodes[:_EXAMPLES]) + (", ..." if len(nodes) > _EXAMPLES else "")
        return (f"{len(self.unknown_node)} of the {self.in_span} failures in span are on nodes "
                f"the telemetry does not name ({shown}): they cannot be detected; if the "
                "telemetry names nodes by another label, choose it with --node-label NAME")

    def to_dict(self) -> dict[str, object]:
        return {"span": list(self.span), "in_span": self.in_span, "before": len(self.before),
                "after": len(self.after), "unknown_node": len(self.unknown_node),
                "examples": [_example(f) for f in (*self.before, *self.after)[:_EXAMPLES]]}


def check_span(truth: GroundTruth, span: tuple[float, float],
               nodes: Sequence[str] | None = None) -> SpanCheck:
    """Split `truth.failures` by `span` (inclusive at both ends, as the scorecard counts);
    with `nodes`, also the failures in span on none of them (after the truth's aliases)."""
    lo, hi = span
    before = tuple(f for f in truth.failures if f.time < lo)
    after = tuple(f for f in truth.failures if f.time > hi)
    unknown: tuple[Failure, ...] = ()
    if nodes is not None:
        known = set(nodes)
        aligned, _ = align_nodes(truth, nodes)
        unknown = tuple(f for f in aligned.failures if lo <= f.time <= hi and f.node not in known)
    return SpanCheck(span, len(truth.failures) - len(before) - len(after), before, after,
                     unknown)
