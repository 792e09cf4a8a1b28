"""The one exception hierarchy of trainguard.

    TrainguardError                 root: catch this at the CLI edge
    +-- ConfigError                 bad configuration or rule file (names the key / line)
    +-- LogParseError               evidence input that cannot be read at all
    +-- StoreError                  the event store: connect, schema, write
    |   +-- SchemaVersionError      the database was written by a newer trainguard
    +-- TelemetryError              metrics sources (Prometheus, OpenMetrics, Parquet)
    +-- LaunchError                 starting or supervising training processes
    +-- CheckpointError             checkpoint save / load / validation
    |   +-- SnapshotError           in-memory snapshot tier: torn, stale, too big, no room
    +-- TraceError                  trace input: state files, flight-recorder dumps, run dirs
    +-- FleetError                  a fleet's fault history: bad events, window or fleet size
    +-- HistoryError                a fault-history file that cannot be imported at all

A user mistake raises one of these with a message that reads as one clear line; the CLI prints it
and exits non-zero without a traceback.
"""

from __future__ import annotations


class TrainguardError(Exception):
    """Root of every error trainguard raises on purpose."""


class ConfigError(TrainguardError):
    """A configuration value or rule file is invalid."""


class LogParseError(TrainguardError):
    """Evidence input could not be read."""


class StoreError(TrainguardError):
    """The event store could not be opened, read or written."""


class SchemaVersionError(StoreError):
    """The store's schema is newer (or otherwise incompatible) than this trainguard."""


class TelemetryError(TrainguardError):
    """A telemetry source could not be read."""


class LaunchError(TrainguardError):
    """Training processes could not be launched or supervised."""


class CheckpointError(TrainguardError):
    """A checkpoint could not be saved, loaded or validated."""


class SnapshotError(CheckpointError):
    """An in-memory snapshot could not be taken, replicated or restored (names why)."""


class TraceError(TrainguardError):
    """Trace input (a rank's state file, a flight-recorder dump, a run's records) is unusable."""


class FleetError(TrainguardError):
    """A fleet's fault history (events, window, fleet size) is unusable for the analysis asked."""


class HistoryError(TrainguardError):
    """A fault-history file as a whole cannot be read: not JSON, no node or time field found,
    an unknown format or time unit, a bad mapping file. Bad single records are not errors: the
    importer refuses them one by one (with their line) and imports the rest."""


__all__ = [
    "CheckpointError",
    "ConfigError",
    "FleetError",
    "HistoryError",
    "LaunchError",
    "LogParseError",
    "SchemaVersionError",
    "SnapshotError",
    "StoreError",
    "TelemetryError",
    "TraceError",
    "TrainguardError",
]
