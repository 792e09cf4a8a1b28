"""Warm standbys with real torch: a rank starts in a standby that already imported torch much
faster than a cold interpreter, and LocalBackend starts a 2-rank gloo job through standbys it
pre-warmed after the previous attempt."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainguard.recover.launchplan import LaunchPlan, RankLaunch
from trainguard.recover.local import LocalAttempt, LocalBackend
from trainguard.warm.pool import claim, parse_command, ready_standbys, start_standby
from trainguard.warm.protocol import Assignment

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

_STAMPED = re.compile(r"first line at (\S+)\n")
STAMP = "import torch\nimport time\nprint('first line at', repr(time.time()), flush=True)\n"

GLOO = """import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("rank", dist.get_rank(), "sum", t.item(), "warm", os.environ.get("TRAINGUARD_WARM_START"),
      flush=True)
dist.destroy_process_group()
"""


def _standby_pids(warm: Path) -> set[int]:
    pids = set()
    for path in warm.glob("*.*.*") if warm.is_dir() else ():
        part = path.name.split(".")[1]
        if part.isdigit():
            pids.add(int(part))
    return pids


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "hosts"
    root.mkdir(mode=0o700)
    seen: set[int] = set()
    yield root
    for warm in root.glob("*/warm"):
        seen |= _standby_pids(warm)
    for pid in seen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _wait_ready(warm: Path, key: str, n: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while len(ready_standbys(warm, key)) < n:
        assert time.monotonic() < deadline, sorted(p.name for p in warm.iterdir())
        time.sleep(0.05)


def _first_line_at(path: Path, timeout_s: float = 120) -> float:
    """The time the script stamped, once its whole line is in the file: print() may write the
    words and the number separately (unbuffered stdout), so the words alone are not enough."""
    deadline = time.monotonic() + timeout_s
    while not (found := _STAMPED.search(path.read_text() if path.exists() else "")):
        assert time.monotonic() < deadline, path.read_text() if path.exists() else ""
        time.sleep(0.005)
    return float(found.group(1))


def test_warm_start_is_much_faster_than_cold(hosts: Path) -> None:
    script = hosts / "stamp.py"
    script.write_text(STAMP)
    host = hosts / "h0"
    warm, lease = host / "warm", host / "lease"
    warm.mkdir(parents=True, mode=0o700)
    lease.touch()
    env = dict(os.environ)
    cmd = parse_command((sys.executable, str(script)), sys.executable, hosts)
    assert cmd is not None
    # Cold: a new interpreter that imports torch, as every rank pays today.
    cold_out = hosts / "cold.log"
    t0 = time.time()
    with cold_out.open("ab") as out:
        cold_proc = subprocess.Popen([sys.executable, str(script)], stdout=out, env=env)
    cold_s = _first_line_at(cold_out) - t0
    assert cold_proc.wait(60) == 0
    start_standby(cmd, env, warm, lease)
    _wait_ready(warm, cmd.key(env), 1)
    warm_out = hosts / "warm.log"
    t0 = time.time()
    proc = claim(cmd, env, warm, Assignment(cmd.argv, env, str(hosts), str(warm_out)))
    assert proc is not None
    warm_s = _first_line_at(warm_out) - t0
    assert proc.wait(60) == 0
    print(f"\nstart to the script's first line after 'import torch': cold {cold_s:.3f} s, "
          f"warm {warm_s:.3f} s ({cold_s / max(warm_s, 1e-6):.0f}x)")
    assert warm_s < 0.5 * cold_s


def _plan(hosts: Path, script: Path, attempt: int, port: int) -> LaunchPlan:
    ranks = []
    for rank in range(2):
        node = f"n{rank}"
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "TRAINGUARD_WARM_DIR": str(hosts / node / "warm"), "OMP_NUM_THREADS": "1",
               "PYTHONUNBUFFERED": "1"}
        out = hosts / "attempts" / str(attempt) / f"rank{rank}.log"
        ranks.append(RankLaunch(rank, 0, node, rank, env, out))
    return LaunchPlan(attempt, (sys.executable, str(script)), ("n0", "n1"), tuple(ranks),
                      hosts, host_dirs={n: str(hosts / n) for n in ("n0", "n1")})


def _wait_exits(attempt: LocalAttempt, timeout_s: float = 120) -> dict[int, int]:
    deadline = time.monotonic() + timeout_s
    exits: dict[int, int] = {}
    while attempt.running():
        assert time.monotonic() < deadline, "ranks did not finish"
        exits |= {e.rank: e.returncode for e in attempt.poll()}
        time.sleep(0.05)
    return exits | {e.rank: e.returncode for e in attempt.poll()}


def test_local_backend_restarts_two_gloo_ranks_warm(hosts: Path) -> None:
    script = hosts / "gloo.py"
    script.write_text(GLOO)
    for node in ("n0", "n1"):
        (hosts / node / "warm").mkdir(parents=True, mode=0o700)
    backend = LocalBackend()
    try:
        first = backend.launch(_plan(hosts, script, 0, backend.free_port(())))
        assert first.warm_ranks() == frozenset()  # nothing pre-warmed yet: cold
        assert _wait_exits(first) == {0: 0, 1: 0}
        cmd = parse_command((sys.executable, str(script)), sys.executable, hosts)
        assert cmd is not None
        key = cmd.key({**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
        for node in ("n0", "n1"):  # the backend pre-warmed one standby per rank slot
            _wait_ready(hosts / node / "warm", key, 1)
            assert (hosts / node / "lease").exists()
        second = backend.launch(_plan(hosts, script, 1, backend.free_port(())))
        assert second.warm_ranks() == frozenset({0, 1})
        pids = dict(second.pids())
        assert all(os.getsid(pid) == pid for pid in pids.values() if _alive(pid))
        assert _wait_exits(second) == {0: 0, 1: 0}
        for rank in (0, 1):
            text = (hosts / "attempts" / "1" / f"rank{rank}.log").read_text()
            assert f"rank {rank} sum 3.0 warm 1" in text, text
        cold_text = (hosts / "attempts" / "0" / "rank0.log").read_text()
        assert "warm None" in cold_text
    finally:
        backend.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


LAZY = """import sys
print("preloaded", "colorsys" in sys.modules, "torch._dynamo" in sys.modules, flush=True)
import torch
import trainguard.train as tg


def setup():
    import colorsys  # imported after start-up, as a script's helpers do
    torch.use_deterministic_algorithms(True)  # imports torch._dynamo lazily


tg.init()
setup()
tg.step(0, loss=1.0)
tg.finish()
"""


def _one_rank_plan(hosts: Path, script: Path, attempt: int) -> LaunchPlan:
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "TRAINGUARD_WARM_DIR": str(hosts / "n0" / "warm"), "OMP_NUM_THREADS": "1",
           "PYTHONUNBUFFERED": "1"}
    out = hosts / "attempts" / str(attempt) / "rank0.log"
    return LaunchPlan(attempt, (sys.executable, str(script)), ("n0",),
                      (RankLaunch(0, 0, "n0", 0, env, out),), hosts,
                      host_dirs={"n0": str(hosts / "n0")})


def test_standby_imports_what_the_last_rank_loaded_lazily(hosts: Path) -> None:
    """Attempt 0 (cold) loads colorsys and torch._dynamo after start-up and lists them at its
    first step; the standbys started after attempt 1's launch (the list exists by then) have
    them loaded before attempt 2's rank runs its first line."""
    script = hosts / "lazy.py"
    script.write_text(LAZY)
    (hosts / "n0" / "warm").mkdir(parents=True, mode=0o700)
    cmd = parse_command((sys.executable, str(script)), sys.executable, hosts)
    assert cmd is not None
    key = cmd.key({**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    backend = LocalBackend()
    lines = []
    try:
        for attempt in range(3):
            if attempt:
                _wait_ready(hosts / "n0" / "warm", key, 1)
            launched = backend.launch(_one_rank_plan(hosts, script, attempt))
            assert launched.warm_ranks() == (frozenset({0}) if attempt else frozenset())
            assert _wait_exits(launched) == {0: 0}
            text = (hosts / "attempts" / str(attempt) / "rank0.log").read_text()
            lines.append(text.splitlines()[0])
            if attempt == 0:
                listed = (hosts / "n0" / "warm" / f"{key}.imports").read_text().split()
                assert "colorsys" in listed and "torch._dynamo" in listed
                assert "trainguard.train" not in listed  # a checkout, not a library
    finally:
        backend.close()
    assert lines[0] == "preloaded False False"  # cold: nothing before the first line
    assert lines[2] == "preloaded True True", lines
