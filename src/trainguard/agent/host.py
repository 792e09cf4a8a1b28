"""What an agent does on its own host, without any networking: start the host's ranks, watch
them, tail the host's kernel log, and answer the controller's requests.

Everything here reads local files and local processes only; :mod:`trainguard.agent.runner`
turns the results into messages. The ranks run under :class:`~trainguard.recover.local.LocalBackend`
(one process group each, killed with the agent: ``PR_SET_PDEATHSIG`` plus the reaper).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.agent.dirwatch import DirWatch
from trainguard.agent.klog import JOURNALCTL, KMSG, KernelLog, open_kernel_log
from trainguard.agent.wire import CHUNK, SECRET_ENV, WireError, integer
from trainguard.agent.workdir import create_empty
from trainguard.errors import LaunchError
from trainguard.evidence.rules import RuleSet
from trainguard.filetail import FileTail
from trainguard.recover.backend import LaunchPlan, RankExit, RankLaunch
from trainguard.recover.inject import append_line
from trainguard.recover.local import LocalAttempt, LocalBackend
from trainguard.trace.collect import (
    STACK_SIGNAL,
    catches,
    group_usage,
    process_state,
    request_stacks,
)
from trainguard.trace.runfiles import stacks_path, trace_path

log = logging.getLogger(__name__)

PROC_EVERY_S = 0.5
"""How often process states (stopped?) and the kernel log are looked at."""
PROCSTAT_EVERY_S = 1.0
"""How often each rank's state and CPU time (``procstat``) go to the controller, which judges
with them whether the ranks advance (:mod:`trainguard.recover.liveness`)."""
EXIT_HOLD_S = 60.0
"""How long a rank's exit may wait for its last output to be read (see :meth:`HostWork.poll`):
after a stalled controller the backlog goes first; a file that never stops growing (something
the rank left behind still writing) does not hold the exit forever."""
_TRACE_MAX = 1 << 20
SETTLE_S = 0.5
"""How long a hang diagnosis waits for a rank that is ending (a zombie, or in D state while
it tears down) to be reaped, before it reports the state it sees."""


@dataclass(frozen=True, slots=True)
class RankFiles:
    rank: int
    output: Path
    events: Path


class StatTail:
    """A :class:`FileTail` opened only when ``stat`` says there may be something new.

    Most polls find nothing: one ``stat`` then replaces ``open``, ``fstat`` and ``close``. It
    skips exactly when the tail's own read would return nothing: same inode as at the last
    read, and the size the tail has already read.
    """

    def __init__(self, path: Path) -> None:
        self.tail = FileTail(path)
        self.name = path.name
        self._inode: int | None = None

    def read(self, max_bytes: int) -> tuple[bytes, bool]:
        """New complete lines, and whether more may be waiting (``max_bytes`` were taken)."""
        try:
            st = os.stat(self.tail.path)
        except OSError:
            return b"", False
        if st.st_ino == self._inode and st.st_size == self.tail.offset:
            return b"", False
        before = self.tail.offset
        data, _ = self.tail.read(max_bytes)
        self._inode = st.st_ino
        return data, self.tail.offset - before >= max_bytes

    def finish(self) -> bytes:
        """The half line held back, ended (:meth:`FileTail.finish`): its writer has exited."""
        return self.tail.finish()


def _strings(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WireError(f"{what} must be a list of strings")
    return list(value)


def _env(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise WireError("a rank's env must map strings to strings")
    return dict(value)


def local_plan(msg: Mapping[str, Any], node: str, work_dir: Path) -> LaunchPlan:
    """The controller's launch message as a plan for this host, with every rank file moved to
    this host's ``work_dir`` (pure, apart from nothing: no file is touched)."""
    command = _strings(msg.get("command"), "command")
    ranks = msg.get("ranks")
    if not isinstance(ranks, list):
        raise WireError("ranks must be a list")
    out = []
    for r in ranks:
        if not isinstance(r, dict):
            raise WireError("a rank must be a map")
        rank = integer(r, "rank")
        env = _env(r.get("env"))
        env["TRAINGUARD_EVENTS"] = str(work_dir / f"rank{rank}.events.jsonl")
        env["TRAINGUARD_NODE"] = node
        out.append(RankLaunch(rank, integer(r, "local_rank"), node, integer(r, "node_rank"),
                              env, work_dir / f"rank{rank}.log"))
    if out and not command:
        raise WireError("empty command")  # no ranks (a spare, a host check) need none
    workdir = msg.get("workdir")
    return LaunchPlan(integer(msg, "attempt"), tuple(command), (node,), tuple(out),
                      Path(workdir) if isinstance(workdir, str) else Path.cwd())


class HostWork:
    """The ranks and kernel log of one host for one attempt (thread-safe)."""

    def __init__(self, node: str, work_dir: Path, rules: RuleSet | Callable[[], RuleSet],
                 clock: Callable[[], float] = time.time,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.node = node
        self.work_dir = work_dir
        self._rules = rules
        """The evidence rules, or how to load them: compiling them is left until the kernel log
        is opened, after the ranks started (it is on the restart's critical path)."""
        self._clock = clock
        env = dict(os.environ if base_env is None else base_env)
        env.pop(SECRET_ENV, None)  # the ranks never see the run's secret
        self._base_env = env
        self._lock = threading.Lock()
        self._backend = LocalBackend(base_env=env)
        self._attempt: LocalAttempt | None = None
        self._files: dict[int, RankFiles] = {}
        self._tails: dict[int, tuple[StatTail, StatTail]] = {}
        self._klog: KernelLog | None = None
        self.kernel_log: Path | None = None
        self._stopped: frozenset[int] = frozenset()
        self._next_slow = 0.0
        self._next_stat = 0.0
        self._watch: DirWatch | None = None
        self._stopping = False
        self._again: set[str] = set()
        """Files a poll read only part of (``CHUNK``): read again without a new change."""
        self._held: list[tuple[RankExit, float]] = []
        self._codes: dict[int, int] = {}
        """Every exit status seen this attempt, by rank."""
        self._now = 0.0
        """The ``now`` of the last :meth:`poll` (when an exit reaped elsewhere was seen)."""
        """Exits seen while their rank's output was still unread, and since when."""

    def wall_time(self) -> float:
        """This host's own wall clock (injected in tests)."""
        return self._clock()

    # -- commands ----------------------------------------------------------------------------

    def watch_kernel_log(self, spec: str | None, since: float) -> None:
        """Follow this host's kernel log (a file, a directory, a journal export, ``journalctl``
        or ``/dev/kmsg``: :func:`~trainguard.agent.klog.open_kernel_log`) through the evidence
        rules; :class:`~trainguard.errors.ConfigError` when it cannot be read."""
        if spec is None:
            return
        if callable(self._rules):
            self._rules = self._rules()
        self._klog = open_kernel_log(spec, self.node, self._rules, since, self.work_dir)
        path = Path(spec)
        # Fault drills append to a plain file; a journal or the ring buffer is not ours to write.
        self.kernel_log = path if spec not in (JOURNALCTL, KMSG) and not path.is_dir() \
            and not spec.startswith("journal:") else None

    def launch(self, msg: Mapping[str, Any]) -> dict[int, int]:
        """Start this host's ranks; returns their pids. :class:`LaunchError` when it cannot."""
        plan = local_plan(msg, self.node, self.work_dir)
        self.work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._lock:
            if self._attempt is not None:
                raise LaunchError(f"{self.node}: the attempt's ranks were already started")
            for rl in plan.ranks:  # new files only, never through a symlink
                for path in (rl.output, Path(rl.env["TRAINGUARD_EVENTS"])):
                    try:
                        create_empty(path)
                    except OSError as exc:
                        raise LaunchError(f"{self.node}: refusing to write {path}: "
                                          f"{exc.strerror or exc} (placed there by someone "
                                          "else?)") from exc
            self._files = {rl.rank: RankFiles(rl.rank, rl.output,
                                              Path(rl.env["TRAINGUARD_EVENTS"]))
                           for rl in plan.ranks}
            self._tails = {r: (StatTail(f.output), StatTail(f.events))
                           for r, f in self._files.items()}
            self._watch = DirWatch.open(self.work_dir)
            if plan.ranks:
                self._attempt = self._backend.launch(plan)
            else:
                self._prewarm_spare(plan, msg.get("warm"))
            return dict(self._attempt.pids()) if self._attempt is not None else {}

    def _prewarm_spare(self, plan: LaunchPlan, warm: object) -> None:
        """A spare: standby interpreters for the ranks it may take over (a bad field is
        ignored: warm starts are an optimisation, never a reason to refuse the launch)."""
        if not isinstance(warm, dict) or not plan.command:
            return
        host, envs = warm.get("host_dir"), warm.get("envs")
        if not isinstance(host, str) or not isinstance(envs, list) or len(envs) > 1024:
            return
        try:
            self._backend.prewarm(plan, Path(host), [_env(e) for e in envs])
        except (WireError, LaunchError, OSError) as exc:
            log.info("%s: no standby pre-warmed for the spare: %s", self.node, exc)

    def signal(self, rank: int, signum: int) -> None:
        with self._lock:
            if self._attempt is None:
                raise LaunchError(f"{self.node}: no ranks are running")
            self._attempt.signal_rank(rank, signum)

    def stop(self, grace_s: float) -> None:
        """TERM (and CONT) every rank's group, KILL after ``grace_s``; exits are then reported
        by :meth:`poll`."""
        attempt = self._attempt
        self._stopping = True
        if attempt is not None:
            # Not under the lock: poll() must keep reporting output while the ranks wind down.
            attempt.terminate(grace_s)

    def append_kernel_line(self, line: str) -> Path:
        if self.kernel_log is None:
            raise LaunchError(f"{self.node}: no kernel-log file is watched (--kernel-log must "
                              "be a file to append to)")
        append_line(self.kernel_log, line)
        return self.kernel_log

    def close(self) -> None:
        self._backend.close()
        if self._klog is not None:
            self._klog.close()
        if self._watch is not None:
            self._watch.close()

    # -- watching ----------------------------------------------------------------------------

    def running(self) -> frozenset[int]:
        return self._attempt.running() if self._attempt is not None else frozenset()

    def poll(self, now: float, budget: int | None = None, *,
             hold_exits: bool = True) -> list[dict[str, Any]]:
        """What is new, as messages: output and SDK events, then exits (a rank's last output
        goes before its exit), and every :data:`PROC_EVERY_S` stopped ranks and kernel-log
        evidence.

        ``budget``: at most about this many bytes of output are read (None: a ``CHUNK`` per
        file); what is not read stays in the rank's file for a later look (backpressure). A
        rank's exit waits while its files are not read to their end, at most
        :data:`EXIT_HOLD_S` (``hold_exits=False``: not at all, the agent's last look, which also
        reads the kernel log whenever it was last read)."""
        out: list[dict[str, Any]] = []
        self._now = now
        with self._lock:
            attempt = self._attempt
            # stop() reaps in another thread: from then on, ask every rank. Ranks started
            # in warm standbys are not our children: their exits come over sockets.
            exits = attempt.poll() if attempt is not None \
                and (self._stopping or attempt.has_warm or _child_exited()) else []
            self._take_exits(exits, now)
            left = budget
            changed = self._changed() if left is None or left > 0 else set()
            # An ended rank's files are looked at whatever the watch says (a stat each when
            # nothing is new): its exit never goes out ahead of output a missed event hid.
            ended = {ex.rank for ex, _ in self._held}
            behind: set[int] = set()
            for rank, (output, events) in self._tails.items():
                for kind, tail in (("out", output), ("sdk", events)):
                    if changed is not None and tail.name not in changed and rank not in ended:
                        continue
                    if left is not None and left <= 0:
                        self._again.add(tail.name)  # no room: left in the file for now
                        behind.add(rank)
                        continue
                    data, more = tail.read(CHUNK)
                    if more:
                        self._again.add(tail.name)
                        behind.add(rank)
                    elif kind == "out" and rank in ended:  # a last line without its newline
                        data += tail.finish()
                    if data:
                        out.append({"t": kind, "rank": rank, "data": data})
                        if left is not None:
                            left -= len(data)
            if self._held and left is not None and left <= 0:
                behind |= set(self._tails)  # unread changes may be anyone's last output
            ready = [ex for ex, since in self._held if not hold_exits
                     or ex.rank not in behind or now - since >= EXIT_HOLD_S]
            self._held = [(ex, since) for ex, since in self._held if ex not in ready]
        out += [{"t": "exit", "rank": ex.rank, "code": ex.returncode} for ex in ready]
        if now >= self._next_slow or not hold_exits:  # the last look misses no XID
            self._next_slow = now + PROC_EVERY_S
            out += self._slow(now)
        return out

    @property
    def behind(self) -> bool:
        """Some output was left unread by the last look (a full ``CHUNK``, or no budget): look
        again soon."""
        return bool(self._again)

    def _changed(self) -> set[str] | None:
        """The files to look at now (None: all of them, when no watch says which)."""
        names = self._watch.changed() if self._watch is not None else None
        again, self._again = self._again, set()
        return None if names is None else names | again

    def _procstat(self) -> dict[str, Any] | None:
        """Each running rank's ``[rank, state, cpu_s]`` (its process group, from ``/proc``)."""
        attempt = self._attempt
        if attempt is None:
            return None
        running = attempt.running()
        pids = {r: pid for r, pid in attempt.pids().items() if r in running}
        usage = group_usage(pids) if pids else {}
        return {"t": "procstat", "ranks": [[r, state, round(cpu, 3)]
                                           for r, (state, cpu) in sorted(usage.items())]}

    def _slow(self, now: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if now >= self._next_stat:
            self._next_stat = now + PROCSTAT_EVERY_S
            stat = self._procstat()
            if stat is not None:
                out.append(stat)
        if self._attempt is not None:
            stopped = frozenset(r for r in self._attempt.running()
                                if self._attempt.is_stopped(r))
            if stopped != self._stopped:
                self._stopped = stopped
                out.append({"t": "procs", "stopped": sorted(stopped)})
        if self._klog is not None:
            out += [{"t": "klog", "event": ev.to_dict()} for ev in self._klog.poll(now)]
        return out

    def _settle_exits(self, attempt: LocalAttempt, pids: Mapping[int, int]) -> None:
        """Reap the ranks that are ending (a zombie, or a process in D state that is tearing
        down), waiting at most :data:`SETTLE_S`, so that a rank that has just finished its work
        is told apart from one that is stuck. Their exits are still reported by :meth:`poll`."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            with self._lock:
                self._take_exits(attempt.poll(), self._now)
                ending = [r for r in attempt.running()
                          if process_state(pids.get(r)) in ("zombie", "disk-sleep")]
            if not ending or time.monotonic() >= deadline:
                return
            time.sleep(0.02)

    def _take_exits(self, exits: list[RankExit], now: float) -> None:
        self._held += [(ex, now) for ex in exits]
        self._codes.update((ex.rank, ex.returncode) for ex in exits)

    def collect(self, timeout_s: float) -> dict[str, Any]:
        """Hang diagnosis on this host: each rank's process state, collective state file and
        Python stacks (SDK signal, else py-spy)."""
        attempt = self._attempt
        pids = dict(attempt.pids()) if attempt is not None else {}
        if attempt is not None:
            self._settle_exits(attempt, pids)
        codes = dict(self._codes)
        running = attempt.running() if attempt is not None else frozenset()
        ranks: dict[str, dict[str, Any]] = {}
        targets: dict[int, tuple[int | None, Path]] = {}
        signalable: set[int] = set()
        for rank, files in self._files.items():
            pid = pids.get(rank)
            proc = process_state(pid) if rank in running \
                else "finished" if codes.get(rank) == 0 else "exited"
            state_file = trace_path(files.events)
            entry: dict[str, Any] = {"pid": pid, "proc": proc, "trace": _read_small(state_file)}
            ranks[str(rank)] = entry
            if proc in ("running", "stopped", "disk-sleep"):
                # py-spy reads a stopped process too; only a running one can answer a signal.
                targets[rank] = (pid, stacks_path(files.events))
                if proc == "running" and entry["trace"] is not None \
                        and catches(pid, STACK_SIGNAL):
                    signalable.add(rank)
        if targets and attempt is not None:
            stacks = request_stacks(targets, attempt.signal_rank, timeout_s=timeout_s,
                                    signalable=signalable)
            for rank, stack in stacks.items():
                ranks[str(rank)]["stack"] = stack[-(256 << 10):]
        return {"ranks": ranks}


def _child_exited() -> bool:
    """Whether some child of this process has ended and is not reaped yet (one ``waitid``
    that reaps nothing, instead of one ``waitpid`` per rank on every look)."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # no child at all: let the attempt say what it knows
    except (AttributeError, OSError):
        return True


def _read_small(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(_TRACE_MAX)
    except OSError:
        return None


__all__ = ["PROC_EVERY_S", "HostWork", "StatTail", "local_plan"]
