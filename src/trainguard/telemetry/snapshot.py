"""Saved scrapes without timestamps: what is missing, and the explicit opt-in that stamps them.

`curl host:9400/metrics > n07.prom` saves one moment of an exporter: its samples carry no
timestamp, so nothing says *when* they were taken and several of them cannot be put in order.
The reader never invents a time. It counts such samples and, when nothing else was read,
raises `MissingTimestamps` with how to get a time series instead. The user may opt in with
`--at TIME` (one time for the files) or `--at mtime` (each file's modification time): every
sample without a timestamp is then stamped with its file's time, one snapshot per file, and
several files stamped at different times form a series.

    >>> stamp = snapshot_times(["a.prom", "b.prom"], [parse_at("2026-11-18T03:00:00Z")])
    >>> stamp(Path("b.prom"))
    1794970800.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainguard.errors import ConfigError, TelemetryError
from trainguard.timeparse import parse_timestamp

__all__ = ["MissingTimestamps", "SnapshotTime", "StampFor", "missing_timestamps_message",
           "parse_at", "snapshot_times"]

StampFor = Callable[[Path], float]
"""A file -> the unix time its samples without a timestamp are stamped with."""

MTIME = "mtime"


class MissingTimestamps(TelemetryError):
    """Samples without timestamps and no `--at`: there is no time series to score."""


@dataclass(frozen=True, slots=True)
class SnapshotTime:
    """When a saved scrape was taken: a fixed unix time, or (`at_s` None) the file's mtime."""

    at_s: float | None = None

    def time_for(self, path: Path) -> float:
        if self.at_s is not None:
            return self.at_s
        try:
            return path.stat().st_mtime
        except OSError as exc:
            raise TelemetryError(f"--at mtime: cannot stat {path}: {exc.strerror}") from exc


def parse_at(text: str, flag: str = "--at") -> SnapshotTime:
    """`mtime`, unix seconds or ISO-8601 (naive = UTC)."""
    if text.strip().lower() == MTIME:
        return SnapshotTime(None)
    return SnapshotTime(parse_timestamp(text, f"{flag} (unix seconds, ISO-8601 or mtime):"))


def snapshot_times(sources: Sequence[str | Path], ats: Sequence[SnapshotTime],
                   flag: str = "--at") -> StampFor | None:
    """The stamp of each file: one `--at` for all sources, or one per source in order (a
    directory's files share its value). None when no `--at` was given."""
    if not ats:
        return None
    if len(ats) == 1:
        only = ats[0]
        return only.time_for
    if len(ats) != len(sources):
        raise ConfigError(f"{flag}: give one value for all sources or one per source "
                          f"({len(sources)} sources, {len(ats)} values)")
    by_source = [(Path(s), at) for s, at in zip(sources, ats, strict=True)]

    def stamp(path: Path) -> float:
        for src, at in by_source:
            if path == src or src in path.parents:
                return at.time_for(path)
        return ats[0].time_for(path)  # unreachable for files that came from `sources`

    return stamp


def missing_timestamps_message(n_samples: int, files: Sequence[str], n_files: int) -> str:
    """What is missing and how to get a time series (the CLI flags named are detect's)."""
    where = files[0] if n_files == 1 else f"{n_files} files (e.g. {files[0]})"
    return (
        f"{where}: {n_samples} samples have no timestamp. A plain scrape (`curl "
        "host:9400/metrics`) is one moment without a time, not a time series, so there is "
        "nothing to score. To get a time series: read the range from Prometheus "
        "(--prometheus URL --start TIME), or save samples with timestamps (Prometheus' "
        "/federate endpoint, `promtool tsdb dump-openmetrics`); or stamp the files yourself "
        "with --at TIME or --at mtime (the file's modification time): one snapshot per file, "
        "and several files taken at different times form a series.")
