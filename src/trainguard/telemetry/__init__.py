"""Telemetry in: Prometheus HTTP API, OpenMetrics text, Parquet -> one aligned `Telemetry`.

    >>> tel, warnings = load_sources(["dumps/"])          # doctest: +SKIP
    >>> tel = to_rates(tel)                               # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from trainguard.errors import TelemetryError
from trainguard.telemetry.builder import SourceStats, TelemetryBuilder, entity_sort_key
from trainguard.telemetry.frame import (
    Entity,
    FloatArray,
    IntArray,
    MetricKind,
    MetricSeries,
    Telemetry,
)
from trainguard.telemetry.identity import (
    Identified,
    IdentityConfig,
    identify,
    render_key,
    strip_port,
)
from trainguard.telemetry.limits import DEFAULT_MAX_MEMORY_BYTES, MemoryLimitError
from trainguard.telemetry.openmetrics import (
    OPENMETRICS_SUFFIXES,
    ParseStats,
    TimestampUnit,
    expand_paths,
    parse_series_text,
    read_openmetrics,
    require_timestamps,
)
from trainguard.telemetry.parquet import (
    ParquetStats,
    ParquetWriter,
    iter_parquet_chunks,
    read_parquet,
    write_parquet,
)
from trainguard.telemetry.prometheus import (
    NotPrometheus,
    PrometheusClient,
    PrometheusUnreachable,
    read_prometheus,
)
from trainguard.telemetry.rates import detect_monotonic, to_rates
from trainguard.telemetry.snapshot import (
    MissingTimestamps,
    SnapshotTime,
    StampFor,
    parse_at,
    snapshot_times,
)

__all__ = [
    "OPENMETRICS_SUFFIXES",
    "Entity",
    "FloatArray",
    "Identified",
    "IdentityConfig",
    "IntArray",
    "MemoryLimitError",
    "MetricKind",
    "MetricSeries",
    "MissingTimestamps",
    "NotPrometheus",
    "ParquetStats",
    "ParquetWriter",
    "ParseStats",
    "PrometheusClient",
    "PrometheusUnreachable",
    "SnapshotTime",
    "SourceStats",
    "StampFor",
    "Telemetry",
    "TelemetryBuilder",
    "TimestampUnit",
    "detect_monotonic",
    "entity_sort_key",
    "expand_paths",
    "identify",
    "iter_parquet_chunks",
    "load_sources",
    "parse_at",
    "parse_series_text",
    "read_openmetrics",
    "read_parquet",
    "read_prometheus",
    "render_key",
    "snapshot_times",
    "strip_port",
    "to_rates",
    "write_parquet",
]

Progress = Callable[[int, int], None]


def _is_parquet(path: Path) -> bool:
    if path.suffix == ".parquet":
        return True
    with path.open("rb") as f:
        return f.read(4) == b"PAR1"


def _classify(sources: Sequence[str | Path]) -> tuple[list[Path], list[Path]]:
    """(OpenMetrics files, Parquet files); a directory contributes both kinds it holds."""
    om: list[Path] = []
    pq: list[Path] = []
    for src in map(Path, sources):
        if src.is_dir():
            found = sorted(f for f in (*src.glob("*"), *src.glob("*/*")) if f.is_file())
            wanted = (*OPENMETRICS_SUFFIXES, *(s + ".gz" for s in OPENMETRICS_SUFFIXES))
            dir_om = [f for f in found if f.name.endswith(wanted)]
            dir_pq = [f for f in found if f.suffix == ".parquet"]
            if not dir_om and not dir_pq:
                raise TelemetryError(
                    f"no metrics files (*.om, *.txt, *.prom, *.parquet, ...) in {src}")
            om.extend(dir_om)
            pq.extend(dir_pq)
        elif src.is_file():
            (pq if _is_parquet(src) else om).append(src)
        else:
            raise TelemetryError(f"telemetry source not found: {src}")
    return om, pq


def load_sources(sources: Sequence[str | Path], *, identity: IdentityConfig | None = None,
                 step_s: int | None = None, progress: Progress | None = None,
                 timestamp_unit: TimestampUnit = "auto",
                 max_memory_bytes: int | None = DEFAULT_MAX_MEMORY_BYTES,
                 stamp: StampFor | None = None) -> tuple[Telemetry, list[str]]:
    """Read files and directories (OpenMetrics text, plain or gzip; long-format Parquet) into one
    `Telemetry`; also returns one-line warnings (malformed lines, series without a node label).

    Raises `TelemetryError` for a missing path, an unreadable file or no samples at all, and
    `MemoryLimitError` when the aligned matrices would exceed `max_memory_bytes`.
    `stamp` times samples that carry no timestamp (see `snapshot.py`).
    """
    if not sources:
        raise TelemetryError("no telemetry sources given")
    om, pq = _classify(sources)
    builder = TelemetryBuilder(identity, step_s, max_memory_bytes=max_memory_bytes)
    om_bytes = sum(f.stat().st_size for f in om)
    total = om_bytes + sum(f.stat().st_size for f in pq)
    warnings: list[str] = []
    if om:
        stats = read_openmetrics(
            om, builder, timestamp_unit=timestamp_unit, stamp=stamp, require_samples=not pq,
            progress=None if progress is None else (lambda done, _t: progress(done, total)))
        warnings.extend(stats.warnings)
        if stats.samples == 0 and stats.lines and not stats.untimestamped:
            warnings.append(f"no samples in {len(om)} OpenMetrics files ({stats.lines} lines)")
    if pq:
        read_parquet(
            pq, builder,
            progress=None if progress is None else (
                lambda done, _t: progress(om_bytes + done, total)))
        if om:
            require_timestamps(stats, builder)
    tel = builder.build()
    warnings.extend(builder.last_stats.warnings)
    return tel, warnings
