"""The rank's JSON-lines event file: one record per line, each line one ``os.write``.

The fd is opened with ``O_APPEND``, and every record goes out in a single ``write`` call with no
buffering, so a SIGKILL between two records never leaves half a line and several processes
appending to one file never interleave inside a line (POSIX appends to a regular file are atomic
with respect to each other on local file systems).

A SIGKILL that lands *inside* the write of a record longer than a page can still cut it: Linux
stops copying at a page boundary once a fatal signal is pending. So a writer that opens a file
ending mid-line ends that line first: the torn record is the only one lost (readers skip a line
that is not JSON), never the next process's first record glued onto it.

A live writer's record can look the same for a moment: Linux grows the file a page at a time
while it copies, and a reader does not wait for the writer. So a file that ends mid-line counts
as torn only once it has stopped growing (:func:`torn_tail`); otherwise every process that
opened the file while another wrote a long record would leave a blank line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainguard.errors import ConfigError

__all__ = ["EventLog", "encode_record", "ends_mid_line", "torn_tail"]

logger = logging.getLogger(__name__)


def encode_record(record: dict[str, Any]) -> bytes:
    """One compact JSON line; NaN/inf are refused (the SDK writes them as strings or null)."""
    return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")


def ends_mid_line(path: Path) -> bool:
    """Whether the file's last byte is not a line end (a record cut by a kill); False for an
    empty or unreadable file."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size == 0:
                return False
            f.seek(size - 1)
            return f.read(1) != b"\n"
    except OSError:
        return False


SETTLE_CHECKS = 5
SETTLE_PAUSE_S = 0.002
"""How :func:`torn_tail` tells a torn record from one being written: the file's size is read
this many times, this far apart (a record's write takes microseconds; only a writer descheduled
mid-record for longer than the whole wait still looks torn, and costs one blank line)."""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def torn_tail(path: Path, checks: int = SETTLE_CHECKS, pause_s: float = SETTLE_PAUSE_S,
              sleep: Callable[[float], None] = time.sleep) -> bool:
    """Whether the file ends mid-line and stays so: its size unchanged over ``checks`` looks
    ``pause_s`` apart (a file still growing is another writer's record, which that writer
    ends); pauses only when it ends mid-line."""
    if not ends_mid_line(path):
        return False
    size = _size(path)
    for _ in range(checks):
        sleep(pause_s)
        now = _size(path)
        if now != size:
            return False
    return ends_mid_line(path)


class EventLog:
    """Append-only writer of event records.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "rank0.jsonl"
    >>> log = EventLog(path)
    >>> log.write({"t": 1.0, "rank": 0, "kind": "finish"})
    >>> log.close()
    >>> path.read_text()
    '{"t":1.0,"rank":0,"kind":"finish"}\\n'
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(
                path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
            )
        except OSError as exc:
            raise ConfigError(
                f"TRAINGUARD_EVENTS={path}: cannot open event file: {exc.strerror or exc}"
            ) from exc
        self._warned = False
        if torn_tail(path):
            # A blank line at worst, if another writer stalled mid-record: readers skip those.
            with contextlib.suppress(OSError):
                os.write(self._fd, b"\n")

    def write(self, record: dict[str, Any]) -> None:
        """Append one record. I/O errors are logged once, not raised: reporting must never be
        the reason a training run dies."""
        if self._fd is None:
            return
        line = encode_record(record)
        try:
            written = os.write(self._fd, line)
        except OSError as exc:
            self._warn("cannot write event to %s: %s", self.path, exc)
            return
        if written != len(line):
            # Only when the disk is full: end the partial line so the next record starts clean.
            self._warn("short write of event to %s (%d of %d bytes)", self.path, written, len(line))
            with contextlib.suppress(OSError):
                os.write(self._fd, b"\n")

    def _warn(self, msg: str, *args: object) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(msg, *args)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
