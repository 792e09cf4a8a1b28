"""Issue 27's benchmark, the part that applies to an ordinary script: a plain DDP script with no
trainguard SDK (tests/integration/scripts/plain_ddp.py: gloo, ``torch.save`` checkpoints of its
own, ``step N loss X`` printed by every rank) on the namespaced cluster, one rank per host.

It has no memory snapshots (they need the SDK), so what applies is the warm restart: a rank
SIGKILLed on host2, from the kill to the first ``step`` line after the restart, ``trainguard run
--warm`` vs one ``torchrun --max-restarts 3`` per host (c10d rendezvous at host1). Both resume
from the script's own newest checkpoint; the step it resumed from and the final loss are
reported, the final loss next to a fault-free trainguard run's.

Progress is read the same way on both sides: new ``step`` lines of host1's rank output, seen
from the root namespace (trainguard: the controller's copy of the rank's output, which crossed
the network from host1's agent; torchrun: host1's torchrun output file).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from benchmarks.bench_recovery import _base_env
from trainguard.devcluster import DevClusterError, HostCluster

REPO = Path(__file__).resolve().parents[1]
PLAIN = REPO / "tests" / "integration" / "scripts" / "plain_ddp.py"
MARK = "plain_ddp.py"
NODES = ("host1", "host2", "host3")
RDZV_PORT = 29541
_STEP = re.compile(r"^step (\d+) loss ", re.M)
_RESUMED = re.compile(r"^resumed from \S+ at step (\d+)", re.M)


@dataclass(frozen=True, slots=True)
class PlainConfig:
    steps: int = 240
    kill_step: int = 170
    """Late enough for host2's warm standby to have imported torch (a few seconds here)."""
    ckpt_every: int = 50
    step_time: float = 0.05
    node_timeout: float = 6.0

    def script_args(self) -> list[str]:
        return ["--ckpt-every", str(self.ckpt_every), "--step-time", str(self.step_time)]


@dataclass(frozen=True, slots=True)
class PlainRun:
    """One run of the plain script; ``first_step_s``: the kill to the first new step line."""

    side: str
    first_step_s: float | None
    resumed_step: int | None
    final_loss: str | None
    note: str


def steps_in(text: str) -> list[int]:
    """The step numbers of ``step N loss X`` lines, in order.

    >>> steps_in("warning\\nstep 1 loss 0.5\\nstep 2 loss 0.4\\n")
    [1, 2]
    """
    return [int(m.group(1)) for m in _STEP.finditer(text)]


def resumed_step(text: str) -> int | None:
    """The step the script said it resumed from, or None (it started afresh).

    >>> resumed_step("resumed from step-100.pt at step 100\\nstep 101 loss 0.3\\n")
    100
    """
    found = _RESUMED.findall(text)
    return int(found[-1]) if found else None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _poll(check: Callable[[], bool], timeout_s: float, alive: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        if not alive():
            return check()
        time.sleep(0.01)
    return False


def _kill_ranks(cluster: HostCluster, node: str, *, skip: Sequence[bytes]) -> None:
    for pid in cluster.processes(node):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if MARK.encode() in cmd and not any(s in cmd for s in skip):
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def run_trainguard(cfg: PlainConfig, root: Path, name: str, *, fault: bool) -> PlainRun:
    import multihost_job  # type: ignore[import-not-found, unused-ignore]  # a test helper

    multihost_job.SCRIPT = PLAIN
    with HostCluster(4, root / f"c-{name}", prefix="tgp") as cluster:
        job = multihost_job.Job(cluster, root, name, steps=cfg.steps,
                                script_args=cfg.script_args(),
                                extra=["--hang-timeout", "60", "--warm", "--node-timeout",
                                       str(cfg.node_timeout)])
        first = None
        after = job.run_dir / "attempts" / "1" / "host1" / "rank0.log"
        try:
            if fault:
                job.wait_for_step(cfg.kill_step, timeout_s=300)
                _kill_ranks(cluster, "host2", skip=(b"standby",))  # the rank, not its standby
                t_fault = time.time()
                if _poll(lambda: bool(steps_in(_read(after))), 120,
                         lambda: job.proc.poll() is None):
                    first = time.time() - t_fault
            summary = job.wait(400)
        finally:
            job.kill()
    final = _read(job.loss).strip() or None
    ok = summary.get("status") == "succeeded"
    return PlainRun("trainguard", first, resumed_step(_read(after)) if fault else None,
                    final if ok else None,
                    f"{summary.get('status')} after {len(summary.get('attempts', []))} attempts")


def run_torchrun(cfg: PlainConfig, root: Path) -> PlainRun:
    with HostCluster(4, root / "c-plain-torchrun", prefix="tgq") as cluster:
        out = cluster.shared / "plain-torchrun"
        out.mkdir(parents=True, exist_ok=True)
        loss = out / "loss.txt"
        env = _base_env()
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        endpoint = f"{cluster.host(NODES[0]).addr}:{RDZV_PORT}"
        procs: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for node in NODES:
                argv = ["env", *[f"{k}={v}" for k, v in env.items()
                                 if k.startswith(("TORCH_", "PYTHON"))],
                        sys.executable, "-m", "torch.distributed.run", "--nnodes",
                        str(len(NODES)), "--nproc-per-node", "1", "--max-restarts", "3",
                        "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                        "--rdzv-id", "plain", str(PLAIN), "--steps", str(cfg.steps),
                        "--ckpt-dir", str(out / "ckpt"), "--loss-log", str(loss),
                        *cfg.script_args()]
                with open(out / f"{node}.out", "wb") as sink:
                    procs[node] = cluster.popen(node, argv, stdout=sink,
                                                stderr=subprocess.STDOUT, cwd=REPO)
            watched = out / "host1.out"

            def alive() -> bool:
                return any(p.poll() is None for p in procs.values())

            if not _poll(lambda: cfg.kill_step in steps_in(_read(watched)), 300, alive):
                raise RuntimeError("torchrun did not reach step "
                                   f"{cfg.kill_step}:\n{_read(watched)[-2000:]}")
            before = len(_read(watched))
            _kill_ranks(cluster, "host2", skip=(b"torch.distributed.run",))
            t_fault = time.time()
            first = None
            if _poll(lambda: bool(steps_in(_read(watched)[before:])), 120, alive):
                first = time.time() - t_fault
            for p in procs.values():
                try:
                    p.wait(300)
                except subprocess.TimeoutExpired:
                    p.kill()
            codes = [p.returncode for p in procs.values()]
            text = _read(watched)[before:]
            return PlainRun("torchrun", first, resumed_step(text), _read(loss).strip() or None,
                            f"exit codes {codes}")
        finally:
            _stop(cluster)
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()


def _stop(cluster: HostCluster) -> None:
    for node in NODES:
        try:
            pids = cluster.processes(node)
        except DevClusterError:
            continue
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def plain_rows(cfg: PlainConfig, free: PlainRun, tg: PlainRun,
               tr: PlainRun) -> list[dict[str, Any]]:
    """The plain script's rows (measurement, target, measured, baseline, ratio, ok): pure."""
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f} s"

    def lost(r: PlainRun) -> str:
        return "-" if r.resumed_step is None else \
            f"step {r.resumed_step} ({cfg.kill_step - r.resumed_step} steps lost)"

    ratio = None if tg.first_step_s is None or not tr.first_step_s else \
        tg.first_step_s / tr.first_step_s
    return [
        {"measurement": "plain DDP (no SDK), rank SIGKILLed: fault -> first step",
         "target": "<= 0.3x torchrun", "measured": f(tg.first_step_s),
         "baseline": f(tr.first_step_s),
         "ratio": "-" if ratio is None else f"{ratio:.2f}x",
         "ok": None if ratio is None else ratio <= 0.3},
        {"measurement": "  plain DDP resumed from (its own checkpoint)", "target": "reported",
         "measured": lost(tg), "baseline": lost(tr), "ratio": "-", "ok": None},
        {"measurement": "  plain DDP final loss after the fault", "target": "== fault-free",
         "measured": str(tg.final_loss), "baseline": f"{free.final_loss} (torchrun "
         f"{tr.final_loss})", "ratio": "-",
         "ok": None if tg.final_loss is None else tg.final_loss == free.final_loss},
    ]


def plain_case(cfg: PlainConfig, root: Path) -> tuple[PlainRun, PlainRun, PlainRun]:
    """The three runs, fault-free first: (fault-free, trainguard with the fault, torchrun)."""
    tr = run_torchrun(cfg, root)
    free = run_trainguard(cfg, root, "plain-free", fault=False)
    tg = run_trainguard(cfg, root, "plain-rank", fault=True)
    return free, tg, tr
