"""One supervisor per run directory: an exclusive ``flock`` held for the supervisor's lifetime.

A second ``trainguard run`` on the same ``--run-dir`` (``--overwrite`` or not) would otherwise
interleave its attempts, state and summary with the first's, or delete them under it. The lock
is on ``RUN_DIR/.trainguard.lock``, which holds the owner's pid for the error message. The kernel
drops a ``flock`` when its holder dies, SIGKILL included, so a crashed supervisor never leaves
a stale lock. The file itself is left in place: unlinking a lock file lets a third process lock
a new file while a second still holds the old one.

    >>> with RunDirLock(Path("runs/gpt")):     # ConfigError naming the pid if already held
    ...     Supervisor(spec, backend).run()
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

from trainguard.errors import ConfigError, LaunchError

LOCK_NAME = ".trainguard.lock"


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
            # close-on-exec (Python's default): no rank or reaper keeps the lock alive
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LaunchError(f"run dir {self.run_dir} is not writable: "
                              f"{exc.strerror or exc}") from exc
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


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


__all__ = ["LOCK_NAME", "RunDirLock"]
