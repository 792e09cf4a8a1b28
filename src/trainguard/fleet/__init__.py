"""Fleet-history analytics over a cluster's fault record (pure: no I/O, no store).

- :mod:`.events`: fault events, the observation window, outages (merging rule) and which faults
  count in a window;
- :mod:`.poisson`: exact Poisson / chi-square tails and the Garwood interval (no SciPy);
- :mod:`.rates`: faults per node-day overall, by category and kind, and the MTBF of an N-node job;
- :mod:`.repairs`: repair times by category and their long tail;
- :mod:`.down`: the time-weighted distribution of concurrently-down nodes;
- :mod:`.lemons`: lemon nodes (Poisson tail + Benjamini-Hochberg), over-dispersion, top-k share;
- :mod:`.summary`: every figure of one window assembled (:func:`fleet_summary`).
"""

from __future__ import annotations

from trainguard.fleet.down import (
    DownBucket,
    NodesDown,
    down_seconds,
    down_series,
    down_steps,
    mean_down,
    nodes_down,
    time_quantile,
)
from trainguard.fleet.events import (
    DAY_S,
    FaultEvent,
    FleetWindow,
    Outage,
    category_of,
    check_fleet_size,
    clip,
    counted_faults,
    merge_outages,
)
from trainguard.fleet.lemons import (
    DEFAULT_FDR,
    Dispersion,
    LemonReport,
    NodeTest,
    benjamini_hochberg,
    dispersion,
    lemon_report,
    node_counts,
)
from trainguard.fleet.poisson import (
    chi2_sf,
    gamma_p,
    gamma_q,
    gamma_quantile,
    garwood_interval,
    poisson_pmf,
    poisson_sf_at_least,
    poisson_top_k_mean,
)
from trainguard.fleet.rates import (
    FleetRates,
    Mtbf,
    Rate,
    fault_rates,
    mtbf_by_job_size,
    mtbf_for_job,
    rate,
)
from trainguard.fleet.repairs import (
    DEFAULT_TAIL_FRACTION,
    FleetRepairs,
    RepairStats,
    fleet_repairs,
    quantile,
    repair_stats,
)
from trainguard.fleet.summary import (
    DEFAULT_JOB_SIZES,
    CountBin,
    DownSummary,
    FleetSummary,
    LongRepair,
    ReportComparison,
    TopShare,
    fleet_summary,
)

__all__ = [
    "DAY_S",
    "DEFAULT_FDR",
    "DEFAULT_JOB_SIZES",
    "DEFAULT_TAIL_FRACTION",
    "CountBin",
    "Dispersion",
    "DownBucket",
    "DownSummary",
    "FaultEvent",
    "FleetRates",
    "FleetRepairs",
    "FleetSummary",
    "FleetWindow",
    "LemonReport",
    "LongRepair",
    "Mtbf",
    "NodeTest",
    "NodesDown",
    "Outage",
    "Rate",
    "RepairStats",
    "ReportComparison",
    "TopShare",
    "benjamini_hochberg",
    "category_of",
    "check_fleet_size",
    "chi2_sf",
    "clip",
    "counted_faults",
    "dispersion",
    "down_seconds",
    "down_series",
    "down_steps",
    "fault_rates",
    "fleet_repairs",
    "fleet_summary",
    "gamma_p",
    "gamma_q",
    "gamma_quantile",
    "garwood_interval",
    "lemon_report",
    "mean_down",
    "merge_outages",
    "mtbf_by_job_size",
    "mtbf_for_job",
    "node_counts",
    "nodes_down",
    "poisson_pmf",
    "poisson_sf_at_least",
    "poisson_top_k_mean",
    "quantile",
    "rate",
    "repair_stats",
    "time_quantile",
]
