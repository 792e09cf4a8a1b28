"""The agent's work directory cannot be turned against its host: a tree another user planted
(with a symlink where a rank's log goes) is neither used nor written through, an untrusted base
is refused with one line, and directories of earlier attempts are cleaned up."""

from __future__ import annotations

import os
import pwd
import stat
import sys
from pathlib import Path

import pytest

from trainguard.agent.__main__ import main as agent_main
from trainguard.agent.host import HostWork
from trainguard.agent.workdir import (
    UnsafeWorkDir,
    check_base,
    create_private,
    make_work_dir,
    unsafe_level,
)
from trainguard.errors import LaunchError
from trainguard.evidence.rules import load_rules

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown to another user")


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


def _victim(tmp_path: Path) -> Path:
    """A root-only file of someone else's that an attacker wants written."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    os.chmod(victim, 0o600)
    return victim


@root_only
def test_a_planted_symlink_for_a_rank_log_is_refused_not_followed(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(victim, work / "rank0.log")
    os.lchown(work / "rank0.log", _nobody(), _nobody())
    host = HostWork("n1", work, load_rules)
    try:
        with pytest.raises(LaunchError, match="refusing to write"):
            host.launch({"t": "launch", "attempt": 0,
                         "command": [sys.executable, "-c", "print('written by a rank')"],
                         "workdir": str(tmp_path),
                         "ranks": [{"rank": 0, "local_rank": 0, "node_rank": 0, "env": {}}]})
    finally:
        host.stop(1.0)
        host.close()
    assert victim.read_bytes() == b"precious\n"


def test_files_are_created_new_and_never_through_a_symlink(tmp_path: Path) -> None:
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    with pytest.raises(OSError):
        create_private(tmp_path / "link")
    assert not (tmp_path / "elsewhere").exists()
    (tmp_path / "there").write_text("x")
    with pytest.raises(FileExistsError):
        create_private(tmp_path / "there")
    os.close(create_private(tmp_path / "new"))
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o600


@root_only
def test_the_predictable_tree_someone_planted_is_not_used(tmp_path: Path) -> None:
    planted = tmp_path / "trainguard-agent" / "sess" / "0" / "n1"
    planted.mkdir(parents=True)
    for level in (planted, *list(planted.parents)[:3]):
        os.chown(level, _nobody(), _nobody())
    work = make_work_dir(tmp_path, "sess", 0, "n1")
    assert work.parent == tmp_path.resolve() and work.name.startswith(
        "trainguard-agent-sess-0-n1-")
    st = os.lstat(work)
    assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    assert make_work_dir(tmp_path, "sess", 0, "n1") != work  # unpredictable, never reused


@root_only
@pytest.mark.parametrize(("owner", "mode", "why"), [
    ("nobody", 0o755, "owned by uid"),
    ("root", 0o777, "writable by other users"),
    ("root", 0o775, "writable by other users"),
])
def test_an_untrusted_level_is_refused(tmp_path: Path, owner: str, mode: int, why: str) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, pwd.getpwnam(owner).pw_uid, 0)
    os.chmod(shared, mode)
    with pytest.raises(UnsafeWorkDir, match=why):
        check_base(shared / "deeper")


def test_a_sticky_world_writable_level_is_fine() -> None:
    st = os.stat_result((stat.S_IFDIR | 0o1777, 0, 0, 0, 0, 0, 0, 0, 0, 0))
    assert unsafe_level(st, 1000) is None
    assert "not a directory" in str(unsafe_level(
        os.stat_result((stat.S_IFLNK | 0o777, 0, 0, 0, 0, 0, 0, 0, 0, 0)), 0))


@root_only
def test_the_agent_refuses_an_untrusted_work_dir_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chown(shared, _nobody(), _nobody())
    monkeypatch.setenv("TRAINGUARD_AGENT_SECRET", "x" * 32)
    status = agent_main(["--controller-addr", "127.0.0.1:9", "--session", "s", "--node", "n1",
                         "--work-dir", str(shared)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "owned by uid" in err[0]


def test_an_earlier_attempts_directory_of_this_node_is_removed(tmp_path: Path) -> None:
    old = make_work_dir(tmp_path, "sess", 0, "n1")
    (old / "rank0.log").write_text("old")
    other = make_work_dir(tmp_path, "sess", 0, "n2")
    new = make_work_dir(tmp_path, "sess", 1, "n1")
    assert not old.exists() and other.exists() and new.exists()
