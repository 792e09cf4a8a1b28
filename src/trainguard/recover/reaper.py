"""The reaper: a watchdog that kills what is left of a job when its supervisor dies.

``PR_SET_PDEATHSIG`` reaches only a rank's own process; a command wrapped in ``bash -c``, the
data-loader workers and helpers a rank spawns, and anything that called ``setsid`` would survive a
``kill -9`` of the supervisor with PPID 1. So each supervisor starts one reaper process, in its own
session, and talks to it through a pipe whose write end only the supervisor holds (the fd is
close-on-exec and ranks are started with ``close_fds``):

1. After a launch the backend writes ``add PID`` per rank (``forget PID`` once the rank is
   reaped; ``scancel ID`` for a Slurm job or step to cancel if the supervisor dies).
2. About every 0.5 s the reaper records the job's process tree (:class:`Tree`): the registered
   ranks, every process in their sessions or process groups, and every descendant of those
   (``/proc/*/stat`` ppid links), each as (pid, start time) so a reused pid is never mistaken
   for a member.
3. End of file on the pipe means the supervisor is gone (exit or SIGKILL alike): SIGTERM (and
   SIGCONT) to every member still alive, SIGKILL after a short grace, ``scancel`` what it was
   told to, then exit.

The module uses the standard library only: the backend runs it as a script (``python -I
reaper.py FD``) so the watchdog starts in milliseconds and does not hold the supervisor's imports.

    >>> link = ReaperLink.start()  # what LocalBackend does at its first launch  # doctest: +SKIP
    >>> link.add(rank_pid); ...; link.forget(rank_pid)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

SCAN_INTERVAL_S = 0.5
"""How often the reaper records the job's process tree."""
GRACE_S = 2.0
"""Between SIGTERM and SIGKILL once the supervisor is gone."""

Key = tuple[int, int]
"""A process as (pid, start time in clock ticks since boot): unique even when pids are reused."""


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """The fields of ``/proc/PID/stat`` the reaper needs."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int
    """Start time, clock ticks since boot (field 22)."""
    state: str

    @property
    def key(self) -> Key:
        return (self.pid, self.start)


def parse_stat(text: bytes) -> ProcInfo | None:
    """A ``/proc/PID/stat`` line; None when it cannot be read (a process exiting meanwhile)."""
    head, _, tail = text.rpartition(b")")  # the command name may hold spaces and ')'
    fields = tail.split()
    try:
        pid = int(head.split(b"(", 1)[0])
        return ProcInfo(pid=pid, ppid=int(fields[1]), pgid=int(fields[2]), sid=int(fields[3]),
                        start=int(fields[19]), state=fields[0].decode("ascii", "replace"))
    except (IndexError, ValueError):
        return None


def snapshot(proc_root: Path = Path("/proc")) -> dict[int, ProcInfo]:
    """Every live process, by pid (zombies excluded: there is nothing left to kill)."""
    table: dict[int, ProcInfo] = {}
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            info = parse_stat((proc_root / name / "stat").read_bytes())
        except OSError:
            continue  # exited between listdir and read
        if info is not None and info.state not in ("Z", "X"):
            table[info.pid] = info
    return table


def members(table: Mapping[int, ProcInfo], roots: Mapping[int, int],
            known: Iterable[Key]) -> frozenset[Key]:
    """The live processes of the job in ``table``.

    1. Each root (a registered rank: pid -> start time) still alive.
    2. Every process in a root's session or process group. Linux does not reuse a pid while
       it names a live session or group, so the id is ours while the rank or a member lives; a
       different process now holding the rank's pid means the id was reused: skipped.
    3. Every process recorded before (``known``) still alive with the same start time: that is
       how a grandchild that called ``setsid`` and lost its parent stays in the job.
    4. Every descendant of the above, by ppid links.
    """
    found: set[Key] = set()
    ours: set[int] = set()
    for pid, start in roots.items():
        holder = table.get(pid)
        if holder is None or holder.start == start:
            ours.add(pid)
    for info in table.values():
        if info.sid in ours or info.pgid in ours:
            found.add(info.key)
    found.update(k for k in known if (p := table.get(k[0])) is not None and p.start == k[1])
    children: dict[int, list[ProcInfo]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info)
    stack = [pid for pid, _ in found]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child.key not in found:
                found.add(child.key)
                stack.append(child.pid)
    return frozenset(found)


@dataclass(slots=True)
class Tree:
    """What the reaper knows of the job: registered ranks and the members recorded so far.

        tree = Tree(); tree.add(pid, start); tree.update(snapshot())  # every ~0.5 s
    """

    roots: dict[int, int] = field(default_factory=dict)
    known: frozenset[Key] = frozenset()

    def add(self, pid: int, start: int) -> None:
        self.roots[pid] = start

    def forget(self, pid: int) -> None:
        """The rank was reaped; what it left behind and was recorded stays in the job."""
        self.roots.pop(pid, None)

    def update(self, table: Mapping[int, ProcInfo]) -> frozenset[Key]:
        """Record and return the job's live members in ``table``."""
        self.known = members(table, self.roots, self.known)
        return self.known

    @property
    def empty(self) -> bool:
        return not self.roots and not self.known


def _send(key: Key, signum: int, proc_root: Path) -> None:
    """Signal the process ``key`` names, never a later process that reused its pid: through a
    pidfd, opened and then checked against the start time."""
    pid, start = key
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfd (old kernel): a plain kill right after the check
        fd = -1
    try:
        try:
            info = parse_stat((proc_root / str(pid) / "stat").read_bytes())
        except OSError:
            return
        if info is None or info.start != start:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if fd >= 0:
                signal.pidfd_send_signal(fd, signum)
            else:
                os.kill(pid, signum)
    finally:
        if fd >= 0:
            os.close(fd)


def kill_tree(tree: Tree, *, grace_s: float = GRACE_S, proc_root: Path = Path("/proc"),
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> frozenset[Key]:
    """SIGTERM (and SIGCONT) every member, SIGKILL what is left after ``grace_s`` (at once,
    with no SIGTERM first, when ``grace_s`` is 0: a fence); returns the members that were still
    alive at the end (empty unless a process cannot be killed). Waits until the members are
    gone or zombies, so nothing of the tree runs any more when it returns empty."""
    live = tree.update(snapshot(proc_root))
    if grace_s > 0:
        for key in live:
            _send(key, signal.SIGTERM, proc_root)
            _send(key, signal.SIGCONT, proc_root)  # a stopped process handles TERM only now
        deadline = clock() + grace_s
        while live and clock() < deadline:
            sleep(0.05)
            live = tree.update(snapshot(proc_root))
    for _ in range(20):  # members may still fork while dying: kill until none is left
        if not live:
            break
        for key in live:
            _send(key, signal.SIGKILL, proc_root)
        sleep(0.05)
        live = tree.update(snapshot(proc_root))
    return live


def start_time(pid: int, proc_root: Path = Path("/proc")) -> int | None:
    """``pid``'s start time (clock ticks since boot); None when it is gone."""
    try:
        info = parse_stat((proc_root / str(pid) / "stat").read_bytes())
    except OSError:
        return None
    return None if info is None else info.start


def _scancel(ids: Iterable[str]) -> list[subprocess.Popen[bytes]]:
    """Start ``scancel`` for each job or step (waited for after the local tree is killed)."""
    procs = []
    for job in ids:
        with contextlib.suppress(OSError):
            procs.append(subprocess.Popen(["scancel", job], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL))
    return procs


def serve(fd: int, *, interval_s: float = SCAN_INTERVAL_S, grace_s: float = GRACE_S) -> None:
    """The reaper's loop: follow ``fd`` (the pipe from the supervisor) until end of file, then
    kill the job's tree and cancel its Slurm jobs."""
    tree = Tree()
    cancel: dict[str, None] = {}
    pending = b""
    next_scan = 0.0
    while True:
        ready, _, _ = select.select([fd], [], [], interval_s)
        if ready:
            data = os.read(fd, 65536)
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                verb, _, arg = line.decode("ascii", "replace").partition(" ")
                if verb == "add" and arg.isdigit():
                    start = start_time(int(arg))
                    if start is not None:
                        tree.add(int(arg), start)
                        next_scan = 0.0  # record its first children soon
                elif verb == "forget" and arg.isdigit():
                    tree.forget(int(arg))
                elif verb == "scancel" and arg:
                    cancel[arg] = None
                elif verb == "uncancel":
                    cancel.pop(arg, None)
        now = time.monotonic()
        if now >= next_scan and not tree.empty:
            tree.update(snapshot())
            next_scan = now + interval_s
    cancelling = _scancel(cancel)
    kill_tree(tree, grace_s=grace_s)
    for proc in cancelling:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)


class ReaperLink:
    """The supervisor's end of the pipe to its reaper process.

    Writes never raise: a reaper that died is logged once, and the job runs on without it.
    """

    def __init__(self, proc: subprocess.Popen[bytes], fd: int) -> None:
        self.proc = proc
        self._fd: int | None = fd
        # A link dropped without close() (a library user's backend) still lets its reaper go.
        self._closer = weakref.finalize(self, os.close, fd)

    @classmethod
    def start(cls) -> ReaperLink:
        read_end, write_end = os.pipe()  # both close-on-exec: no rank inherits either
        try:
            # -I: neither the script's folder nor PYTHONPATH on sys.path (nothing shadows the
            # standard library); own session: the terminal's Ctrl-C / SIGHUP do not reach it.
            proc = subprocess.Popen(
                [sys.executable, "-I", str(Path(__file__).resolve()), str(read_end)],
                pass_fds=(read_end,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                start_new_session=True)
        except OSError:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        return cls(proc, write_end)

    def _say(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, (line + "\n").encode("ascii"))
        except OSError as exc:
            log.warning("the reaper (pid %d) is gone (%s): ranks may outlive a killed "
                        "supervisor", self.proc.pid, exc)
            self.close()

    def add(self, pid: int) -> None:
        """Kill ``pid``'s session, group and descendants if the supervisor dies."""
        self._say(f"add {pid}")

    def forget(self, pid: int) -> None:
        self._say(f"forget {pid}")

    def scancel(self, job: str) -> None:
        """Run ``scancel job`` if the supervisor dies (a Slurm job id, or job.step)."""
        self._say(f"scancel {job}")

    def uncancel(self, job: str) -> None:
        self._say(f"uncancel {job}")

    def close(self, wait_s: float = 0.0) -> None:
        """End of file for the reaper: it kills what is left of the job and exits."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self._closer()
            self._fd = None
        if wait_s > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait_s)

    @property
    def alive(self) -> bool:
        return self._fd is not None and self.proc.poll() is None


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        sys.stderr.write("usage: reaper.py FD (started by trainguard's launch backends)\n")
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    serve(int(argv[0]))
    return 0


__all__ = ["Key", "ProcInfo", "ReaperLink", "Tree", "kill_tree", "members", "parse_stat",
           "serve", "snapshot", "start_time"]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
