"""File descriptors for a long-running process: the soft limit raised to the hard one at start,
and a few kept in reserve so the run's own records can still be written when something else
(a connection flood, a leak) has used up the rest.

    >>> soft, hard = raise_nofile_limit()
    >>> soft == hard or hard == -1 or soft >= 1024
    True
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_RESERVE = 4
"""Descriptors held back for the run's records (a temporary file, a directory, the store)."""

_lock = threading.Lock()
_reserve: list[int] = []


def raise_nofile_limit() -> tuple[int, int]:
    """Raise ``RLIMIT_NOFILE``'s soft limit to its hard limit (capped at 1M: some libraries
    size tables by it); returns (soft, hard) afterwards. Never fails."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return (-1, -1)
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = hard if hard != resource.RLIM_INFINITY else 1 << 20
        want = min(want, 1 << 20)
        if soft == resource.RLIM_INFINITY or soft >= want:
            return (soft, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        return (want, hard)
    except (OSError, ValueError):
        return (-1, -1)


def soft_nofile_limit() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError):
        return 1024
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def reserve_fds(count: int = _RESERVE) -> None:
    """Hold ``count`` descriptors (of ``/dev/null``) for :func:`with_reserve`; idempotent."""
    with _lock:
        while len(_reserve) < count:
            try:
                _reserve.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            except OSError:
                return


def with_reserve(write: Callable[[], T]) -> T:
    """``write()``; when it fails for want of descriptors, again with the reserve released
    (the reserve is taken back afterwards)."""
    try:
        return write()
    except Exception as exc:
        if not _out_of_fds(exc):
            raise
    with _lock:
        while _reserve:
            os.close(_reserve.pop())
        try:
            return write()
        finally:
            while len(_reserve) < _RESERVE:
                try:
                    _reserve.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
                except OSError:
                    break


def _out_of_fds(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return True
        seen = seen.__cause__
    return False


__all__ = ["raise_nofile_limit", "reserve_fds", "soft_nofile_limit", "with_reserve"]
