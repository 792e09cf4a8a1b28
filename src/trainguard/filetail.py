"""Follow growing files: rank output, SDK event files, kernel logs, alert files.

A :class:`FileTail` hands out complete lines only (a half-written line waits for its newline),
numbers them for evidence references, and starts over when the file is truncated or replaced
(log rotation, ``echo > kern.log``). Its :meth:`~FileTail.position` survives a restart:
:meth:`~FileTail.restore` resumes there, or at the start of a file replaced in the meantime.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_READ_MAX = 4 << 20


class FileTail:
    """Incremental reader of one file.

        >>> tail = FileTail(Path("/nonexistent"))
        >>> tail.read()
        (b'', 1)
    """

    def __init__(self, path: Path, *, from_end: bool = False) -> None:
        self.path = path
        self._offset = 0
        self._next_line = 1
        self._partial = b""
        self._inode: int | None = None
        self._drop_first = False
        if from_end:
            self._skip_existing()

    def _skip_existing(self) -> None:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                self._inode = st.st_ino
                lines = 0
                last = b""
                while chunk := f.read(1 << 20):
                    lines += chunk.count(b"\n")
                    self._offset += len(chunk)
                    last = chunk
                # Part of a line written before we looked: skip the rest of it too.
                self._drop_first = bool(self._offset) and not last.endswith(b"\n")
                self._next_line = lines + 1
        except OSError:
            pass

    @property
    def offset(self) -> int:
        return self._offset

    def position(self) -> dict[str, int]:
        """Where the next read starts, as JSON-ready ints for :meth:`restore`.

        The offset excludes a buffered half line, so a restarted reader reads that line whole;
        ``inode`` is 0 while the file has not been seen; ``skip_partial`` is 1 when the line at
        ``offset`` began before a ``from_end`` start (its rest is skipped, not reported).

            >>> FileTail(Path("/nonexistent")).position()
            {'inode': 0, 'offset': 0, 'line': 1, 'skip_partial': 0}
        """
        return {"inode": self._inode or 0, "offset": self._offset - len(self._partial),
                "line": self._next_line, "skip_partial": int(self._drop_first)}

    def restore(self, position: Mapping[str, object]) -> None:
        """Resume from a saved :meth:`position` (after a restart).

        Nothing is read here: the next :meth:`read` checks the file, and one that was replaced
        (another inode) or is shorter than the saved offset is read from its start, as when it
        is rotated while followed. Raises ValueError for a malformed position.
        """
        inode, offset, line, skip = read_position(position, "skip_partial")
        self._inode = inode or None
        self._offset = offset
        self._next_line = line
        self._partial = b""
        self._drop_first = bool(skip)

    def read(self, max_bytes: int = _READ_MAX) -> tuple[bytes, int]:
        """New complete lines (joined, each ending in ``\\n``) and the number of the first."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if (self._inode is not None and st.st_ino != self._inode) \
                        or st.st_size < self._offset:
                    log.debug("%s was truncated or replaced; reading it from the start",
                              self.path)
                    self._offset, self._next_line, self._partial = 0, 1, b""
                    self._drop_first = False
                self._inode = st.st_ino
                if st.st_size == self._offset:
                    return b"", self._next_line
                f.seek(self._offset)
                data = f.read(max_bytes)
        except OSError:
            return b"", self._next_line
        self._offset += len(data)
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        complete = data[:cut]
        if self._drop_first and complete:
            nl = complete.find(b"\n")
            complete = complete[nl + 1:]
            self._next_line += 1
            self._drop_first = False
        first = self._next_line
        self._next_line += complete.count(b"\n")
        return complete, first

    def finish(self) -> bytes:
        """The half line held back for its newline, ended with one: the writer is gone and
        will not end it (a rank that died mid-line). Empty when nothing is held.

            >>> import tempfile
            >>> with tempfile.TemporaryDirectory() as d:
            ...     p = Path(d) / "log"
            ...     _ = p.write_bytes(b"one\\nKilled")
            ...     tail = FileTail(p)
            ...     tail.read(), tail.finish(), tail.finish()
            ((b'one\\n', 1), b'Killed\\n', b'')
        """
        rest, self._partial = self._partial, b""
        if not rest:
            return b""
        if self._drop_first:  # the rest of a line begun before a from_end start
            self._drop_first = False
            return b""
        self._next_line += 1
        return rest + b"\n"


def read_tail(path: Path, max_bytes: int, max_lines: int) -> tuple[bytes, int]:
    """The last lines of ``path``, at most ``max_bytes`` and ``max_lines`` of them (a line cut
    by the byte limit is left out), and the number of the first; raises OSError.

    Lines before the tail are counted, not kept, so evidence keeps its line numbers in output
    of any size; the bounds keep the classification of a failed rank's output short.

        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "out.log"
        >>> _ = path.write_bytes(b"one\\ntwo\\nthree\\n")
        >>> read_tail(path, 1 << 20, 2)
        (b'two\\nthree\\n', 2)
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        # One byte more than the bound: a newline just before the tail means its first line
        # is whole and kept.
        start = max(0, size - max_bytes - 1)
        first = 1
        while f.tell() < start:  # number the lines; output can be gigabytes
            first += f.read(min(1 << 20, start - f.tell())).count(b"\n")
        data = f.read(size - start)
    if start:
        nl = data.find(b"\n")
        data, first = (data[nl + 1:], first + 1) if nl >= 0 else (b"", first)
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(max_lines):
        end = data.rfind(b"\n", 0, end)
        if end < 0:
            return data, first
    cut = end + 1
    return data[cut:], first + data.count(b"\n", 0, cut)


def read_position(position: Mapping[str, object], skip_key: str) -> tuple[int, int, int, int]:
    """``(inode, offset, line, skip)`` of a saved reader position (``skip`` from `skip_key`, 0
    when absent); raises ValueError naming the field that is not a non-negative int, or a
    ``line`` below 1."""
    inode, offset, line = (_count(position, key) for key in ("inode", "offset", "line"))
    skip = _count(position, skip_key) if skip_key in position else 0
    if line < 1:
        raise ValueError("position.line must be >= 1")
    return inode, offset, line, skip


def _count(position: Mapping[str, object], key: str) -> int:
    """A non-negative int field of a saved position (JSON: bool is not a count)."""
    value = position.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"position.{key} must be a non-negative integer, got {value!r}")
    return value


def parse_json_lines(data: bytes, where: str) -> list[dict[str, Any]]:
    """Objects of a JSON-lines chunk; malformed lines are logged and skipped."""
    records: list[dict[str, Any]] = []
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            log.warning("%s: not a JSON line, ignored: %.120r", where, raw)
            continue
        if isinstance(obj, dict):
            records.append(obj)
        else:
            log.warning("%s: not a JSON object, ignored: %.120r", where, raw)
    return records


__all__ = ["FileTail", "parse_json_lines", "read_position", "read_tail"]
