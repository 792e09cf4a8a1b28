"""The controller's copies of what agents send: rank output and SDK events appended to the
run-directory files a single-host run writes (:mod:`trainguard.agent.remote`).

A message is a few hundred bytes, and opening, appending to and closing a file for each one
cost the controller a third of its CPU with 1,024 agents (issue 26, section 5). So the files
stay open: :class:`AppendFiles` keeps up to ``cap`` descriptors, least recently used first out.
They are unbuffered (``os.write`` on an ``O_APPEND`` descriptor), so a reader of the file
(:class:`~trainguard.trace.collect.FileTail`, ``trace show``) sees each piece at once.

Descriptors are the controller's scarcest resource (:mod:`trainguard.fdlimit`): when an open
fails (``EMFILE``), the least recently used half is closed and the open tried once more; when
that fails too, the piece is dropped with one log line per file, never a traceback per message.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> files = AppendFiles(cap=2)
    >>> files.append(d / "out", b"hello ")
    True
    >>> files.append(d / "out", b"world")
    True
    >>> (d / "out").read_bytes()
    b'hello world'
    >>> files.close()
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger(__name__)

OPEN_CAP = 256
"""Append descriptors kept open at once by default."""

_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class AppendFiles:
    """Open append descriptors by path, at most ``cap``, least recently used closed first."""

    def __init__(self, cap: int = OPEN_CAP) -> None:
        if cap < 1:
            raise ValueError("mirror.cap must be >= 1")
        self.cap = cap
        self._fds: OrderedDict[Path, int] = OrderedDict()
        self._failed: set[Path] = set()
        self._last_error: OSError | None = None
        self.dropped = 0
        """Pieces not written because their file could not be opened or written."""

    def __len__(self) -> int:
        return len(self._fds)

    def append(self, path: Path, data: bytes) -> bool:
        """``data`` at the end of ``path``; False (logged once per file) when it was dropped."""
        fd = self._fd(path)
        if fd is None:
            return self._drop(path, "cannot open")
        try:
            view = memoryview(data)
            while view:  # a regular file takes it all at once; a full disk may not
                view = view[os.write(fd, view):]
        except OSError as exc:
            self._forget(path)
            return self._drop(path, str(exc))
        return True

    def close(self) -> None:
        """Close every descriptor (the attempt is over)."""
        while self._fds:
            _, fd = self._fds.popitem(last=False)
            _close(fd)

    def _fd(self, path: Path) -> int | None:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        while len(self._fds) >= self.cap:
            self._evict(1)
        for retry in (False, True):
            try:
                fd = os.open(path, _FLAGS, 0o644)
            except OSError as exc:
                if retry or not self._fds:
                    self._last_error = exc
                    return None
                self._evict(max(1, len(self._fds) // 2))  # out of descriptors: give some back
                continue
            self._fds[path] = fd
            self._failed.discard(path)
            return fd
        return None

    def _evict(self, n: int) -> None:
        for _ in range(min(n, len(self._fds))):
            _, fd = self._fds.popitem(last=False)
            _close(fd)

    def _forget(self, path: Path) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            _close(fd)

    def _drop(self, path: Path, why: str) -> bool:
        self.dropped += 1
        if path not in self._failed:
            self._failed.add(path)
            err = self._last_error
            log.warning("agent data for %s dropped (%s%s); further drops for it are counted, "
                        "not logged", path, why, f": {err}" if why == "cannot open" and err
                        else "")
        return False


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):  # nothing to do about a failed close
        os.close(fd)


__all__ = ["OPEN_CAP", "AppendFiles"]
