"""Gathering a hung job's facts (I/O): state files, process states, Python stacks.

Stacks come from py-spy when it is installed (``py-spy dump --pid``: works without the
process's cooperation, needs ptrace permission), else from the SDK's faulthandler: the rank
is sent SIGUSR2 and writes every thread's stack to its stacks file. A stopped process
(SIGSTOP) can do neither; its state says so.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trainguard.errors import TraceError
from trainguard.trace.model import RankState
from trainguard.trace.statefile import read_state

logger = logging.getLogger(__name__)

STACK_SIGNAL = signal.SIGUSR2
_STATES = {"R": "running", "S": "running", "I": "running", "W": "running", "T": "stopped",
           "t": "stopped", "D": "disk-sleep", "Z": "zombie", "X": "exited"}
PROCESS_STATES = frozenset(_STATES.values())
"""The words :func:`process_state` and :func:`group_usage` say."""


def process_state(pid: int | None) -> str:
    """``running``, ``stopped``, ``disk-sleep``, ``zombie`` or ``exited`` (from /proc)."""
    if pid is None:
        return "exited"
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return "exited"
    # The command name is in parentheses and may hold spaces, ')' or bytes that are not UTF-8.
    fields = stat[stat.rfind(b")") + 1:].split()
    if not fields:
        return "exited"
    letter = fields[0].decode("ascii", "replace")
    return _STATES.get(letter, letter)


_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
_PROC = Path("/proc")


def _group_entry(stat: bytes) -> tuple[int, str, float] | None:
    """(process group, state letter, CPU seconds incl. reaped children) of one ``stat``."""
    fields = stat[stat.rfind(b")") + 1:].split()
    try:
        ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        return int(fields[2]), fields[0].decode("ascii", "replace"), ticks * _TICK_S
    except (IndexError, ValueError):
        return None


def group_usage(groups: Mapping[int, int], proc: Path = _PROC) -> dict[int, tuple[str, float]]:
    """For each key of ``groups`` (a rank) whose process group (its leader's pid) has a process
    left: ``(state, cpu_s)``, the group's state (``stopped`` when any of its processes is in
    state ``T``/``t``, else its leader's, else ``running``) and the CPU seconds its processes
    used (user + system, reaped children included). One pass over ``/proc``."""
    wanted = {pgid: rank for rank, pgid in groups.items()}
    cpu: dict[int, float] = {}
    states: dict[int, str] = {}
    try:
        entries = list(os.scandir(proc))
    except OSError:
        return {}
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{entry.path}/stat", "rb") as f:
                found = _group_entry(f.read())
        except OSError:
            continue  # gone meanwhile
        if found is None or found[0] not in wanted:
            continue
        pgid, letter, seconds = found
        rank = wanted[pgid]
        cpu[rank] = cpu.get(rank, 0.0) + seconds
        word = _STATES.get(letter, "running")  # P (parked) and the like: not stopped
        if word == "stopped" or (int(entry.name) == pgid and states.get(rank) != "stopped"):
            states[rank] = word
    return {rank: (states.get(rank, "running"), seconds) for rank, seconds in cpu.items()}


def catches(pid: int | None, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (``SigCgt`` in /proc/PID/status):
    a signal it does not catch may kill it (SIGUSR2's default action is to terminate)."""
    if pid is None:
        return False
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            try:
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
            except (IndexError, ValueError):
                return False
    return False


def read_states(paths: Mapping[int, Path]) -> tuple[dict[int, RankState | None], list[str]]:
    """Each rank's state file (None where missing or unreadable), and notes saying why."""
    out: dict[int, RankState | None] = {}
    notes: list[str] = []
    for rank, path in sorted(paths.items()):
        if not path.exists():
            out[rank] = None
            continue
        try:
            read = read_state(path)
        except TraceError as exc:
            out[rank] = None
            notes.append(str(exc))
            continue
        if read.torn:
            notes.append(f"rank {rank}: its state file was mid-update (process stopped while "
                         "writing); read as is")
        out[rank] = read.state
    return out, notes


def py_spy_path() -> str | None:
    """py-spy on PATH, else next to this Python (a virtual environment's bin/)."""
    found = shutil.which("py-spy")
    if found is not None:
        return found
    sibling = Path(sys.executable).parent / "py-spy"
    return str(sibling) if sibling.is_file() and os.access(sibling, os.X_OK) else None


def _py_spy(pid: int, timeout_s: float) -> str | None:
    exe = py_spy_path()
    if exe is None:
        return None
    try:
        # A stopped process cannot be paused for a consistent read; py-spy reads it as is.
        quiet = ["--nonblocking"] if process_state(pid) == "stopped" else []
        done = subprocess.run([exe, "dump", *quiet, "--pid", str(pid)], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.info("py-spy dump of pid %d failed: %s", pid, exc)
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def request_stacks(
    targets: Mapping[int, tuple[int | None, Path]],
    signal_rank: Callable[[int, int], None],
    *,
    timeout_s: float = 3.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    use_py_spy: bool = True,
    signalable: set[int] | None = None,
) -> dict[int, str]:
    """Python stacks of the ranks in `targets` (rank -> (pid, stacks file)); ranks that did not
    answer within `timeout_s` are absent. py-spy (when installed) reads any running process;
    the signal goes only to `signalable` ranks (default: all), which must catch it (see
    `catches`: SIGUSR2 kills a process that does not)."""
    stacks: dict[int, str] = {}
    if use_py_spy and py_spy_path() is not None:
        with ThreadPoolExecutor(max_workers=min(8, max(1, len(targets)))) as pool:
            found = {r: pool.submit(_py_spy, pid, timeout_s)
                     for r, (pid, _) in targets.items() if pid is not None}
            for r, fut in found.items():
                text = fut.result()
                if text:
                    stacks[r] = text
    asked: dict[int, tuple[Path, int]] = {}
    for rank, (_, path) in targets.items():
        if rank in stacks or (signalable is not None and rank not in signalable):
            continue
        try:
            before = path.stat().st_size if path.exists() else 0
            signal_rank(rank, STACK_SIGNAL)
        except Exception as exc:  # a rank that is gone, a backend without signals
            logger.info("no stack request to rank %d: %s", rank, exc)
            continue
        asked[rank] = (path, before)
    deadline = clock() + timeout_s
    sizes: dict[int, int] = {}
    while asked and clock() < deadline:
        sleep(0.1)
        for rank, (path, before) in list(asked.items()):
            size = path.stat().st_size if path.exists() else 0
            if size > before and sizes.get(rank) == size:  # grown, and stable for one poll
                with path.open("rb") as f:
                    f.seek(before)
                    stacks[rank] = f.read().decode("utf-8", "replace")
                del asked[rank]
            sizes[rank] = size
    return stacks


__all__ = ["PROCESS_STATES", "STACK_SIGNAL", "catches", "group_usage", "process_state",
           "py_spy_path", "read_states", "request_stacks"]
