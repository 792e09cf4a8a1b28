"""The run dir's lock file is private (0600), never followed through a symlink, and refused when
another user owns it: otherwise any local user could hold the lock and block ``run --overwrite``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trainguard.errors import LaunchError
from trainguard.recover.runlock import LOCK_NAME, RunDirLock


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_new_lock_file_is_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with RunDirLock(tmp_path / "run"):
            assert _mode(tmp_path / "run" / LOCK_NAME) == 0o600
    finally:
        os.umask(old)


def test_existing_world_readable_lock_file_is_made_private(tmp_path: Path) -> None:
    lock = tmp_path / LOCK_NAME
    lock.write_text("")
    lock.chmod(0o644)  # as older trainguard versions left it
    with RunDirLock(tmp_path):
        assert _mode(lock) == 0o600


def test_lock_file_symlink_is_refused_and_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("precious\n")
    target.chmod(0o644)
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).symlink_to(target)
    with pytest.raises(LaunchError, match=r"symlink|not a regular file"):
        RunDirLock(run).acquire()
    assert target.read_text() == "precious\n"
    assert _mode(target) == 0o644


def test_lock_file_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / LOCK_NAME)
    with pytest.raises(LaunchError, match="not a regular file"):
        RunDirLock(tmp_path).acquire()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create another user's file")
def test_lock_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    lock = tmp_path / LOCK_NAME
    lock.write_text("")
    os.chown(lock, 65534, 65534)  # nobody
    with pytest.raises(LaunchError, match="owned by uid 65534"):
        RunDirLock(tmp_path).acquire()
