"""A real standby (without torch, to stay fast) running tiny scripts: exit codes as a cold
interpreter's, argv/env/cwd applied, signals and wait statuses, the adopter's death, and the
standby's own exits (stale lease, warm directory removed)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.warm.pool import (
    WarmCommand,
    WarmProc,
    claim,
    count_pending,
    parse_command,
    ready_standbys,
    start_standby,
)
from trainguard.warm.protocol import Assignment

SCRIPTS = {
    "ok": "import os, sys\nprint('argv', sys.argv[1:], 'cwd', os.getcwd(), 'X', "
          "os.environ.get('X'), 'P0', sys.path[0], 'name', __name__)\n",
    "three": "import sys\nsys.exit(3)\n",
    "raises": "def boom():\n    raise ValueError('kaboom')\nboom()\n",
    "exit_msg": "import sys\nsys.exit('going away')\n",
    "big_code": "import sys\nsys.exit(257)\n",
    "sleeps": "import time\nprint('up', flush=True)\ntime.sleep(60)\n",
}


class Env:
    def __init__(self, root: Path) -> None:
        self.root = root
        # Deeper than a Unix socket's 107-byte path limit, as a run's warm directory may be.
        self.warm = root / ("d" * 60) / ("e" * 60) / "warm"
        self.warm.mkdir(mode=0o700, parents=True)
        self.lease = root / "lease"
        self.lease.touch()
        self.scripts = root / "scripts"
        self.scripts.mkdir()
        self.pids: list[int] = []
        self.env = dict(os.environ)

    def command(self, name: str, *args: str) -> WarmCommand:
        path = self.scripts / f"{name}.py"
        path.write_text(SCRIPTS[name])
        cmd = parse_command((sys.executable, str(path), *args), sys.executable, self.root)
        assert cmd is not None
        return cmd

    def standby(self, cmd: WarmCommand, **kw: float) -> int:
        pid = start_standby(cmd, self.env, self.warm, self.lease, torch=False, check_s=0.1,
                            **kw)
        self.pids.append(pid)
        deadline = time.monotonic() + 30
        while not any(p.name.split(".")[1] == str(pid)
                      for p in ready_standbys(self.warm, cmd.key(self.env))):
            assert time.monotonic() < deadline, (self.warm / f"{cmd.key(self.env)}.log")
            time.sleep(0.02)
        return pid

    def run(self, cmd: WarmCommand, **env: str) -> tuple[WarmProc, Path]:
        out = self.root / f"out{len(self.pids)}.log"
        proc = claim(cmd, self.env, self.warm,
                     Assignment(cmd.argv, {**self.env, **env}, str(self.root), str(out)))
        assert proc is not None
        self.pids.append(proc.pid)
        return proc, out


@pytest.fixture
def w(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    for pid in e.pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_rank_gets_argv_env_cwd_and_script_dir(w: Env) -> None:
    cmd = w.command("ok", "--lr", "3")
    standby = w.standby(cmd)
    proc, out = w.run(cmd, X="hello")
    assert proc.pid != standby
    assert proc.wait(20) == 0
    text = out.read_text()
    assert f"argv ['--lr', '3'] cwd {w.root} X hello P0 {w.scripts} name __main__" in text
    assert wait_gone(standby)  # one assignment, then the standby exits
    assert list(w.warm.glob("*.sock")) == [] and list(w.warm.glob("*.ready")) == []


@pytest.mark.parametrize("name", ["ok", "three", "raises", "exit_msg", "big_code"])
def test_exit_code_and_output_as_cold(w: Env, name: str) -> None:
    cmd = w.command(name)
    cold = subprocess.run([sys.executable, str(cmd.script)], capture_output=True, text=True,
                          cwd=w.root, timeout=30, check=False)
    w.standby(cmd)
    proc, out = w.run(cmd)
    assert proc.wait(20) == cold.returncode
    warm_text = out.read_text()
    if name == "raises":
        assert warm_text.startswith("Traceback (most recent call last):")
        assert "ValueError: kaboom" in warm_text and "ValueError: kaboom" in cold.stderr
    if name == "exit_msg":
        assert warm_text.strip() == cold.stderr.strip() == "going away"


def test_sigkill_of_rank_is_reported_as_minus_9(w: Env) -> None:
    cmd = w.command("sleeps")
    w.standby(cmd)
    proc, _ = w.run(cmd)
    assert proc.poll() is None
    assert os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
    os.killpg(proc.pid, signal.SIGKILL)  # the rank leads its own group, as a cold rank
    assert proc.wait(20) == -signal.SIGKILL


def test_sigterm_reported_as_minus_15(w: Env) -> None:
    cmd = w.command("sleeps")
    w.standby(cmd)
    proc, out = w.run(cmd)
    deadline = time.monotonic() + 20
    # The rank opens its output once adopted, which may be after claim() returns.
    while not out.exists() or "up" not in out.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(20) == -signal.SIGTERM


def test_adopter_gone_kills_the_rank(w: Env) -> None:
    cmd = w.command("sleeps")
    w.standby(cmd)
    # The adopter is a separate process, SIGKILLed: its socket closes with it.
    adopter = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom pathlib import Path\n"
         "from trainguard.warm.pool import parse_command, claim\n"
         "from trainguard.warm.protocol import Assignment\nimport os\n"
         f"cmd = parse_command(({sys.executable!r}, {cmd.script!r}), {sys.executable!r}, "
         f"Path({str(w.root)!r}))\n"
         f"p = claim(cmd, dict(os.environ), Path({str(w.warm)!r}), Assignment(cmd.argv, "
         f"dict(os.environ), {str(w.root)!r}, {str(w.root / 'a.log')!r}))\n"
         "print(p.pid, flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, env=w.env)
    try:
        assert adopter.stdout is not None
        rank = int(adopter.stdout.readline())
        w.pids.append(rank)
        assert alive(rank)
        adopter.kill()
        adopter.wait()
        assert wait_gone(rank)
    finally:
        adopter.kill()
        adopter.wait()


def test_stale_lease_ends_an_idle_standby(w: Env) -> None:
    cmd = w.command("ok")
    pid = w.standby(cmd, lease_timeout_s=1.0)
    assert count_pending(w.warm, cmd.key(w.env)) == 1
    old = time.time() - 60
    os.utime(w.lease, (old, old))
    assert wait_gone(pid)
    assert ready_standbys(w.warm, cmd.key(w.env)) == []
    assert "lease stale" in (w.warm / f"{cmd.key(w.env)}.log").read_text()


def test_fresh_lease_keeps_it_and_removed_dir_ends_it(w: Env) -> None:
    cmd = w.command("ok")
    pid = w.standby(cmd, lease_timeout_s=1.0)
    for _ in range(15):  # 1.5 s with the lease kept fresh: still there
        w.lease.touch()
        time.sleep(0.1)
    assert alive(pid)
    for path in w.warm.iterdir():
        path.unlink()
    w.warm.rmdir()
    assert wait_gone(pid)


def test_one_standby_serves_one_adopter(w: Env) -> None:
    cmd = w.command("ok")
    w.standby(cmd)
    proc, _ = w.run(cmd)
    job = Assignment(cmd.argv, w.env, str(w.root), str(w.root / "second.log"))
    assert claim(cmd, w.env, w.warm, job) is None  # taken: the caller starts cold
    assert proc.wait(20) == 0


def test_other_startup_env_finds_no_standby(w: Env) -> None:
    cmd = w.command("ok")
    w.standby(cmd)
    other = {**w.env, "OMP_NUM_THREADS": "7"}
    job = Assignment(cmd.argv, other, str(w.root), str(w.root / "o.log"))
    assert claim(cmd, other, w.warm, job) is None
    assert len(ready_standbys(w.warm, cmd.key(w.env))) == 1


def test_standby_killed_takes_the_rank_with_it(w: Env) -> None:
    cmd = w.command("sleeps")
    standby = w.standby(cmd)
    proc, _ = w.run(cmd)
    os.kill(standby, signal.SIGKILL)
    assert proc.wait(20) == -signal.SIGKILL
    assert wait_gone(proc.pid)


def test_local_attempt_stops_a_warm_rank(w: Env) -> None:
    from trainguard.recover.local import LocalAttempt

    cmd = w.command("sleeps")
    w.standby(cmd)
    proc, out = w.run(cmd)
    attempt = LocalAttempt({0: proc})
    assert attempt.has_warm and attempt.warm_ranks() == {0}
    assert attempt.pids() == {0: proc.pid} and attempt.running() == {0}
    deadline = time.monotonic() + 20
    # The rank opens its output once adopted, which may be after claim() returns.
    while not out.exists() or "up" not in out.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    exits = attempt.stop(5.0)
    assert [(e.rank, e.returncode) for e in exits] == [(0, -signal.SIGTERM)]
    assert attempt.running() == frozenset()


def test_a_rank_waits_for_a_standby_still_importing(w: Env) -> None:
    """A standby started for this attempt that is still importing is further along than a
    cold interpreter: the launcher waits for it (and, with no wait allowed, starts cold)."""
    from trainguard.warm.launcher import WARM_DIR_ENV, WarmLauncher
    from trainguard.warm.loaded import names_path, write_names

    lib = w.root / "slowlib"
    lib.mkdir()
    (lib / "slowmod.py").write_text("import time\ntime.sleep(1.5)\n")
    w.env["PYTHONPATH"] = str(lib)
    cmd = w.command("ok")
    write_names(names_path(w.warm, cmd.key(w.env)), ["slowmod"])
    env = {**w.env, WARM_DIR_ENV: str(w.warm)}
    for wait_s in (0.0, 30.0):
        pid = start_standby(cmd, w.env, w.warm, w.lease, torch=False, check_s=0.1)
        w.pids.append(pid)
        launcher = WarmLauncher(w.env, pending_wait_s=wait_s)
        try:
            proc = launcher.claim(cmd, env, w.root / f"out{wait_s}.log", w.root)
        finally:
            launcher.close()
        if wait_s == 0.0:
            assert proc is None  # not ready yet: cold
            os.kill(pid, signal.SIGKILL)  # the next round has only a standby still importing
            assert wait_gone(pid)
            continue
        assert proc is not None and proc.pid not in w.pids
        w.pids.append(proc.pid)
        assert proc.wait(20) == 0
    assert "argv" in (w.root / "out30.0.log").read_text()
