"""Which files of one directory changed since the last look (Linux inotify, through ctypes).

An agent follows two files per rank. Looking at each of them on every poll costs a ``stat`` per
file (``open``, ``fstat`` and ``close`` before); with inotify one non-blocking ``read`` of the
watch says which files were written, and most polls read nothing at all.

    watch = DirWatch.open(work_dir)      # None where inotify is unavailable
    names = watch.changed()              # {"rank0.log"}; None: anything may have changed
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
from pathlib import Path

log = logging.getLogger(__name__)

_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_MASK = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_HEADER = struct.Struct("iIII")
"""``struct inotify_event``: wd, mask, cookie, len (then ``len`` bytes of name)."""
_READ = 64 << 10


def parse_events(data: bytes) -> tuple[set[str], bool]:
    """The file names in a buffer of ``inotify_event`` records, and whether the kernel's queue
    overflowed or the watch went away (then anything may have changed)."""
    names: set[str] = set()
    lost = False
    at = 0
    while at + _HEADER.size <= len(data):
        _, mask, _, size = _HEADER.unpack_from(data, at)
        raw = data[at + _HEADER.size: at + _HEADER.size + size]
        at += _HEADER.size + size
        if mask & (_IN_Q_OVERFLOW | _IN_IGNORED):
            lost = True
        name = raw.split(b"\0", 1)[0]
        if name:
            names.add(os.fsdecode(name))
    return names, lost


class DirWatch:
    """An inotify watch on one directory (see the module docstring)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def open(cls, directory: Path) -> DirWatch | None:
        """A watch on ``directory``, or None where inotify is unavailable (another OS, no
        libc symbol, the per-user watch limit reached): callers then look at every file."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        fd = int(init(_IN_NONBLOCK | _IN_CLOEXEC))
        if fd < 0:
            log.info("inotify unavailable (%s): polling every file",
                     os.strerror(ctypes.get_errno()))
            return None
        if int(add(fd, os.fsencode(directory), _MASK)) < 0:
            log.info("cannot watch %s (%s): polling every file", directory,
                     os.strerror(ctypes.get_errno()))
            os.close(fd)
            return None
        return cls(fd)

    def changed(self) -> set[str] | None:
        """Names of the files written, created, moved in or deleted since the last call; None
        when that is not known (queue overflow, a closed watch, a read error)."""
        if self._fd < 0:
            return None
        names: set[str] = set()
        while True:
            try:
                data = os.read(self._fd, _READ)
            except BlockingIOError:
                return names
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return None
            found, lost = parse_events(data)
            if lost:
                return None
            names |= found
            if len(data) < _READ - 4096:  # drained (a full buffer may have more behind it)
                return names

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


__all__ = ["DirWatch", "parse_events"]
