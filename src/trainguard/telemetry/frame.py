"""The one internal representation of telemetry: aligned arrays, metric x entity x time.

Every source (Prometheus HTTP API, OpenMetrics text, Parquet) ends in a `Telemetry`: one regular
time grid shared by all metrics, and per metric a float64 matrix `values[entity, time]` with NaN
where nothing was reported. An entity is a node or a (node, GPU) pair.

    >>> import numpy as np
    >>> grid = np.arange(0, 120, 30, dtype=np.int64)
    >>> temp = MetricSeries("DCGM_FI_DEV_GPU_TEMP", MetricKind.GAUGE,
    ...                     (Entity("n1", "0"), Entity("n1", "1")), np.full((2, 4), 40.0))
    >>> Telemetry(grid, 30, (temp,)).nodes
    ('n1',)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from trainguard.errors import TelemetryError

__all__ = ["Entity", "FloatArray", "IntArray", "MetricKind", "MetricSeries", "Telemetry"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class MetricKind(StrEnum):
    """What a metric's values mean over time."""

    GAUGE = "gauge"
    """A level (temperature, utilisation)."""
    COUNTER = "counter"
    """Cumulative: declared `# TYPE counter` or named `*_total`; may reset to zero."""
    MONOTONIC = "monotonic"
    """Typed as a gauge but cumulative in fact (dcgm-exporter's PCIe replays, ECC totals)."""
    RATE = "rate"
    """Per-second increase derived from a COUNTER or MONOTONIC series (see `rates.to_rates`)."""
    UNKNOWN = "unknown"
    """No `# TYPE` line and no naming convention."""


@dataclass(frozen=True, slots=True, order=True)
class Entity:
    """A node, or one GPU of a node (`gpu` is the GPU index, or its UUID when no index is known)."""

    node: str
    gpu: str | None = None

    def __str__(self) -> str:
        return self.node if self.gpu is None else f"{self.node}/gpu{self.gpu}"


@dataclass(frozen=True, eq=False)
class MetricSeries:
    """One metric's values on the shared grid: `values[i, t]` belongs to `entities[i]`.

    `name` is the metric key: the metric name plus the labels that split it into separate
    dimensions (e.g. `node_network_receive_bytes_total{device="eth0"}`); labels that only
    identify the entity (node, GPU, UUID, model name) are not part of it.
    """

    name: str
    kind: MetricKind
    entities: tuple[Entity, ...]
    values: FloatArray

    def __post_init__(self) -> None:
        if self.values.ndim != 2 or self.values.shape[0] != len(self.entities):
            raise TelemetryError(
                f"metric {self.name}: values shape {self.values.shape} does not match "
                f"{len(self.entities)} entities")

    @property
    def per_gpu(self) -> bool:
        return any(e.gpu is not None for e in self.entities)


@dataclass(frozen=True, eq=False)
class Telemetry:
    """All metrics on one regular grid `times` (unix seconds, spacing `step_s`).

    `jobs` optionally maps a node to a per-time array of job ids (empty string = no job) when a
    job label (e.g. dcgm-exporter's `hpc_job`) was present; the detector uses it for peer groups.
    """

    times: IntArray
    step_s: int
    metrics: tuple[MetricSeries, ...]
    jobs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.step_s <= 0:
            raise TelemetryError("telemetry step must be > 0 s")
        for m in self.metrics:
            if m.values.shape[1] != self.times.shape[0]:
                raise TelemetryError(
                    f"metric {m.name}: {m.values.shape[1]} samples per entity, grid has "
                    f"{self.times.shape[0]}")

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({e.node for m in self.metrics for e in m.entities}))

    @property
    def n_samples(self) -> int:
        """Reported (non-NaN) samples."""
        return int(sum(np.count_nonzero(~np.isnan(m.values)) for m in self.metrics))

    def metric(self, name: str) -> MetricSeries | None:
        for m in self.metrics:
            if m.name == name:
                return m
        return None

    def slice_time(self, start_s: int, end_s: int) -> Telemetry:
        """The grid points with start_s <= t < end_s."""
        lo = int(np.searchsorted(self.times, start_s, side="left"))
        hi = int(np.searchsorted(self.times, end_s, side="left"))
        return Telemetry(
            self.times[lo:hi], self.step_s,
            tuple(MetricSeries(m.name, m.kind, m.entities, m.values[:, lo:hi])
                  for m in self.metrics),
            {n: j[lo:hi] for n, j in self.jobs.items()})

    def chunks(self, chunk_s: int) -> Iterator[Telemetry]:
        """Consecutive time slices of `chunk_s` seconds, aligned to multiples of chunk_s; slices
        without grid points are skipped, so the work is bounded by the grid, not the time span."""
        if chunk_s <= 0:
            raise TelemetryError("chunk length must be > 0 s")
        i = 0
        while i < self.times.size:
            start = int(self.times[i]) // chunk_s * chunk_s
            yield self.slice_time(start, start + chunk_s)
            i = int(np.searchsorted(self.times, start + chunk_s, side="left"))
