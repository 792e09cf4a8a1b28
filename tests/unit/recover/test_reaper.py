"""The reaper's tree tracking (pure, on fake process tables and a fake /proc) and its kill and
end-of-file behaviour on real short-lived processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainguard.recover.local import LocalBackend
from trainguard.recover.reaper import (
    ProcInfo,
    ReaperLink,
    Tree,
    kill_tree,
    members,
    parse_stat,
    snapshot,
)


def P(pid: int, ppid: int, sid: int, start: int = 100, pgid: int | None = None,
      state: str = "S") -> ProcInfo:
    return ProcInfo(pid, ppid, sid if pgid is None else pgid, sid, start, state)


def table(*procs: ProcInfo) -> dict[int, ProcInfo]:
    return {p.pid: p for p in procs}


def stat_line(pid: int, comm: str, state: str, ppid: int, pgid: int, sid: int, start: int) -> str:
    rest = " ".join(["0"] * 15)  # tty .. nice, up to the start time (field 22)
    return f"{pid} ({comm}) {state} {ppid} {pgid} {sid} {rest} {start} 0 0\n"


def test_parse_stat_reads_a_command_name_with_spaces_and_parentheses() -> None:
    info = parse_stat(stat_line(42, "a) (b c", "S", 7, 8, 9, 12345).encode())
    assert info == ProcInfo(pid=42, ppid=7, pgid=8, sid=9, start=12345, state="S")
    assert parse_stat(b"garbage") is None


def test_snapshot_reads_a_fake_proc_and_skips_zombies(tmp_path: Path) -> None:
    for pid, state in ((10, "S"), (11, "Z"), (12, "R")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat_line(pid, "x", state, 1, pid, pid, 5))
    (tmp_path / "self").mkdir()
    (tmp_path / "13").mkdir()  # exited between listdir and read: no stat
    assert sorted(snapshot(tmp_path)) == [10, 12]


def test_members_are_the_ranks_sessions_groups_and_descendants() -> None:
    procs = table(
        P(100, 1, 100, start=5),              # rank (session leader)
        P(101, 100, 100, start=6),            # its worker, same session
        P(102, 100, 102, start=7),            # a child that called setsid
        P(103, 102, 102, start=8),            # ... and its child
        P(104, 1, 100, start=9, pgid=104),    # orphan in the rank's session, other group
        P(200, 1, 200, start=3),              # unrelated
        P(201, 200, 200, start=4))            # unrelated child
    found = members(procs, {100: 5}, ())
    assert {pid for pid, _ in found} == {100, 101, 102, 103, 104}


def test_a_reused_pid_is_not_the_job() -> None:
    # The rank 100 (started at 5) is gone and its pid now belongs to a stranger's session.
    procs = table(P(100, 1, 100, start=50), P(101, 100, 100, start=51))
    assert members(procs, {100: 5}, ()) == frozenset()
    # A recorded member whose pid was reused is not killed either.
    assert members(table(P(300, 1, 300, start=99)), {}, [(300, 7)]) == frozenset()


def test_a_daemon_recorded_before_its_parent_died_stays_in_the_job() -> None:
    tree = Tree()
    tree.add(100, 5)
    tree.update(table(P(100, 1, 100, start=5), P(102, 100, 102, start=7),
                      P(103, 102, 103, start=8)))
    tree.forget(100)  # the rank was reaped ...
    # ... the setsid'd grandchild, now a child of init, is still known, and its new child too
    later = table(P(103, 1, 103, start=8), P(104, 103, 103, start=20), P(200, 1, 200, start=2))
    assert {pid for pid, _ in tree.update(later)} == {103, 104}
    assert not tree.empty
    assert tree.update(table(P(200, 1, 200, start=2))) == frozenset()
    assert tree.empty


def _start(pid: int) -> int:
    info = parse_stat(Path(f"/proc/{pid}/stat").read_bytes())
    assert info is not None
    return info.start


def _gone(pid: int, start: int) -> bool:
    try:
        info = parse_stat(Path(f"/proc/{pid}/stat").read_bytes())
    except OSError:
        return True
    return info is None or info.start != start or info.state in ("Z", "X")


def test_kill_tree_kills_a_real_tree_even_a_process_that_ignores_sigterm() -> None:
    script = ("trap '' TERM; (setsid sleep 60 &); sleep 60 & "
              "while :; do sleep 0.05; done")
    rank = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        tree = Tree()
        tree.add(rank.pid, _start(rank.pid))
        deadline = time.monotonic() + 10
        while len(tree.update(snapshot())) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)  # the shell is starting its children
        seen = set(tree.known)
        assert len(seen) >= 3
        left = kill_tree(tree, grace_s=0.3)
        assert left == frozenset()
        assert rank.wait(timeout=5) == -signal.SIGKILL  # TERM was ignored
        assert all(_gone(pid, start) for pid, start in seen)
    finally:
        if rank.poll() is None:
            os.killpg(rank.pid, signal.SIGKILL)
            rank.wait()


def test_end_of_file_on_the_link_makes_the_reaper_kill_the_tree_and_exit() -> None:
    # Not `bash -c "sleep 60 & wait"`: when the child's TERM lands first, bash's `wait` returns
    # and bash exits 0 before its own TERM arrives. A rank that sleeps itself has no such race.
    rank = subprocess.Popen([sys.executable, "-c", "import subprocess, time; "
                             "subprocess.Popen(['sleep', '60']); time.sleep(60)"],
                            start_new_session=True)
    link = ReaperLink.start()
    try:
        link.add(rank.pid)
        deadline = time.monotonic() + 10
        while len(members(snapshot(), {rank.pid: _start(rank.pid)}, ())) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        link.close(wait_s=10)
        assert link.proc.returncode == 0
        assert rank.wait(timeout=5) == -signal.SIGTERM
    finally:
        link.close()
        if rank.poll() is None:
            os.killpg(rank.pid, signal.SIGKILL)
            rank.wait()


def test_ranks_do_not_inherit_the_pipe_to_the_reaper(tmp_path: Path) -> None:
    from trainguard.recover.backend import LaunchPlan, RankLaunch

    backend = LocalBackend()
    plan = LaunchPlan(0, (sys.executable, "-c", "import time; time.sleep(30)"), ("a",),
                      (RankLaunch(0, 0, "a", 0, {}, tmp_path / "r0.log"),), tmp_path)
    attempt = backend.launch(plan)
    try:
        link = backend._reaper.get()
        assert link is not None and link.alive
        pipe = os.readlink(f"/proc/self/fd/{link._fd}")
        rank_pid = attempt.pids()[0]
        # Between fork and exec the child still holds every descriptor (close-on-exec acts
        # at exec): look once it runs the rank's command.
        deadline = time.monotonic() + 10
        while b"time.sleep" not in Path(f"/proc/{rank_pid}/cmdline").read_bytes() \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        rank_fds = {os.readlink(f"/proc/{rank_pid}/fd/{fd}")
                    for fd in os.listdir(f"/proc/{rank_pid}/fd")}
        assert pipe.startswith("pipe:") and pipe not in rank_fds
    finally:
        attempt.stop(0.0)
        backend.close()
    assert link.proc.returncode == 0


@pytest.mark.parametrize("line", [b"", b"1 (x)", b"x (y) S 1 2 3"])
def test_parse_stat_rejects_truncated_lines(line: bytes) -> None:
    assert parse_stat(line) is None
