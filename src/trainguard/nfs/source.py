"""Reading mountstats and the client's slot limit: the only I/O of `trainguard.nfs`.

The clock and the wait are injected so tests drive the two-sample read without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainguard.errors import TelemetryError
from trainguard.fileread import UnreadableFile, read_bounded
from trainguard.nfs.model import Environment

__all__ = [
    "LIVE_MOUNTSTATS",
    "MAX_MOUNTSTATS_BYTES",
    "TCP_SLOT_LIMIT",
    "LiveSample",
    "environment",
    "is_live",
    "read_mountstats",
    "read_slot_limit",
    "sample_twice",
]

LIVE_MOUNTSTATS = Path("/proc/self/mountstats")
TCP_SLOT_LIMIT = Path("/proc/sys/sunrpc/tcp_max_slot_table_entries")
MAX_MOUNTSTATS_BYTES = 64 * 1024 * 1024
"""The most a mountstats file may hold. A real one is about 7 KB per NFS mount (the NFSv4
per-op list is the bulk), so a few MB even with thousands of mounts; past this the input is not
a mountstats capture (``/dev/zero``, a log file given by mistake) and is refused before it is
read into memory."""


def is_live(path: Path) -> bool:
    """A procfs file changes between reads (sample it); anything else is a capture."""
    return path.is_absolute() and path.parts[:2] == ("/", "proc")


def read_mountstats(path: Path, max_bytes: int = MAX_MOUNTSTATS_BYTES) -> str:
    """The text of a mountstats file: a regular file (procfs files are) of at most `max_bytes`.

    A device, FIFO or socket (``/dev/zero`` is endless) or a larger file is refused with one
    `TelemetryError` line before it fills memory.
    """
    try:
        data = read_bounded(path, max_bytes)
    except UnreadableFile as exc:
        what = ("; give a mountstats capture or /proc/self/mountstats" if not exc.too_large
                else ": not a mountstats capture (a real one is a few MB even with thousands "
                     "of mounts)")
        raise TelemetryError(f"cannot read {path}: {exc.reason}{what}") from exc
    return data.decode("utf-8", errors="replace")


def read_slot_limit(path: Path | None = None) -> int | None:
    """sunrpc.tcp_max_slot_table_entries, or None when sunrpc is not loaded / unreadable."""
    path = TCP_SLOT_LIMIT if path is None else path
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def environment(slot_limit: int | None, link_gbps: float | None, live: bool,
                limit_path: Path | None = None) -> Environment:
    """The slot limit from the flag, else (live only) from the client's sysctl."""
    limit_path = TCP_SLOT_LIMIT if limit_path is None else limit_path
    if slot_limit is not None:
        return Environment(slot_limit=slot_limit, slot_limit_source="--slot-limit",
                           link_gbps=link_gbps)
    if live:
        value = read_slot_limit(limit_path)
        if value is not None:
            return Environment(slot_limit=value, slot_limit_source=str(limit_path),
                               slot_limit_proto="tcp", link_gbps=link_gbps)
        return Environment(slot_limit_source=f"unknown ({limit_path} not readable: sunrpc "
                                             "not loaded?)", link_gbps=link_gbps)
    return Environment(slot_limit_source="unknown (capture from elsewhere; pass --slot-limit)",
                       link_gbps=link_gbps)


@dataclass(frozen=True, slots=True)
class LiveSample:
    """Two reads of a live mountstats file and the measured time between them."""

    before: str
    after: str
    interval_s: float


def sample_twice(path: Path, interval_s: float, *,
                 wait: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 check: Callable[[str], object] | None = None) -> LiveSample:
    """Read `path`, wait `interval_s`, read it again; the interval is measured, not assumed.

    `check` sees the first read before the wait and may raise: a file with nothing to
    diagnose (no NFS mount) is refused at once instead of after the whole interval.
    """
    before = read_mountstats(path)
    if check is not None:
        check(before)
    start = clock()
    wait(interval_s)
    after = read_mountstats(path)
    return LiveSample(before=before, after=after, interval_s=max(clock() - start, 1e-6))
