"""The torchrun baseline of issue 27's benchmark, on the namespaced multi-host cluster.

One ``torchrun --nnodes=N --nproc-per-node=1 --max-restarts=3 --rdzv-backend=c10d`` per host,
all meeting at host1's bridge address, run examples/train_gpt.py. Two faults, the same as the
trainguard side's:

- ``rank``: SIGKILL the worker of one host (not its torchrun agent) once step ``kill_step`` is in
  the loss log. Measured from the kill to the first step after the restart, split at the points
  of benchmarks/bench_recovery.py (the failing host's torchrun log gives detect and stop, the
  workers' SDK phase records of the round after give relaunch, ready, loaded, first step).
- ``host``: SIGKILL the host's PID 1 (its torchrun, worker and memory go). torchrun has no spare:
  the surviving agents restart their workers and wait in rendezvous for the lost node until the
  rendezvous times out (``join_timeout_s``, default 600 s: we cap the wait). What it did is
  reported, not a recovery time that did not happen.

The loss log (rank 0, in the cluster's shared directory) is tailed from the root namespace; a new
line's arrival time is the host clock (every namespace shares it).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_recovery import (
    Split,
    _base_env,
    _read_events,
    last_loss,
    torchrun_split,
)
from trainguard.devcluster import DevClusterError, HostCluster

REPO = Path(__file__).resolve().parents[1]
GPT = REPO / "examples" / "train_gpt.py"
RDZV_PORT = 29531


@dataclass(frozen=True, slots=True)
class TorchrunResult:
    """One torchrun run with a fault; times in seconds from the fault."""

    fault: str
    split: Split | None
    first_step_s: float | None
    """Fault to the first new line of the loss log after the fault (None: none came)."""
    final: tuple[int, str] | None
    restarts: int
    note: str


def worker_pids(cluster: HostCluster, node: str) -> list[int]:
    """Root-namespace pids of ``node``'s training workers (not the torchrun agent)."""
    found = []
    for pid in cluster.processes(node):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"train_gpt.py" in cmd and b"torch.distributed.run" not in cmd:
            found.append(pid)
    return found


def stop_all(cluster: HostCluster, nodes: Sequence[str]) -> None:
    """SIGKILL every torchrun and worker left in the live ``nodes``."""
    for node in nodes:
        try:
            pids = cluster.processes(node)
        except DevClusterError:  # a killed host has nothing left
            continue
        for pid in pids:
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"train_gpt.py" in cmd:
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _lines(path: Path) -> int:
    try:
        return path.read_text().count("\n")
    except OSError:
        return 0


def _wait_for(path: Path, step: int, procs: Sequence[subprocess.Popen[bytes]],
              timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = last_loss(path.read_text())
        except OSError:
            found = None
        if found is not None and found[0] >= step:
            return True
        if all(p.poll() is not None for p in procs):
            return False
        time.sleep(0.02)
    return False


def run_torchrun(cluster: HostCluster, out: Path, *, nodes: Sequence[str], fault: str,
                 victim: str, kill_step: int, train_args: Sequence[str],
                 timeout_s: float = 150, host_wait_s: float = 60) -> TorchrunResult:
    """torchrun on ``nodes`` of ``cluster`` with ``fault`` (``rank`` or ``host``) on
    ``victim``; ``out`` must be under the cluster's shared directory."""
    out.mkdir(parents=True, exist_ok=True)
    loss = out / "loss.txt"
    endpoint = f"{cluster.host(nodes[0]).addr}:{RDZV_PORT}"
    env = _base_env()
    env["TRAINGUARD_EVENTS"] = str(out / "r{rank}.a{restart}.jsonl")
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    env["PYTHONPATH"] = str(REPO / "src")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for node in nodes:
            argv = ["env", *[f"{k}={v}" for k, v in env.items()
                             if k.startswith(("TRAINGUARD_", "TORCH_", "PYTHON"))],
                    sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(nodes)),
                    "--nproc-per-node", "1", "--max-restarts", "3", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", endpoint, "--rdzv-id", out.name, str(GPT),
                    "--ckpt-dir", str(out / "ckpt"), "--loss-log", str(loss), *train_args]
            with open(out / f"{node}.out", "wb") as sink:
                procs[node] = cluster.popen(node, argv, stdout=sink, stderr=subprocess.STDOUT,
                                            cwd=REPO)
        if not _wait_for(loss, kill_step, list(procs.values()), timeout_s):
            tail = (out / f"{nodes[0]}.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"torchrun did not reach step {kill_step}:\n{tail}")
        before = _lines(loss)
        if fault == "rank":
            for pid in worker_pids(cluster, victim):
                os.kill(pid, signal.SIGKILL)
        else:
            cluster.kill_host(victim)
        t_fault = time.time()
        wait = timeout_s if fault == "rank" else host_wait_s
        first: float | None = None
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if first is None and _lines(loss) > before:
                first = time.time()
            alive = [p for n, p in procs.items() if n != victim or fault == "rank"]
            if all(p.poll() is not None for p in alive):
                break
            time.sleep(0.02)
        restarts = [int(m.group(1)) for p in out.glob("r*.a*.jsonl")
                    if (m := re.fullmatch(r"r\d+\.a(\d+)\.jsonl", p.name))]
        last = max(restarts, default=0)
        split = None
        if fault == "rank" and last > 0:
            events = _read_events(sorted(out.glob(f"r*.a{last}.jsonl")))
            log = (out / f"{victim}.out").read_text(errors="replace")
            try:
                split = torchrun_split(log, events, last, t_fault)
            except (KeyError, ValueError):
                split = None
        final = last_loss(loss.read_text()) if loss.exists() else None
        note = "recovered" if first is not None else (
            f"no step within {wait:.0f} s after the fault (waits in rendezvous for the lost "
            "node; no spare)" if fault == "host" else "did not recover")
        return TorchrunResult(fault, split, None if first is None else first - t_fault, final,
                              last, note)
    finally:
        stop_all(cluster, nodes)
        for p in procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
