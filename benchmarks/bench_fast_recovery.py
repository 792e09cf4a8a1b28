"""Benchmark: issue 27's targets, trainguard vs torchrun on the namespaced multi-host cluster.

Three hosts run examples/train_gpt.py (one rank each) and a fourth is the spare; every host has
its own network, PID and mount namespace (and /dev/shm). In one run, side by side:

1. a rank SIGKILLed at step ``--kill-step`` on host2: ``trainguard run`` (agents, ``--spares
   host4``) vs ``torchrun --nnodes 3 --max-restarts 3`` (c10d rendezvous at host1), kill to the
   first step after the restart, split into detect, stop, relaunch, ready, restore (the
   ``ckpt_load`` phase) and first step (benchmarks/bench_recovery.py's points);
2. host2 lost (its PID 1 killed: ranks, agent, memory): trainguard replaces it with the spare,
   measured from its "node lost" decision to the first step, the time to decide separately;
   torchrun, with no spare, is given ``--host-wait`` seconds and what it did is reported;
3. work lost per failure (the attempt records' ``restore.steps_lost``) vs the interval;
4. step-time overhead of snapshots (``--snapshot-every auto`` vs ``off``, fault-free);
5. replication: how far the newest complete snapshot trails the newest one (snapshots.json);
6. the final loss after each recovery vs the fault-free run's;
7. a plain DDP script with no SDK (benchmarks/bench_fast_recovery_plain.py): a rank SIGKILLed,
   warm restart vs torchrun (``--no-plain`` skips it).

Each trainguard case uses a fresh cluster when it kills a host. Sizes are flags; the defaults
take about 5 minutes on a 2-core machine. Root only.

    python benchmarks/bench_fast_recovery.py [--json] [--steps 60 --kill-step 20 --n-embd 128]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from benchmarks.bench_fast_recovery_plain import PlainConfig, plain_case, plain_rows
from benchmarks.bench_recovery import (
    Split,
    _read_events,
    last_loss,
    phase_spans,
    trainguard_split,
)
from benchmarks.bench_recovery_torchrun import GPT, TorchrunResult, run_torchrun
from trainguard.devcluster import HostCluster, missing_requirements

NODES = ("host1", "host2", "host3")


@dataclass(frozen=True, slots=True)
class Config:
    steps: int
    kill_step: int
    ckpt_every: int
    n_embd: int
    n_layer: int
    batch_size: int
    node_timeout: float
    host_wait: float

    def train_args(self) -> list[str]:
        return ["--log-every", "1", "--ckpt-every", str(self.ckpt_every), "--n-embd",
                str(self.n_embd), "--n-layer", str(self.n_layer), "--batch-size",
                str(self.batch_size)]


@dataclass(frozen=True, slots=True)
class TgRun:
    """One ``trainguard run``; times in seconds."""

    split: Split | None
    restore: dict[str, Any] | None
    final_loss: float | None
    step_s: float | None
    """Mean step time of the fault-free attempt (rank 0's own "N steps in X s" line)."""
    decide_s: float | None
    """Host loss: the kill to the "node lost" line."""
    lost_to_step_s: float | None
    """Host loss: the "node lost" line to the first step after the restart."""
    replication_lag_steps: int | None
    attempts: int
    interval_steps: int | None = None
    """The snapshot interval K the run used (the step between its two newest snapshots)."""


@dataclass(frozen=True, slots=True)
class Row:
    measurement: str
    target: str
    measured: str
    baseline: str
    ratio: str
    ok: bool | None


def _job(cluster: HostCluster, root: Path, name: str, cfg: Config, extra: Sequence[str]) -> Any:
    import multihost_job  # type: ignore[import-not-found, unused-ignore]  # a test helper

    multihost_job.SCRIPT = GPT
    return multihost_job.Job(cluster, root, name, steps=cfg.steps, script_args=cfg.train_args(),
                             extra=["--hang-timeout", "60", "--warm", *extra])


def _step_s(run_dir: Path, attempt: int, skip: int = 10) -> float | None:
    """Rank 0's median step time in steady state (the SDK's step records after the first
    ``skip`` steps: start-up, the first snapshots and the standbys' pre-warm left out)."""
    path = run_dir / "attempts" / str(attempt) / "host1" / "rank0.events.jsonl"
    times = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("kind") == "step" and isinstance(rec.get("step_s"), (int, float)) \
                and int(rec.get("step", 0)) >= skip:
            times.append(float(rec["step_s"]))
    return statistics.median(times) if times else None


def _lag(run_dir: Path) -> int | None:
    """Newest snapshot step minus the newest complete one (snapshots.json), or None."""
    try:
        doc = json.loads((run_dir / "snapshots.json").read_text()).get("manifest", {})
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    steps = [int(c["step"]) for c in doc.get("copies", [])]
    complete = [int(c["step"]) for c in doc.get("complete", [])]
    return None if not steps or not complete else max(steps) - max(complete)


def _interval(run_dir: Path) -> int | None:
    """The step between the two newest snapshots in snapshots.json (K), or None."""
    try:
        doc = json.loads((run_dir / "snapshots.json").read_text()).get("manifest", {})
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    steps = sorted({int(c["step"]) for c in doc.get("copies", [])})
    return steps[-1] - steps[-2] if len(steps) >= 2 else None


def run_trainguard(cfg: Config, root: Path, name: str, *, fault: str | None,
                   extra: Sequence[str] = ()) -> TgRun:
    """``fault``: None, ``rank`` (SIGKILL host2's rank) or ``host`` (kill host2's PID 1)."""
    from multihost_job import rank_pids

    with HostCluster(4, root / f"c-{name}", prefix="tgb") as cluster:
        job = _job(cluster, root, name, cfg, [*extra, "--node-timeout", str(cfg.node_timeout)])
        try:
            t_fault = decided = None
            if fault is not None:
                job.wait_for_step(cfg.kill_step, timeout_s=300)
                if fault == "rank":
                    for pid in rank_pids(cluster, "host2", "train_gpt.py"):
                        # the rank only: its host's warm standbys name the script too
                        if b"standby" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                            os.kill(pid, signal.SIGKILL)
                    t_fault = time.time()
                else:
                    cluster.kill_host("host2")
                    t_fault = time.time()
                    deadline = time.monotonic() + cfg.node_timeout + 60
                    while "node lost" not in job.output() and time.monotonic() < deadline:
                        time.sleep(0.01)
                    decided = time.time() if "node lost" in job.output() else None
            summary = job.wait(400)
        finally:
            job.kill()
    attempts = summary["attempts"]
    last = len(attempts) - 1
    split = first = None
    if t_fault is not None and last > 0:
        events = _read_events(sorted((job.run_dir / "attempts" / str(last))
                                     .glob("*/rank*.events.jsonl")))
        split = trainguard_split(summary, events, t_fault)
        span = phase_spans(events).get("first_step")
        first = None if span is None else span.last_end
    found = last_loss(job.loss.read_text()) if job.loss.exists() else None
    final = float(found[1]) if found is not None and summary["status"] == "succeeded" else None
    return TgRun(split, attempts[-1].get("restore"), final, _step_s(job.run_dir, 0),
                 None if decided is None or t_fault is None else decided - t_fault,
                 None if decided is None or first is None else first - decided,
                 _lag(job.run_dir), len(attempts), _interval(job.run_dir))


def torchrun_case(cfg: Config, root: Path, fault: str) -> TorchrunResult:
    with HostCluster(3, root / f"c-torchrun-{fault}", prefix="tgt") as cluster:
        return run_torchrun(cluster, cluster.shared / f"torchrun-{fault}", nodes=NODES,
                            fault=fault, victim="host2", kill_step=cfg.kill_step,
                            train_args=[*cfg.train_args(), "--steps", str(cfg.steps)],
                            host_wait_s=cfg.host_wait)


def _f(v: float | None, unit: str = " s") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.2f}x"


def _split_text(s: Split | None) -> str:
    if s is None:
        return "-"
    parts = [("detect", s.detection_s), ("stop", s.teardown_s), ("relaunch", (s.backoff_s or 0)
              + (s.relaunch_s or 0)), ("restore", s.ckpt_load_s), ("first step", s.first_step_s)]
    return ", ".join(f"{k} {v:.2f}" for k, v in parts if v is not None)


def _median_step(runs: Sequence[TgRun]) -> float | None:
    found = [r.step_s for r in runs if r.step_s is not None]
    return statistics.median(found) if found else None


def rows(cfg: Config, frees: Sequence[TgRun], offs: Sequence[TgRun], rank: TgRun, host: TgRun,
         tr_rank: TorchrunResult, tr_host: TorchrunResult) -> list[Row]:
    """The table: pure over the measurements (``frees``/``offs``: the fault-free runs with
    snapshots on and off, run alternately; the overhead compares their median step times)."""
    free = frees[0]
    out: list[Row] = []
    tg_total = None if rank.split is None else rank.split.total_s
    ratio = None if tg_total is None or not tr_rank.first_step_s else \
        tg_total / tr_rank.first_step_s
    out.append(Row("rank SIGKILLed: fault -> first step", "<= 0.3x torchrun",
                   _f(tg_total), _f(tr_rank.first_step_s), _ratio(tg_total,
                                                                  tr_rank.first_step_s),
                   None if ratio is None else ratio <= 0.3))
    out.append(Row("  split trainguard / torchrun", "-", _split_text(rank.split),
                   _split_text(tr_rank.split), "-", None))
    tr_host_txt = _f(tr_host.first_step_s) if tr_host.first_step_s is not None else \
        f"none in {cfg.host_wait:.0f} s"
    ok = None if host.lost_to_step_s is None else (
        tr_host.first_step_s is None or host.lost_to_step_s <= 0.5 * tr_host.first_step_s)
    out.append(Row("host lost: 'node lost' -> first step (spare)", "<= 0.5x torchrun",
                   _f(host.lost_to_step_s), tr_host_txt,
                   _ratio(host.lost_to_step_s, tr_host.first_step_s), ok))
    out.append(Row("  time to decide (kill -> node lost)", "reported",
                   _f(host.decide_s), f"--node-timeout {cfg.node_timeout:g}", "-", None))
    src = (host.restore or {}).get("per_rank", {}).get("1", {}).get("source")
    out.append(Row("  rank 1 restored from", "buddy", str(src), "disk", "-", src == "buddy"))
    for name, run in (("rank", rank), ("host", host)):
        lost = None if run.restore is None else run.restore.get("steps_lost")
        source = None if run.restore is None else run.restore.get("source")
        k = run.interval_steps
        out.append(Row(f"work lost, {name} fault (steps)", "<= 1 interval", str(lost),
                       f"interval {k} steps; source {source}", "-",
                       None if not isinstance(lost, int) or k is None else lost <= k))
    on_s, off_s = _median_step(frees), _median_step(offs)
    over = None if on_s is None or not off_s else on_s / off_s - 1
    out.append(Row("step-time overhead, snapshots auto vs off", "<= 2%",
                   "-" if over is None else f"{100 * over:+.1f}% (median of {len(frees)} runs)",
                   f"{_f(off_s)} a step", "-", None if over is None else over <= 0.02))
    out.append(Row("replication lag (newest - newest complete)", "<= 2 intervals",
                   "-" if free.replication_lag_steps is None
                   else f"{free.replication_lag_steps} steps", "-", "-", None))
    for name, loss in (("rank fault", rank.final_loss), ("host fault", host.final_loss),
                       ("torchrun rank fault", None if tr_rank.final is None
                        else float(tr_rank.final[1]))):
        out.append(Row(f"final loss after {name}", "== fault-free",
                       "-" if loss is None else repr(loss), repr(free.final_loss), "-",
                       None if loss is None else loss == free.final_loss))
    return out


def render(table: Sequence[Row]) -> str:
    head = ("measurement", "target", "measured", "baseline", "ratio", "ok")
    cells = [head] + [(r.measurement, r.target, r.measured, r.baseline, r.ratio,
                       "-" if r.ok is None else ("yes" if r.ok else "NO")) for r in table]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    return "\n".join("  ".join(c[i].ljust(widths[i]) for i in range(len(head))) for c in cells)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=350)
    p.add_argument("--kill-step", type=int, default=250,
                   help="late enough for the standbys to be ready (about 5 s here)")
    p.add_argument("--ckpt-every", type=int, default=100)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--node-timeout", type=float, default=6.0)
    p.add_argument("--host-wait", type=float, default=45.0,
                   help="seconds torchrun gets to recover from a lost host")
    p.add_argument("--overhead-runs", type=int, default=3,
                   help="fault-free runs with snapshots on, and as many off, alternated")
    p.add_argument("--no-plain", action="store_true",
                   help="skip the plain DDP script (no SDK) case")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if os.geteuid() != 0 or missing_requirements():
        print("skipped: the namespaced cluster needs root and "
              f"{', '.join(missing_requirements()) or 'nothing else'}")
        return 0
    cfg = Config(a.steps, a.kill_step, a.ckpt_every, a.n_embd, a.n_layer, a.batch_size,
                 a.node_timeout, a.host_wait)
    root = Path(tempfile.mkdtemp(prefix="tg-fastrec-"))
    started = time.monotonic()
    tr_rank = torchrun_case(cfg, root, "rank")
    tr_host = torchrun_case(cfg, root, "host")
    frees, offs = [], []
    for i in range(max(1, a.overhead_runs)):  # alternated: drifts of a shared machine cancel
        offs.append(run_trainguard(cfg, root, f"off{i}", fault=None,
                                   extra=["--snapshot-every", "off"]))
        frees.append(run_trainguard(cfg, root, f"free{i}", fault=None))
    free, off = frees[0], offs[0]
    rank = run_trainguard(cfg, root, "rank", fault="rank")
    host = run_trainguard(cfg, root, "host", fault="host")
    table = rows(cfg, frees, offs, rank, host, tr_rank, tr_host)
    plain: dict[str, Any] = {}
    if not a.no_plain:
        pcfg = PlainConfig(node_timeout=cfg.node_timeout)
        p_free, p_tg, p_tr = plain_case(pcfg, root)
        table += [Row(**r) for r in plain_rows(pcfg, p_free, p_tg, p_tr)]
        plain = {"plain_free": p_free, "plain_rank": p_tg, "plain_torchrun": p_tr}
    if a.json:
        print(json.dumps({"config": asdict(cfg), "rows": [asdict(r) for r in table],
                          "runs": {k: asdict(v) for k, v in (
                              ("free", free), ("off", off), ("rank", rank), ("host", host),
                              ("torchrun_rank", tr_rank), ("torchrun_host", tr_host),
                              *plain.items())}},
                         indent=1, default=str))
    else:
        print(render(table))
        print(f"({time.monotonic() - started:.0f} s; this machine: {os.cpu_count()} CPUs; "
              f"torchrun host fault: {tr_host.note})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
