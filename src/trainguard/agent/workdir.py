"""The agent's private work directory on its host: its ranks' output and SDK event files and its
kernel-log copies.

A predictable path under a shared ``/tmp`` invites another local user to create it first, with a
symlink where a rank's log goes, and an agent running as root then appends to whatever file
that user chose. So:

- the base (``--work-dir``, default ``$TMPDIR``) is checked level by level from ``/``: each
  directory must be owned by root or by the agent's user, and one that others may write must be
  sticky (as ``/tmp`` is); otherwise the agent refuses to start, naming the directory;
- the agent's own directory is new and unpredictable (:func:`tempfile.mkdtemp`: created
  ``0700``, never one that exists already), ``trainguard-agent-SESSION-ATTEMPT-NODE-XXXXXXXX``;
- every file the agent creates in it is opened ``O_CREAT | O_EXCL | O_NOFOLLOW``
  (:func:`create_private`);
- it is removed when the agent exits (:func:`remove_work_dir`), and an agent of a later attempt
  removes what an earlier one of the same run and node left (one killed before it could).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from trainguard.errors import ConfigError

log = logging.getLogger(__name__)

PREFIX = "trainguard-agent-"


class UnsafeWorkDir(ConfigError):
    """The work directory's base cannot be trusted (or created): the agent does not start."""


def unsafe_level(st: os.stat_result, uid: int) -> str | None:
    """Why a directory with status ``st`` cannot hold a private directory of user ``uid``, or
    None when it can (pure)."""
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in (0, uid):
        return f"is owned by uid {st.st_uid}, neither root nor this agent's user (uid {uid})"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return (f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}) and not "
                "sticky")
    return None


def check_base(base: Path, uid: int | None = None) -> Path:
    """``base`` (created ``0700`` when missing) with every level checked
    (:func:`unsafe_level`); its real path. :class:`UnsafeWorkDir` when it cannot be trusted."""
    uid = os.geteuid() if uid is None else uid
    path = Path(os.path.abspath(base))
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        real = Path(os.path.realpath(path))
        levels = [*reversed(real.parents), real]
        for level in levels:
            why = unsafe_level(os.lstat(level), uid)
            if why is not None:
                raise UnsafeWorkDir(f"refusing work directory base {path}: {level} {why}")
    except OSError as exc:
        raise UnsafeWorkDir(f"cannot use work directory base {path}: "
                            f"{exc.strerror or exc}") from exc
    return real


def _part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", text)[:64] or "_"


def make_work_dir(base: Path, session: str, attempt: int, node: str) -> Path:
    """A fresh private directory (``0700``, unpredictable name) under the checked ``base``;
    what an earlier attempt's agent of this run and node left there is removed first."""
    real = check_base(base)
    stem = f"{PREFIX}{_part(session)}-"
    _sweep(real, stem, attempt, _part(node))
    try:
        return Path(tempfile.mkdtemp(prefix=f"{stem}{attempt}-{_part(node)}-", dir=real))
    except OSError as exc:
        raise UnsafeWorkDir(f"cannot create a work directory in {real}: "
                            f"{exc.strerror or exc}") from exc


def _sweep(base: Path, stem: str, attempt: int, node: str) -> None:
    """Remove this user's work directories of earlier attempts of the run on this node."""
    pattern = re.compile(re.escape(stem) + r"(\d+)-" + re.escape(node) + r"-[^-/]+")
    try:
        names = os.listdir(base)
    except OSError:
        return
    uid = os.geteuid()
    for name in names:
        found = pattern.fullmatch(name)
        if found is None or int(found.group(1)) >= attempt:
            continue
        path = base / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
            remove_work_dir(path)


def create_private(path: Path, mode: int = 0o600) -> int:
    """A new file at ``path`` opened for appending (its descriptor): never an existing file, and
    never through a symlink. :class:`OSError` (``EEXIST``, ``ELOOP``) otherwise."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                   | os.O_CLOEXEC, mode)


def create_empty(path: Path) -> None:
    """:func:`create_private`, closed again (a file someone else appends to later)."""
    os.close(create_private(path))


def remove_work_dir(path: Path) -> None:
    """Remove the agent's directory and everything in it (symlinks are removed, never
    followed); a failure is logged, not raised (the agent is exiting)."""
    def report(_func: object, where: str, info: tuple[object, BaseException, object]) -> None:
        log.warning("cannot remove %s: %s", where, info[1])

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=report)


__all__ = ["PREFIX", "UnsafeWorkDir", "check_base", "create_empty", "create_private",
           "make_work_dir", "remove_work_dir", "unsafe_level"]
