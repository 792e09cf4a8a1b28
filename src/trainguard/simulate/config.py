"""What the cluster simulator generates: one validated, frozen config.

    >>> cfg = SimConfig(nodes=4, gpus_per_node=2, days=0.5, seed=7)
    >>> cfg.n_windows
    6
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from trainguard.valueorigin import InvalidValue

__all__ = ["DEFAULT_START_S", "WINDOW_S", "SimConfig", "parse_start"]

WINDOW_S = 7200
"""Output files and generated chunks cover epoch-aligned windows of this many seconds."""

DEFAULT_START_S = 1_731_888_000
"""2024-11-18 00:00:00 UTC (a Monday; a multiple of WINDOW_S)."""

_MAX_NODES = 4096
_MAX_GPUS = 16
_MAX_DAYS = 366.0


@dataclass(frozen=True, slots=True)
class SimConfig:
    """A simulated training cluster: its size, time span and how often things go wrong."""

    nodes: int = 63
    """Number of GPU nodes (named node01, node02, ...)."""
    gpus_per_node: int = 8
    """GPUs per node."""
    days: float = 7.0
    """Simulated time span in days."""
    seed: int = 0
    """Seed of every random choice; the same seed gives byte-identical output."""
    interval_s: int = 30
    """Scrape interval in seconds; must divide the 2-hour window."""
    start_s: int = DEFAULT_START_S
    """First simulated instant, unix seconds (UTC)."""
    failures_per_day: float = 1.5
    """Mean hardware failures (fatal XIDs) per day across the whole cluster."""
    app_xids_per_day: float = 1.0
    """Mean application XID incidents (13/31/43 hitting every node of one job) per day."""
    maintenances_per_day: float = 0.5
    """Mean planned maintenance reboots per day across the cluster."""
    benign_per_day: float = 12.0
    """Mean benign anomalies (failure look-alikes) per day across the cluster."""
    scrape_gaps_per_day: float = 4.0
    """Mean whole-node scrape gaps (target missing a few scrapes) per day."""
    missing_sample_prob: float = 1e-4
    """Probability that any single sample is missing."""
    no_precursor_fraction: float = 0.3
    """Fraction of hardware failures with no precursor in the telemetry."""
    node_level_fraction: float = 0.1
    """Fraction of hardware failures that hit a whole node (every GPU) rather than one GPU."""
    target_utilization: float = 0.85
    """Fraction of node-time the job queue tries to keep busy."""
    job_label: bool = False
    """Add dcgm-exporter's `hpc_job` label to GPU series (off: detectors must infer peers)."""
    model_name: str = "NVIDIA H100 80GB HBM3"
    """`modelName` label of the GPU series."""
    driver_version: str = "535.129.03"
    """`DCGM_FI_DRIVER_VERSION` label of the GPU series."""

    def __post_init__(self) -> None:
        _check(1 <= self.nodes <= _MAX_NODES, "simulate.nodes", f"must be 1..{_MAX_NODES}")
        _check(1 <= self.gpus_per_node <= _MAX_GPUS,
               "simulate.gpus_per_node", f"must be 1..{_MAX_GPUS}")
        _check(0 < self.days <= _MAX_DAYS, "simulate.days", f"must be > 0 and <= {_MAX_DAYS:g}")
        _check(self.seed >= 0, "simulate.seed", "must be >= 0")
        _check(self.interval_s >= 1 and WINDOW_S % self.interval_s == 0,
               "simulate.interval_s",
               f"must be a whole divisor of {WINDOW_S} s (e.g. 15, 30, 60)")
        _check(self.interval_s * 2 <= self.span_s,
               "simulate.days", "must cover at least two scrape intervals")
        _check(0 <= self.start_s < 4_102_444_800,
               "simulate.start_s", "must be a unix time between 1970 and 2100")
        for key in ("failures_per_day", "app_xids_per_day", "maintenances_per_day",
                    "benign_per_day", "scrape_gaps_per_day"):
            value = getattr(self, key)
            _check(0 <= value <= 1000, f"simulate.{key}", "must be between 0 and 1000")
        for key in ("missing_sample_prob", "no_precursor_fraction", "node_level_fraction"):
            value = getattr(self, key)
            _check(0 <= value <= 1, f"simulate.{key}", "must be between 0 and 1")
        _check(0.05 <= self.target_utilization <= 1,
               "simulate.target_utilization", "must be between 0.05 and 1")
        _check(bool(self.model_name) and '"' not in self.model_name,
               "simulate.model_name", "must be non-empty and contain no quotes")
        _check(bool(self.driver_version) and '"' not in self.driver_version,
               "simulate.driver_version", "must be non-empty and contain no quotes")

    @property
    def span_s(self) -> int:
        return round(self.days * 86400)

    @property
    def end_s(self) -> int:
        """First instant after the simulated span."""
        return self.start_s + self.span_s

    @property
    def first_window_s(self) -> int:
        return self.start_s // WINDOW_S * WINDOW_S

    @property
    def n_windows(self) -> int:
        return -(-(self.end_s - self.first_window_s) // WINDOW_S)

    @property
    def node_names(self) -> tuple[str, ...]:
        width = max(2, len(str(self.nodes)))
        return tuple(f"node{i + 1:0{width}d}" for i in range(self.nodes))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(ok: bool, key: str, problem: str) -> None:
    if not ok:
        raise InvalidValue(key, problem)


def parse_start(text: str) -> int:
    """`--start`: unix seconds or an ISO-8601 time (naive = UTC) -> unix seconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidValue("simulate.start",
                           f"{text!r} is neither unix seconds nor an ISO-8601 time") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp())
