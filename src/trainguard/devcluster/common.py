"""Shared pieces of the dev cluster: its error, the programs it needs, checked subprocess calls
and /proc helpers (namespace identity, process lists, killing by pid)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

from trainguard.errors import TrainguardError

HOST_PROGRAMS = ("ip", "nsenter", "unshare", "mount", "setpriv")
SLURM_PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "scontrol")


class DevClusterError(TrainguardError):
    """The namespaced dev cluster could not be built, used or torn down."""


def which(program: str) -> str | None:
    """``program`` on PATH, also looking in sbin where Debian puts ``ip`` and the daemons."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin"
    return shutil.which(program, path=path)


def missing_requirements(programs: Sequence[str] = HOST_PROGRAMS) -> list[str]:
    """Why a cluster cannot start here (empty when it can): not root, or programs missing."""
    reasons = [] if os.geteuid() == 0 else ["needs root (network, mount and PID namespaces)"]
    missing = [p for p in programs if which(p) is None]
    if missing:
        reasons.append(f"missing programs: {', '.join(missing)}")
    return reasons


def check_call(argv: Sequence[str], *, stdin: str | None = None, timeout_s: float = 30) -> str:
    """Run ``argv``; its stdout, or DevClusterError naming the command and its stderr."""
    try:
        proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevClusterError(f"{' '.join(argv)}: {exc}") from exc
    if proc.returncode != 0:
        detail = " ".join(proc.stderr.split())[:500]
        raise DevClusterError(f"{' '.join(argv)} failed ({proc.returncode}): {detail}")
    return proc.stdout


def ns_link(pid: int, kind: str = "pid") -> str | None:
    """The namespace identity of ``pid`` (e.g. ``pid:[4026532301]``), None if it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def pids_in_namespace(link: str, kind: str = "pid", *, live_only: bool = False) -> list[int]:
    """Root-namespace pids of every process whose ``kind`` namespace is ``link`` (without
    zombies when ``live_only``: an unreaped zombie holds no namespace or resource)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and ns_link(int(entry.name), kind) == link:
            pids.append(int(entry.name))
    return sorted(p for p in pids if not (live_only and is_zombie(p)))


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc/PID/task/*/children, else a /proc scan)."""
    found: list[int] = []
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            with open(f"{task.path}/children") as fh:
                found.extend(int(p) for p in fh.read().split())
        return found
    except OSError:
        pass
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit() and _ppid(int(entry.name)) == pid:
                found.append(int(entry.name))
    return found


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        stat = fh.read()
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return None


def is_zombie(pid: int) -> bool:
    """Exited but not yet reaped (False when the pid is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] == "Z"


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def wait_until(done: Callable[[], bool], timeout_s: float, interval_s: float = 0.02) -> bool:
    """Poll ``done`` until it is true (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)
    return True


__all__ = [
    "HOST_PROGRAMS",
    "SLURM_PROGRAMS",
    "DevClusterError",
    "check_call",
    "children",
    "comm",
    "is_zombie",
    "kill_quietly",
    "missing_requirements",
    "ns_link",
    "pids_in_namespace",
    "wait_until",
    "which",
]
