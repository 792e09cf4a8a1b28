"""The ``slurm`` backend: attempts as ``srun`` steps in an allocation, or as submitted jobs.

Two modes behind the one :class:`~trainguard.recover.backend.Backend` interface:

- ``allocation`` (inside ``salloc`` / an ``sbatch`` script): each attempt is one ``srun`` step on
  the chosen nodes of the allocation (``--nodelist``), so an excluded node is simply left out and
  a spare of the allocation takes its place;
- ``submit``: each attempt is a new ``sbatch`` job (``--nodelist`` / ``--exclude``); the job is
  followed with ``scontrol show job`` and cancelled with ``scancel``.

Either way every task runs :mod:`trainguard.recover.slurm.task`, which maps the task to the
plan's rank by its node's position in ``TRAINGUARD_NODES`` (not by Slurm's node order) and
leaves per-rank pid and exit files. Nothing here goes through a shell: every command is an argv
list, the batch script is a Python file that ``exec``s ``srun`` with an argv read from JSON, and
drain reasons are sanitized.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from trainguard.errors import ConfigError, LaunchError
from trainguard.recover.backend import LaunchPlan, RankExit
from trainguard.recover.local import ReaperSlot, resolve_command
from trainguard.recover.reaper import ReaperLink
from trainguard.recover.slurm.commands import NodeInfo
from trainguard.recover.slurm.task import files_for, step_file
from trainguard.trace.collect import process_state

log = logging.getLogger(__name__)

MODES = ("allocation", "submit")
_FINAL_JOB_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
    "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"})
_JOB_POLL_S = 1.0


class Scontrol(Protocol):
    """What the backend needs from the Slurm client tools (see ``commands.SlurmCommands``)."""

    def drain(self, node: str, reason: str) -> None: ...

    def sinfo_nodes(self) -> Mapping[str, NodeInfo]: ...

    def show_job(self, job_id: str) -> dict[str, str]: ...

    def cancel(self, job_id: str) -> None: ...


class SlurmAttempt:
    """The ranks of one attempt, seen through their pid/exit files and the step or job."""

    def __init__(self, plan: LaunchPlan, attempt_dir: Path, *, srun: subprocess.Popen[bytes]
                 | None = None, job_id: str | None = None, commands: Scontrol | None = None,
                 reaper: ReaperLink | None = None) -> None:
        self._plan = plan
        self._files = {rl.rank: files_for(attempt_dir, rl.node, rl.rank) for rl in plan.ranks}
        self._srun = srun
        self.job_id = job_id
        self._commands = commands
        self._reported: set[int] = set()
        self._reaper = reaper
        """Told what to cancel if the supervisor dies: srun's tree, the step, the job."""
        self._step_file = step_file(attempt_dir)
        self._step: str | None = None
        if reaper is not None:
            if srun is not None:
                reaper.add(srun.pid)
            if job_id is not None:
                reaper.scancel(job_id)
        self._job_state: str | None = None
        self._job_exit = "0:0"
        self._next_job_poll = 0.0

    def _ended(self) -> int | None:
        """The step's (or job's) own exit status once it has ended, else None."""
        if self._srun is not None:
            return self._srun.poll()
        if self.job_id is None or self._commands is None:
            return None
        now = time.monotonic()
        if self._job_state is None or now >= self._next_job_poll:
            self._next_job_poll = now + _JOB_POLL_S
            try:
                info = self._commands.show_job(self.job_id)
            except LaunchError:
                return None  # the controller may be briefly unreachable
            self._job_state = info.get("JobState", "").split()[0] if info else None
            self._job_exit = info.get("ExitCode", "0:0")
        if self._job_state in _FINAL_JOB_STATES:
            code, _, sig = self._job_exit.partition(":")
            return -int(sig) if sig not in ("", "0") else int(code or 0)
        return None

    def poll(self) -> list[RankExit]:
        self._follow_step()
        exits = self._poll()
        if exits and len(self._reported) == len(self._files):
            self._release()
        return exits

    def _follow_step(self) -> None:
        """Once the tasks name their step, the reaper can cancel it (allocation mode)."""
        if self._reaper is None or self._srun is None or self._step is not None:
            return
        text = self._step_file.read_text().strip() if self._step_file.exists() else ""
        if text:
            self._step = text
            self._reaper.scancel(text)

    def _release(self) -> None:
        """The attempt is over: nothing of it is left for the reaper to cancel."""
        if self._reaper is None:
            return
        if self._srun is not None:
            self._reaper.forget(self._srun.pid)
        for job in (self._step, self.job_id):
            if job is not None:
                self._reaper.uncancel(job)

    def _poll(self) -> list[RankExit]:
        exits = []
        for rank, (_, _, exit_file) in self._files.items():
            if rank in self._reported:
                continue
            code = _read_int(exit_file)
            if code is not None:
                self._reported.add(rank)
                exits.append(RankExit(rank, code))
        if len(self._reported) < len(self._files):
            ended = self._ended()
            if ended is not None:
                # Ranks that left no exit file died with their task (node failure, SIGKILL).
                for rank, (_, _, exit_file) in self._files.items():
                    if rank not in self._reported:
                        code = _read_int(exit_file)
                        self._reported.add(rank)
                        exits.append(RankExit(rank, code if code is not None
                                              else (ended if ended != 0 else -signal.SIGKILL)))
        return exits

    def running(self) -> frozenset[int]:
        return frozenset(r for r in self._files if r not in self._reported)

    def pids(self) -> Mapping[int, int]:
        return {r: pid for r, (_, pid_file, _) in self._files.items()
                if (pid := _read_int(pid_file)) is not None}

    def is_stopped(self, rank: int) -> bool:
        pid = self.pids().get(rank)
        return pid is not None and process_state(pid) == "stopped"

    def signal_rank(self, rank: int, signum: int) -> None:
        pid = self.pids().get(rank)
        if pid is None:
            raise LaunchError(f"rank {rank} has not started (no pid file yet)")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signum)

    def close(self) -> None:
        """Nothing to release beyond what :meth:`stop` and the last :meth:`poll` did."""

    def _kill_step(self) -> None:
        """Fencing: SIGKILL every task of the step through Slurm (a stopped one, one whose
        host srun lost), not only srun here, before anything is relaunched."""
        step = self._step
        if step is None and self._step_file.exists():
            step = self._step_file.read_text().strip() or None
        kill = getattr(self._commands, "kill", None)
        if step is not None and callable(kill):
            with contextlib.suppress(LaunchError, ConfigError):
                kill(step)

    def stop(self, grace_s: float) -> list[RankExit]:
        if self._srun is not None and self._srun.poll() is None:
            # srun forwards SIGTERM to every task; the task wrapper to its rank's group.
            self._srun.send_signal(signal.SIGTERM)
        elif self.job_id is not None and self._commands is not None:
            with contextlib.suppress(LaunchError):
                self._commands.cancel(self.job_id)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self._ended() is None:
            time.sleep(0.05)
        if self._srun is not None and self._srun.poll() is None:
            self._kill_step()
            self._srun.kill()
            self._srun.wait()
        for pid in self.pids().values():  # same host: make sure nothing is left behind
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + max(30.0, grace_s)
        while time.monotonic() < deadline and self._ended() is None:
            time.sleep(0.2)
        return self.poll()


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


_BATCH_SCRIPT = """#!{python}
# trainguard batch script: runs srun with this argv (JSON, no shell). Self-contained: the node
# that runs it need not see the run directory.
import json, os
argv = json.loads({argv_json!r})
os.execvp(argv[0], argv)
"""


class SlurmBackend:
    """Launch attempts through Slurm (see the module docstring for the two modes)."""

    name = "slurm"
    persistent_nodes = True

    def __init__(self, mode: str, commands: Scontrol, *, env: Mapping[str, str] | None = None,
                 partition: str | None = None, job_name: str = "trainguard",
                 time_limit: str | None = None, python: str = sys.executable) -> None:
        if mode not in MODES:
            raise ConfigError(f"unknown slurm mode {mode!r}; choose one of: {', '.join(MODES)}")
        self.mode = mode
        self.commands = commands
        self._env = dict(os.environ if env is None else env)
        self._partition = partition
        self._job_name = job_name
        self._time_limit = time_limit
        self._python = python
        self.excluded: set[str] = set()
        # If the supervisor dies, the reaper stops ``srun`` and cancels the step or the job.
        self._reaper = ReaperSlot()

    def close(self) -> None:
        self._reaper.close()

    def check(self, command: tuple[str, ...], nodes: tuple[str, ...]) -> None:
        resolve_command("srun", self._env.get("PATH"))
        if self.mode == "submit":
            resolve_command("sbatch", self._env.get("PATH"))
        elif not self._env.get("SLURM_JOB_ID"):
            raise ConfigError("--slurm-mode allocation needs an allocation (run inside salloc or "
                              "an sbatch script), or use --slurm-mode submit")
        resolve_command(command[0], self._env.get("PATH"))

    def capacity(self) -> int | None:
        return None  # Slurm itself refuses more tasks per node than a node has

    def master_addr(self, nodes: tuple[str, ...]) -> str:
        return nodes[0]

    def free_port(self, nodes: tuple[str, ...]) -> int:
        # The port must be free on the first node; on the single-host test cluster (and as a
        # guess elsewhere) a port free here. Rendezvous retries cover a rare collision.
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def unavailable(self, nodes: tuple[str, ...]) -> Mapping[str, str]:
        """Drained or down nodes: a job pinned to one with --nodelist would pend forever."""
        info = self.commands.sinfo_nodes()
        out = {}
        for node in nodes:
            ni = info.get(node)
            if ni is None:
                out[node] = "not a node of this cluster"
            elif ni.drained or not ni.responding or ni.state.lower().startswith(("down", "fail")):
                out[node] = f"Slurm state {ni.state}" + (f": {ni.reason}" if ni.reason else "")
        return out

    def exclude(self, node: str, reason: str) -> None:
        """Drain ``node`` so no later job (ours or anyone's) lands on it."""
        self.excluded.add(node)
        self.commands.drain(node, reason)

    def _srun_argv(self, nodes: tuple[str, ...], per_node: int,
                   program: list[str], overlap: bool = False,
                   step_name: str | None = None) -> list[str]:
        shared = ["--overlap"] if overlap else []
        return ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes) * per_node}",
                f"--ntasks-per-node={per_node}", f"--nodelist={','.join(nodes)}",
                "--kill-on-bad-exit=0", "--export=ALL",
                f"--job-name={step_name or self._job_name}",
                *shared, *program]

    def _step_env(self, plan: LaunchPlan, attempt_dir: Path) -> dict[str, str]:
        first = plan.ranks[0].env
        common = {k: v for k, v in first.items() if k not in _PER_RANK}
        return {**self._env, **common, "TRAINGUARD_NODES": ",".join(plan.nodes),
                "TRAINGUARD_SLURM_ATTEMPT_DIR": str(attempt_dir),
                "TRAINGUARD_NPROC": str(len(plan.ranks) // len(plan.nodes))}

    def launch(self, plan: LaunchPlan) -> SlurmAttempt:
        attempt_dir = plan.ranks[0].output.parent.parent
        program = [self._python, "-m", "trainguard.recover.slurm.task", *plan.command]
        srun, job_id = self.start_step(plan.nodes, len(plan.ranks) // len(plan.nodes), program,
                                       self._step_env(plan, attempt_dir), attempt_dir,
                                       plan.workdir, plan.attempt)
        return SlurmAttempt(plan, attempt_dir, srun=srun, job_id=job_id,
                            commands=self.commands,
                            reaper=self._reaper.get())

    def start_step(self, nodes: tuple[str, ...], per_node: int, program: list[str],
                   env: Mapping[str, str], attempt_dir: Path, workdir: Path, attempt: int,
                   output: str | None = None, overlap: bool = False,
                   step_name: str | None = None,
                   ) -> tuple[subprocess.Popen[bytes] | None, str | None]:
        """Run ``program`` as ``per_node`` tasks on each of ``nodes``: an ``srun`` step
        (allocation mode; its process) or a submitted job (submit mode; its id).
        ``output``: the submitted job's output file as the node sees it (default: the
        attempt's ``job.out``, which needs the run directory on a shared filesystem).
        ``overlap``: the step may share CPUs with earlier steps (``srun --overlap``): an
        agents' step of a lost host never completes, and must not hold the next one back.
        ``step_name``: the step's name in allocation mode (to find and cancel it)."""
        attempt_dir.mkdir(parents=True, exist_ok=True)
        srun_argv = self._srun_argv(nodes, per_node, program, overlap,
                                    step_name if self.mode == "allocation" else None)
        if self.mode == "allocation":
            with open(attempt_dir / "srun.log", "ab") as out:
                try:
                    proc = subprocess.Popen(srun_argv, env=dict(env), cwd=workdir,
                                            stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
                except OSError as exc:
                    raise LaunchError(f"cannot start srun: {exc.strerror or exc}") from exc
            return proc, None
        argv_file = attempt_dir / "srun-argv.json"
        argv_file.write_text(json.dumps(srun_argv))
        script = attempt_dir / "batch.py"
        script.write_text(_BATCH_SCRIPT.format(python=self._python,
                                               argv_json=json.dumps(srun_argv)))
        sbatch = ["sbatch", "--parsable", f"--nodes={len(nodes)}",
                  f"--ntasks-per-node={per_node}",
                  f"--nodelist={','.join(nodes)}", f"--job-name={self._job_name}",
                  f"--output={output or attempt_dir / 'job.out'}", "--export=ALL",
                  "--no-requeue",
                  f"--chdir={workdir}"]
        if self.excluded:
            sbatch.append(f"--exclude={','.join(sorted(self.excluded))}")
        if self._partition:
            sbatch.append(f"--partition={self._partition}")
        if self._time_limit:
            sbatch.append(f"--time={self._time_limit}")
        try:
            done = subprocess.run([*sbatch, str(script)], env=dict(env), capture_output=True,
                                  text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise LaunchError(f"sbatch failed: {exc}") from exc
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise LaunchError(f"sbatch failed: {first}")
        job_id = done.stdout.strip().split(";")[0]
        log.info("attempt %d submitted as job %s", attempt, job_id)
        (attempt_dir / "job_id").write_text(job_id + "\n")
        return None, job_id

    @property
    def allocation(self) -> str | None:
        """The job id of the allocation the steps run in (allocation mode)."""
        return self._env.get("SLURM_JOB_ID") if self.mode == "allocation" else None

    @property
    def reaper(self) -> ReaperLink:
        """The watchdog that cancels this backend's steps and jobs if the supervisor dies."""
        return self._reaper.get()


# Variables the task wrapper sets per rank; the rest of a rank's environment is common.
_PER_RANK = frozenset({"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "ROLE_RANK",
                       "TRAINGUARD_NODE", "TRAINGUARD_EVENTS"})


__all__ = ["MODES", "Scontrol", "SlurmAttempt", "SlurmBackend"]
