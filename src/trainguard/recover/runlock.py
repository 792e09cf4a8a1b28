"""One supervisor per run directory: an exclusive ``flock`` held for the supervisor's lifetime.

A second ``trainguard run`` on the same ``--run-dir`` (``--overwrite`` or not) would otherwise
interleave its attempts, state and summary with the first's, or delete them under it. The lock
is on ``RUN_DIR/.trainguard.lock``, which holds the owner's pid for the error message; it is
0600, opened without following a symlink, and refused when another user owns it. The kernel
drops a ``flock`` when its holder dies, SIGKILL included, so a crashed supervisor never leaves
a stale lock. The file itself is left in place: unlinking a lock file lets a third process lock
a new file while a second still holds the old one.

    >>> with RunDirLock(Path("runs/gpt")):  # ConfigError if already held  # doctest: +SKIP
    ...     Supervisor(spec, backend).run()
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from pathlib import Path
from types import TracebackType

from trainguard.errors import ConfigError, LaunchError

LOCK_NAME = ".trainguard.lock"
LOCK_MODE = 0o600
"""Owner-only: ``flock`` needs only a read descriptor, so a lock file other users can open is
one they can hold, blocking every later ``run`` (``--overwrite`` included) on the run dir."""


class RunDirLock:
    """Exclusive ownership of a run directory (created if missing)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock without waiting: :class:`ConfigError` naming the holder's pid when
        another supervisor has it, :class:`LaunchError` when the run dir is not writable."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            # close-on-exec (Python's default): no rank or reaper keeps the lock alive.
            # O_NOFOLLOW: a planted symlink must not make us create, chmod or lock its target.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                         LOCK_MODE)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise LaunchError(f"{self.path} is a symlink; remove it (a lock file is never "
                                  "a link)") from exc
            raise LaunchError(f"run dir {self.run_dir} is not writable: "
                              f"{exc.strerror or exc}") from exc
        try:
            _make_private(fd, self.path)
        except LaunchError:
            os.close(fd)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder is not None else "another process"
            raise ConfigError(f"run dir {self.run_dir} is in use by a running trainguard "
                              f"supervisor ({who}); wait for it to end or choose another "
                              "--run-dir") from None
        except OSError as exc:
            os.close(fd)
            raise LaunchError(f"cannot lock {self.path}: {exc.strerror or exc}") from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the only descriptor drops the flock
        self._fd = None

    def __enter__(self) -> RunDirLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _make_private(fd: int, path: Path) -> None:
    """Refuse a lock file that is not ours alone, then make it 0600 (older versions left
    0644; ``O_CREAT``'s mode only applies to a new file and is cut by the umask anyway)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise LaunchError(f"{path} is not a regular file; remove it")
    if st.st_uid != os.geteuid():
        raise LaunchError(f"{path} is owned by uid {st.st_uid}, not by this user "
                          f"(uid {os.geteuid()}); remove it")
    if st.st_nlink != 1:  # a hard link to another file: never chmod someone else's file
        raise LaunchError(f"{path} has {st.st_nlink} hard links; remove it")
    if stat.S_IMODE(st.st_mode) != LOCK_MODE:
        try:
            os.fchmod(fd, LOCK_MODE)
        except OSError as exc:
            raise LaunchError(f"cannot make {path} private: {exc.strerror or exc}") from exc


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


__all__ = ["LOCK_MODE", "LOCK_NAME", "RunDirLock"]
