"""Every analytic over a store (or one session, or a time range) in one value.

:func:`build_report` reads the store once and computes, over the selected runs: per-run and fleet
goodput/ETTR (:mod:`.goodput`), retry chains (:mod:`.chains`), failure rates, MTTF and MTTR
(:mod:`.failures`), exclusion concentration (:mod:`.concentration`), detection lead times
(:mod:`.leadtime`), checkpoint I/O (:mod:`.checkpoint_io`) and the ETTR model's inputs and
checkpoint-interval advice (:mod:`.model`). :meth:`AnalyticsReport.to_dict` is the JSON edge:
floats rounded to 4 decimals, infinities and NaN as null.

The failure rate and the advised interval carry their :class:`~.exposure.Support`: a figure
measured from too little exposure keeps its raw value in the JSON, next to the exposure, a
``supported`` flag and the caveat that the terminal and the HTML show instead of the figure.

Selection: ``session_id`` keeps one session, ``since`` the sessions still running or ended at/after
it. Exclusions follow the selection (those the selected sessions made; without ``session_id``, the
operator's too); lemon candidates are the fleet's, whatever the selection, since a node's record
spans jobs.

    >>> from trainguard.store import Store
    >>> with Store.open(":memory:") as store:
    ...     build_report(store, now=0.0).goodput.ettr is None
    True
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.analytics.chains import Chain, ChainStats, chain_stats, retry_chains
from trainguard.analytics.checkpoint_io import (
    DEFAULT_BANDWIDTH_BPS,
    CheckpointIOSummary,
    checkpoint_io,
)
from trainguard.analytics.concentration import (
    ExclusionConcentration,
    exclusion_concentration,
    exclusion_counts,
    lemon_candidates,
    run_nodes,
    select_exclusions,
)
from trainguard.analytics.exposure import Support
from trainguard.analytics.failures import FailureStats, failure_stats
from trainguard.analytics.goodput import Goodput, combine, goodput
from trainguard.analytics.leadtime import (
    DEFAULT_WINDOW_S,
    AlertMark,
    LeadTimeSummary,
    alert_marks,
    lead_time_summary,
    merge_alerts,
)
from trainguard.analytics.model import (
    CheckpointAdvice,
    MeasuredInputs,
    ModelInputs,
    advise,
    measured_inputs,
)
from trainguard.analytics.runs import FAILED, RunView, failure_info, load_runs
from trainguard.nodehealth import NodeHealth
from trainguard.store import Store

ROUND_DIGITS = 4


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One session's identity and goodput."""

    session_id: int
    name: str
    backend: str
    status: str
    attempts: int
    goodput: Goodput

    def to_dict(self) -> dict[str, object]:
        return {"session_id": self.session_id, "name": self.name, "backend": self.backend,
                "status": self.status, "attempts": self.attempts,
                "goodput": self.goodput.to_dict()}


@dataclass(frozen=True, slots=True)
class AnalyticsReport:
    """The analytics of a store's runs (see the module docstring).

        >>> report = build_report(store, since=time.time() - 30 * 86400)  # doctest: +SKIP
        >>> report.goodput.ettr, report.chain_stats["all"].success_rate   # doctest: +SKIP
        (0.91, 0.8)
    """

    session_id: int | None
    since: float | None
    generated: float
    runs: tuple[RunSummary, ...]
    goodput: Goodput
    """All selected runs together."""
    chains: tuple[Chain, ...]
    chain_stats: Mapping[str, ChainStats]
    failures: FailureStats
    exclusions: ExclusionConcentration
    lemons: tuple[NodeHealth, ...]
    lead_times: LeadTimeSummary
    checkpoint_io: CheckpointIOSummary
    model_inputs: MeasuredInputs
    advice: CheckpointAdvice | None
    """None unless every model input could be measured."""
    rate_support: Support | None = None
    """Whether ``failures.per_node_day`` rests on enough exposure (:mod:`.exposure`)."""
    advice_support: Support | None = None
    """Whether ``advice``'s optimum rests on enough data; None without advice."""

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "session_id": self.session_id,
            "since": self.since,
            "generated": self.generated,
            "runs": [r.to_dict() for r in self.runs],
            "goodput": self.goodput.to_dict(),
            "chains": [c.to_dict() for c in self.chains],
            "chain_stats": {k: v.to_dict() for k, v in self.chain_stats.items()},
            "failures": {**self.failures.to_dict(), "rate_support": None
                         if self.rate_support is None else self.rate_support.to_dict()},
            "exclusions": self.exclusions.to_dict(),
            "lemons": [h.to_dict() for h in self.lemons],
            "lead_times": self.lead_times.to_dict(),
            "checkpoint_io": self.checkpoint_io.to_dict(),
            "model_inputs": self.model_inputs.to_dict(),
            "advice": None if self.advice is None else self.advice.to_dict(),
            "advice_support": None if self.advice_support is None
            else self.advice_support.to_dict(),
        }
        result: dict[str, Any] = json_safe(doc)
        return result


def json_safe(value: Any, digits: int = ROUND_DIGITS) -> Any:
    """``value`` with floats rounded (non-finite ones as None), tuples as lists, keys as str."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, digits) for v in value]
    return str(value)


def build_report(
    store: Store,
    *,
    session_id: int | None = None,
    since: float | None = None,
    bandwidth_bps: float = DEFAULT_BANDWIDTH_BPS,
    top_k: int = 3,
    lead_window_s: float = DEFAULT_WINDOW_S,
    include_queue: bool = False,
    now: float | None = None,
) -> AnalyticsReport:
    """Compute every analytic for the selected runs; ``now`` (default: the wall clock) dates the
    report and ages the lemon scores. Attempts still running are left out of durations."""
    now = time.time() if now is None else now
    runs = load_runs(store, session_id=session_id, since=since)
    per_run = tuple(
        RunSummary(r.session_id, r.session.name, r.session.backend, r.session.status,
                   len(r.attempts), goodput(r, include_queue=include_queue))
        for r in runs)
    chains = retry_chains(runs)
    failures = failure_stats(runs)
    records = select_exclusions(
        store.exclusions(),
        session_ids=None if session_id is None else {r.session_id for r in runs},
        since=since)
    measured = measured_inputs(runs, failures)
    advice = _advice(measured)
    marks, stops = _alert_events(store, runs)
    return AnalyticsReport(
        session_id=session_id,
        since=since,
        generated=now,
        runs=per_run,
        goodput=combine(r.goodput for r in per_run),
        chains=tuple(chains),
        chain_stats=chain_stats(chains),
        failures=failures,
        exclusions=exclusion_concentration(exclusion_counts(records), run_nodes(runs), top_k),
        lemons=tuple(lemon_candidates(store, now)),
        lead_times=lead_time_summary(runs, merge_alerts(store.alerts(), marks), lead_window_s,
                                     stops),
        checkpoint_io=checkpoint_io((c for r in runs for c in r.checkpoints), bandwidth_bps),
        model_inputs=measured,
        advice=advice,
        rate_support=measured.rate_support(),
        advice_support=None if advice is None
        else measured.interval_support(advice.optimal_interval_s),
    )


def _alert_events(store: Store, runs: Sequence[RunView]
                  ) -> tuple[list[AlertMark], dict[int, list[AlertMark]]]:
    """The alerts the selected runs' supervisors recorded as events: all of them, and per failed
    attempt that names a culprit, those recorded for that attempt (what may have stopped it)."""
    marks: list[AlertMark] = []
    stops: dict[int, list[AlertMark]] = {}
    for run in runs:
        marks += alert_marks(store.events(session_id=run.session_id))
        for a in run.attempts:
            if a.status == FAILED and failure_info(a).get("culprit_nodes"):
                stops[a.id] = alert_marks(store.events(attempt_id=a.id))
    return marks, stops


def _advice(m: MeasuredInputs) -> CheckpointAdvice | None:
    if m.nodes is None or m.failures_per_node_day is None or m.write_s is None \
            or m.restart_s is None:
        return None
    inputs = ModelInputs(m.nodes.value, m.failures_per_node_day.value, m.write_s.value,
                         m.restart_s.value)
    return advise(inputs, None if m.interval_s is None else m.interval_s.value)


__all__ = ["ROUND_DIGITS", "AnalyticsReport", "RunSummary", "build_report", "json_safe"]
