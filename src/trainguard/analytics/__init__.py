"""Analytics over the event store: where a job's time went and how to get more of it back.

- :mod:`.runs`: sessions with their attempts and checkpoints (:func:`load_runs`);
- :mod:`.goodput`: ETTR and badput by cause (startup phases, checkpoint stalls, lost progress,
  detection, hangs, teardown, relaunch waits);
- :mod:`.chains`: retry chains, their success rate and retry intervals;
- :mod:`.failures`: failures per node-day, MTTF, MTTR;
- :mod:`.concentration`: how unevenly exclusions fall on nodes (top-k share, Gini, Lorenz);
- :mod:`.leadtime`: how long before a failure the detector flagged its culprit node;
- :mod:`.checkpoint_io`: checkpoint throughput against the link bandwidth;
- :mod:`.model`: the ETTR model and the optimum checkpoint interval;
- :mod:`.exposure`: when a measured rate or a derived interval rests on enough data to show;
- :mod:`.report`: all of it for a store in one value (:func:`build_report`).

    >>> from trainguard.store import Store
    >>> with Store.open(":memory:") as store:
    ...     fleet_goodput(load_runs(store)).wall_s
    0.0
"""

from __future__ import annotations

from trainguard.analytics.chains import Chain, ChainStats, chain_stats, retry_chains
from trainguard.analytics.checkpoint_io import (
    DEFAULT_BANDWIDTH_BPS,
    CheckpointIOSummary,
    CheckpointThroughput,
    checkpoint_io,
)
from trainguard.analytics.concentration import (
    ExclusionConcentration,
    exclusion_concentration,
    exclusion_counts,
    lemon_candidates,
    lorenz,
)
from trainguard.analytics.exposure import (
    ExposurePolicy,
    Support,
    interval_support,
    rate_support,
)
from trainguard.analytics.failures import FailureStats, Resume, failure_stats
from trainguard.analytics.goodput import AttemptTime, Badput, Goodput, fleet_goodput, goodput
from trainguard.analytics.leadtime import (
    AlertMark,
    LeadTime,
    LeadTimeSummary,
    alert_marks,
    lead_time_summary,
    lead_times,
)
from trainguard.analytics.model import (
    CheckpointAdvice,
    MeasuredInputs,
    Measurement,
    ModelInputs,
    advise,
    expected_ettr,
    measured_inputs,
    optimal_checkpoint_interval,
    young_daly_interval,
)
from trainguard.analytics.report import AnalyticsReport, RunSummary, build_report
from trainguard.analytics.runs import RunView, load_runs, without_sdk

__all__ = [
    "DEFAULT_BANDWIDTH_BPS",
    "AlertMark",
    "AnalyticsReport",
    "AttemptTime",
    "Badput",
    "Chain",
    "ChainStats",
    "CheckpointAdvice",
    "CheckpointIOSummary",
    "CheckpointThroughput",
    "ExclusionConcentration",
    "ExposurePolicy",
    "FailureStats",
    "Goodput",
    "LeadTime",
    "LeadTimeSummary",
    "MeasuredInputs",
    "Measurement",
    "ModelInputs",
    "Resume",
    "RunSummary",
    "RunView",
    "Support",
    "advise",
    "alert_marks",
    "build_report",
    "chain_stats",
    "checkpoint_io",
    "exclusion_concentration",
    "exclusion_counts",
    "expected_ettr",
    "failure_stats",
    "fleet_goodput",
    "goodput",
    "interval_support",
    "lead_time_summary",
    "lead_times",
    "lemon_candidates",
    "load_runs",
    "lorenz",
    "measured_inputs",
    "optimal_checkpoint_interval",
    "rate_support",
    "retry_chains",
    "without_sdk",
    "young_daly_interval",
]
