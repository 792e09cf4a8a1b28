"""Benchmark: trainguard's agents on a namespaced multi-host cluster (issue #17, performance).

Four measurements, each side by side in one run (``--only`` picks one):

1. **recovery**: a crash of one rank, from the kill to the first step printed after the
   restart, ``trainguard run`` (agents, as in ``tests/integration/multihost_job.py``) against
   ``torchrun --max-restarts=3`` started by hand on the same hosts (one per host, c10d
   rendezvous on host1). Both run ``tests/integration/scripts/plain_ddp.py`` on 3 hosts x 1 rank
   with checkpoints in the cluster's shared directory. The fault is the same for both: SIGKILL
   of host2's rank from inside host2 (``pkill`` with :data:`RANK_PATTERN`, once host1's rank
   printed step ``--kill-step``). The pattern matches the training process and not torchrun's
   own agent, whose command line names the script too: ``pkill -f plain_ddp.py`` would kill
   torchrun's agent on host2 as well, a different fault. The first step after the restart is
   read where each system shows it: trainguard's mirrored ``attempts/1/host1/rank0.log`` in the
   run directory, torchrun's stdout on host1 (after its ``resumed from`` line). A torchrun run
   that does not recover is counted and shown, never dropped (torchrun runs with
   ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: see ``bench_recovery.py``).
2. **latency**: a rank writes a line with its own ``time.time()`` every 20 ms to stdout and an
   SDK-style JSON record to ``$TRAINGUARD_EVENTS``; a real agent inside host1 streams both; the
   controller polls the :class:`~trainguard.agent.remote.RemoteAttempt` every 10 ms and, for
   each line that appears in the mirrored files, records ``now - t_line``. Target p99 < 100 ms.
3. **cpu**: 8 ranks on host1, each writing an SDK heartbeat record every
   ``DEFAULT_HEARTBEAT_S`` and an output line every second; the agent's own CPU time
   (``/proc/PID/stat`` utime + stime) over 30 s after a 5 s warm-up. Target < 1 % of one core.
4. **controller**: a controller process (an ``AgentHub`` and a real ``RemoteAttempt``, polled
   at the supervisor's default 50 ms) with 64 simulated agents in a load process (no ranks:
   asyncio clients that send an SDK record at 2 Hz each plus the agent heartbeat); its CPU and
   peak RSS (VmHWM) over 30 s. Loopback only; needs no root.

The cluster (recovery, latency, cpu) needs root and the devcluster's programs.

    python benchmarks/bench_agents.py                    # about 5 minutes on 2 cores
    python benchmarks/bench_agents.py --only latency --json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

SCENARIOS = ("recovery", "latency", "cpu", "controller")
LATENCY_TARGET_MS = 100.0
AGENT_CPU_TARGET_PCT = 1.0
RANK_PATTERN = r"^[^ ]*python[^ ]* (-u )?[^ ]*plain_ddp\.py"
"""``pkill -f`` pattern of a plain_ddp rank (trainguard's or torchrun's worker, which torchrun
starts as ``python -u script``), not of torchrun itself."""


class BenchError(Exception):
    """A run did not do what the benchmark needs (start, exit, files, timeout)."""


# ---- pure: statistics and /proc ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dist:
    """Order statistics of a sample (nearest-rank percentiles)."""

    n: int
    p50: float
    p99: float
    max: float


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of a non-empty sample."""
    if not values:
        raise ValueError("percentile of an empty sample")
    if not 0 < q <= 100:
        raise ValueError("q must be in (0, 100]")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def dist(values: Sequence[float]) -> Dist | None:
    if not values:
        return None
    return Dist(len(values), percentile(values, 50), percentile(values, 99), max(values))


def cpu_ticks(stat_text: str) -> int:
    """utime + stime (clock ticks) of a ``/proc/PID/stat`` line; the command name may hold
    spaces and parentheses, so fields are counted after its last ``)``."""
    rest = stat_text[stat_text.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])  # fields 14 and 15 of proc(5)


def cpu_percent(ticks: int, wall_s: float, hz: int) -> float:
    """CPU time as % of one core over ``wall_s``."""
    if wall_s <= 0:
        raise ValueError("wall_s must be > 0")
    return 100.0 * ticks / hz / wall_s


def vm_hwm_kib(status_text: str) -> int:
    """Peak resident set size (``VmHWM``, KiB) of a ``/proc/PID/status`` text."""
    for line in status_text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise ValueError("no VmHWM line")


def first_step_after_resume(text: str) -> int | None:
    """The step number of the first ``step N loss`` line after a ``resumed from`` line."""
    seen = False
    for line in text.splitlines():
        if line.startswith("resumed from"):
            seen = True
        elif seen and line.startswith("step ") and " loss " in line:
            word = line.split()[1]
            if word.isdigit():
                return int(word)
    return None


def line_delays(data: bytes, now: float, stamp: str) -> list[float]:
    """``now - t`` (seconds) of each complete line of ``data``: ``t`` is the float after
    ``t `` (output lines) or the JSON record's ``stamp`` field (SDK lines)."""
    out = []
    for raw in data.splitlines():
        text = raw.decode(errors="replace")
        try:
            if text.startswith("t "):
                t = float(text[2:])
            else:
                rec = json.loads(text)
                t = float(rec[stamp])
        except (ValueError, KeyError, TypeError):
            continue
        out.append(now - t)
    return out


def ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


# ---- pure: results and the report --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recovery:
    """Kill-to-first-step seconds per run of one system; None: that run did not recover."""

    system: str
    totals: tuple[float | None, ...]
    notes: tuple[str, ...] = ()

    @property
    def recovered(self) -> list[float]:
        return [t for t in self.totals if t is not None]

    @property
    def median(self) -> float | None:
        return statistics.median(self.recovered) if self.recovered else None


@dataclass(frozen=True, slots=True)
class Usage:
    """A process's CPU (% of one core) and peak RSS over a measured window."""

    what: str
    cpu_pct: float
    wall_s: float
    peak_rss_mib: float
    detail: str = ""


def render_recovery(rows: Sequence[Recovery], baseline: str) -> str:
    """One line per system: runs, recovered, median, min-max, ratio to ``baseline``'s median."""
    base = next((r.median for r in rows if r.system == baseline), None)
    head = ("system", "runs", "recovered", "median s", "min-max s", f"vs {baseline}")
    cells = [head]
    for r in rows:
        rec = r.recovered
        rel = ratio(r.median, base)
        cells.append((r.system, str(len(r.totals)), f"{len(rec)}/{len(r.totals)}",
                      "-" if r.median is None else f"{r.median:.2f}",
                      f"{min(rec):.2f}-{max(rec):.2f}" if rec else "-",
                      "-" if rel is None else f"{rel:.2f}x"))
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join([c[0].ljust(widths[0]),
                        *(v.rjust(w) for v, w in zip(c[1:], widths[1:], strict=True))])
             for c in cells]
    lines.insert(1, "-" * len(lines[0]))
    lines += [f"  {r.system}: {n}" for r in rows for n in r.notes]
    return "\n".join(lines)


def render_latency(dists: dict[str, Dist | None]) -> str:
    lines = []
    for name, d in dists.items():
        if d is None:
            lines.append(f"{name}: no samples")
            continue
        lines.append(f"{name}: n={d.n}  p50 {d.p50 * 1e3:.1f} ms  p99 {d.p99 * 1e3:.1f} ms  "
                     f"max {d.max * 1e3:.1f} ms")
    return "\n".join(lines)


def render_usage(u: Usage) -> str:
    extra = f"  ({u.detail})" if u.detail else ""
    return (f"{u.what}: CPU {u.cpu_pct:.2f} % of one core over {u.wall_s:.0f} s, "
            f"peak RSS {u.peak_rss_mib:.1f} MiB{extra}")


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    text: str

    def __str__(self) -> str:
        return f"{'PASS' if self.ok else 'FAIL'}  {self.text}"


def recovery_verdict(rows: Sequence[Recovery], ours: str, baseline: str) -> Verdict:
    """Ours recovered every time and is no slower than the baseline (medians of the runs that
    recovered); a baseline that never recovered loses."""
    mine = next(r for r in rows if r.system == ours)
    theirs = next(r for r in rows if r.system == baseline)
    missed = len(mine.totals) - len(mine.recovered)
    if mine.median is None or missed:
        return Verdict(False, f"{ours}: did not recover in {missed} of {len(mine.totals)} runs")
    if theirs.median is None:
        return Verdict(True, f"{ours}: recovered, {baseline} never did")
    return Verdict(mine.median <= theirs.median,
                   f"{ours} no slower than {baseline} (median {mine.median:.2f} s vs "
                   f"{theirs.median:.2f} s)")


def latency_verdicts(dists: dict[str, Dist | None], target_ms: float) -> list[Verdict]:
    return [Verdict(d is not None and d.p99 * 1e3 < target_ms,
                    f"{name}: p99 < {target_ms:g} ms"
                    + ("" if d is None else f" ({d.p99 * 1e3:.1f} ms)"))
            for name, d in dists.items()]


def to_json(value: object) -> Any:
    """Dataclasses (nested), tuples and dicts as JSON-ready values."""
    if hasattr(value, "__dataclass_fields__"):
        return to_json(asdict(value))  # type: ignore[call-overload]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


# ---- main --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    only: tuple[str, ...]
    repeats: int
    steps: int
    kill_step: int
    latency_events: int
    window_s: float
    warmup_s: float
    agents: int
    json: bool


def parse_args(argv: Sequence[str] | None) -> Config:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--only", choices=SCENARIOS, action="append",
                    help="run only this measurement (repeatable)")
    ap.add_argument("--repeats", type=int, default=3, help="recovery runs per system")
    ap.add_argument("--steps", type=int, default=30, help="plain_ddp steps (recovery)")
    ap.add_argument("--kill-step", type=int, default=12)
    ap.add_argument("--latency-events", type=int, default=1200,
                    help="lines of each kind to time (latency)")
    ap.add_argument("--window", type=float, default=30.0,
                    help="seconds measured (cpu, controller)")
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--agents", type=int, default=64, help="simulated agents (controller)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.latency_events < 100 or a.window <= 0 or a.warmup < 0 \
            or a.agents < 1:
        ap.error("--repeats, --agents >= 1, --latency-events >= 100, --window > 0, "
                 "--warmup >= 0")
    if not 0 < a.kill_step < a.steps - 5:
        ap.error("--kill-step must be between 1 and --steps - 6")
    return Config(tuple(a.only or SCENARIOS), a.repeats, a.steps, a.kill_step,
                  a.latency_events, a.window, a.warmup, a.agents, a.json)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the measurements and print the report; 0 when every target is met, 1 when one is
    not, 2 when a run failed."""
    cfg = parse_args(argv)
    sys.path.insert(0, str(ROOT))
    # The scenario modules import this one as benchmarks.bench_agents: run as a script, it is
    # __main__, and BenchError must be one class for the except below.
    sys.modules.setdefault("benchmarks.bench_agents", sys.modules[__name__])
    from benchmarks import bench_agents_cluster as cl
    from benchmarks import bench_agents_sim as sim

    t0 = time.monotonic()
    results: dict[str, Any] = {}
    verdicts: list[Verdict] = []
    try:
        if set(cfg.only) & {"recovery", "latency", "cpu"}:
            with cl.cluster() as cluster:
                if "recovery" in cfg.only:
                    rows = cl.recovery(cluster, cfg)
                    results["recovery"] = rows
                    verdicts.append(recovery_verdict(rows, "trainguard", "torchrun"))
                    _show(cfg, "failure to resumed step: SIGKILL of host2's rank after step "
                          f"{cfg.kill_step} (3 hosts x 1 rank)",
                          render_recovery(rows, "torchrun"))
                if "latency" in cfg.only:
                    dists = cl.latency(cluster, cfg)
                    results["latency_s"] = dists
                    verdicts += latency_verdicts(dists, LATENCY_TARGET_MS)
                    _show(cfg, "rank line to controller (20 ms lines, controller polls every "
                          "10 ms)", render_latency(dists))
                if "cpu" in cfg.only:
                    usage = cl.agent_cpu(cluster, cfg)
                    results["agent_cpu"] = usage
                    verdicts.append(Verdict(usage.cpu_pct < AGENT_CPU_TARGET_PCT,
                                            f"agent CPU < {AGENT_CPU_TARGET_PCT:g} % at 8 ranks "
                                            f"({usage.cpu_pct:.2f} %)"))
                    _show(cfg, "agent at 8 ranks per host, steady state", render_usage(usage))
        if "controller" in cfg.only:
            usage = sim.controller_load(cfg)
            results["controller"] = usage
            _show(cfg, f"controller with {cfg.agents} simulated agents", render_usage(usage))
    except BenchError as exc:
        print(f"bench_agents: {exc}", file=sys.stderr)
        return 2
    wall = time.monotonic() - t0
    if cfg.json:
        print(json.dumps({**to_json(results), "verdicts": [str(v) for v in verdicts],
                          "wall_s": round(wall, 1)}, indent=2))
    else:
        for v in verdicts:
            print(v)
        print(f"wall time {wall:.0f} s")
    return 0 if all(v.ok for v in verdicts) else 1


def _show(cfg: Config, title: str, body: str) -> None:
    if not cfg.json:
        print(f"-- {title}\n{body}\n", flush=True)


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
