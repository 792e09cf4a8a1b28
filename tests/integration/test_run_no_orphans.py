"""Nothing of a job survives a ``kill -9`` of its supervisor (`trainguard run`, local backend).

The job is shell-wrapped (``bash -c "python job.py; ..."``, so bash stays the rank's process) and
each rank leaves a tree behind: ``sleep``, a multiprocessing worker, a daemonized grandchild in a
session of its own whose parent is gone. The test records every process of that tree (the
supervisor's descendants by ppid, plus the pids the job reports), SIGKILLs the supervisor, and
expects all of them gone within 10 s.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "scripts" / "spawning_job.py"
TG = [sys.executable, "-m", "trainguard.cli.main"]

Proc = tuple[int, int]  # (pid, start time): a pid that is reused is not the same process


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, start time, state) of ``pid`` from /proc, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 1:].split()
    return int(fields[1]), int(fields[19]), fields[0].decode()


def alive(proc: Proc) -> bool:
    st = _stat(proc[0])
    return st is not None and st[1] == proc[1] and st[2] not in ("Z", "X")


def descendants(root: int) -> set[Proc]:
    """``root`` and every process below it, by ppid links."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (st := _stat(int(name))) is not None:
            table[int(name)] = st
    found = {(root, table[root][1])} if root in table else set()
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, start, _) in table.items():
            if ppid == parent and (pid, start) not in found:
                found.add((pid, start))
                frontier.append(pid)
    return found


def kill_all(procs: set[Proc]) -> None:
    for proc in procs:
        if alive(proc):
            os.kill(proc[0], signal.SIGKILL)


def test_kill_9_of_the_supervisor_leaves_nothing_of_the_job(tmp_path: Path) -> None:
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    wrapped = f"{shlex.quote(sys.executable)} {shlex.quote(str(JOB))}; echo rank done"
    cmd = [*TG, "run", "--run-dir", str(tmp_path / "run"), "--no-db", "-q", "--nodes", "a,b",
           "--", "bash", "-c", wrapped]
    sup = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           cwd=tmp_path, env={**os.environ, "SPAWN_PIDS_DIR": str(pids_dir)})
    tree: set[Proc] = set()
    try:
        deadline = time.monotonic() + 60
        while len(list(pids_dir.glob("*.json"))) < 2:
            assert sup.poll() is None, "trainguard run exited early"
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.1)
        time.sleep(1.5)  # a job runs for a while before its supervisor is killed
        tree = descendants(sup.pid)
        for report in pids_dir.glob("*.json"):
            for pid in json.loads(report.read_text()).values():
                st = _stat(pid)
                assert st is not None, f"process {pid} of the job died on its own"
                tree.add((pid, st[1]))
        # 2 x (bash, python, sleep, worker, daemon) + the supervisor itself, at least
        assert len(tree) >= 11, tree
        sup.kill()
        sup.wait()
        deadline = time.monotonic() + 10
        while (left := {p for p in tree if alive(p)}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"survived the supervisor: {sorted(left)}"
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        kill_all(tree)
