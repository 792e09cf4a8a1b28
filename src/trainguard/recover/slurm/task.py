"""The per-rank wrapper that ``srun`` starts on every task of a trainguard Slurm launch.

``srun`` gives each task ``SLURM_PROCID`` / ``SLURM_NODEID`` / ``SLURM_LOCALID`` and the node's
name in ``SLURMD_NODENAME``; the wrapper turns them into the torch.distributed environment, sends
the rank's output to its own file, runs the command as a child and leaves two small files next
to the output: ``rank<R>.pid`` (for signals from the supervisor on the same host) and
``rank<R>.exit`` (the child's exit status, negative for a signal), so the supervisor sees every
rank's status although ``srun`` reports one per step; and ``<attempt dir>/step_id``
(``JOBID.STEPID``), so the step can be cancelled if the supervisor dies.

Environment (set by the backend on the ``srun`` process, exported to the tasks):
``TRAINGUARD_SLURM_ATTEMPT_DIR`` (the attempt's directory: outputs go to ``<dir>/<node>/``),
``TRAINGUARD_NPROC`` (ranks per node) and the common variables (MASTER_ADDR, MASTER_PORT,
TRAINGUARD_*). Usage: ``python -m trainguard.recover.slurm.task COMMAND ARGS...``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType


def rank_env(env: Mapping[str, str]) -> dict[str, str]:
    """torch.distributed variables for this task (pure).

    The rank follows the supervisor's plan, not Slurm's node order: the node's position in
    ``TRAINGUARD_NODES`` times the ranks per node, plus ``SLURM_LOCALID``.
    """
    nodes = [n for n in env.get("TRAINGUARD_NODES", "").split(",") if n]
    node = env.get("SLURMD_NODENAME", "")
    nproc = int(env.get("TRAINGUARD_NPROC", "1"))
    local = int(env.get("SLURM_LOCALID", "0"))
    if node in nodes:
        node_rank = nodes.index(node)
        rank, world, nnodes = node_rank * nproc + local, len(nodes) * nproc, len(nodes)
    else:  # not launched by trainguard's backend: trust Slurm
        node_rank = int(env.get("SLURM_NODEID", "0"))
        rank = int(env.get("SLURM_PROCID", "0"))
        world = int(env.get("SLURM_NTASKS", "1"))
        nnodes = int(env.get("SLURM_NNODES", "1"))
    attempt_dir = Path(env["TRAINGUARD_SLURM_ATTEMPT_DIR"])
    return {
        "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(node_rank),
        "NODE_RANK": str(node_rank), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": str(nnodes), "ROLE_NAME": "default", "TRAINGUARD_NODE": node,
        "TRAINGUARD_EVENTS": str(attempt_dir / node / f"rank{rank}.events.jsonl"),
    }


def files_for(attempt_dir: Path, node: str, rank: int) -> tuple[Path, Path, Path]:
    """(output, pid file, exit file) of one rank."""
    base = attempt_dir / node
    return base / f"rank{rank}.log", base / f"rank{rank}.pid", base / f"rank{rank}.exit"


def step_file(attempt_dir: Path) -> Path:
    """Where the tasks leave their step's ``JOBID.STEPID`` (for ``scancel`` of the step)."""
    return attempt_dir / "step_id"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # tasks may write the same file
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if not command:
        sys.stderr.write("usage: python -m trainguard.recover.slurm.task COMMAND ARGS...\n")
        return 2
    env = {**os.environ}
    extra = rank_env(env)
    env.update(extra)
    attempt_dir = Path(env["TRAINGUARD_SLURM_ATTEMPT_DIR"])
    output, pid_file, exit_file = files_for(attempt_dir, extra["TRAINGUARD_NODE"],
                                            int(extra["RANK"]))
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "ab") as out:
        try:
            child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            out.write(f"trainguard: cannot start {command[0]}: {exc}\n".encode())
            _write(exit_file, "127\n")
            return 127
    _write(pid_file, f"{child.pid}\n")
    job, step = env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID")
    if job and step and not step_file(attempt_dir).exists():
        _write(step_file(attempt_dir), f"{job}.{step}\n")  # every task of the step agrees

    def forward(signum: int, frame: FrameType | None) -> None:
        # srun delivers SIGTERM/SIGINT on cancel: pass it to the rank's whole process group.
        try:
            os.killpg(child.pid, signum)
            os.killpg(child.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, forward)
    code = child.wait()
    _write(exit_file, f"{code}\n")
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
