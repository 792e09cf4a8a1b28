"""Benchmark: the cost of leaving tracing on, and the time from a hang to a named culprit
(issue #8).

1. **Overhead, end to end**: the example GPT (2 gloo ranks on one virtual node, under
   ``trainguard run``) with ``TRAINGUARD_TRACE=0`` and with tracing on, interleaved, `--repeats`
   runs each; each run's time per step comes from its own "N steps in T s" line (start-up
   excluded); the figure is the median over repeats of on/off of the two adjacent runs (a
   paired comparison: slow drifts of the machine cancel). Target: <= 1% slower. On a shared
   2-core VM run-to-run noise is a few percent, so the end-to-end ratio has wide error bars;
   hence also:
2. **Overhead, by construction**: the tracer's own cost per collective and per span, measured in
   a tight loop (microseconds), times the calls per step the example makes (from its trace
   records), divided by its step time.
3. **Hang to culprit**: a rank is SIGSTOPped at step 30 (3 ranks); reported are the hang
   timeout, the time from the stop to the declared hang, and from there to the named culprit.

    python benchmarks/bench_tracing.py               # about 7 minutes
    python benchmarks/bench_tracing.py --repeats 2 --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
EXAMPLE = ROOT / "examples" / "train_gpt.py"
_STEPS_LINE = re.compile(r"(\d+) steps in ([\d.]+) s")


def run_example(work: Path, steps: int, trace: bool, *opts: str) -> tuple[float, Path]:
    """Seconds per step of one supervised run of the example, and its run directory."""
    run_dir = work / f"run-{time.monotonic_ns()}"
    env = {**os.environ, "TRAINGUARD_DB": "", "TRAINGUARD_TRACE": "1" if trace else "0"}
    cmd = [sys.executable, "-m", "trainguard.cli.main", "run", "--run-dir", str(run_dir),
           "--db", str(work / "tg.db"), *opts, "--", sys.executable, str(EXAMPLE),
           "--steps", str(steps), "--ckpt-every", "100000", "--ckpt-dir", str(run_dir / "ck")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=work,
                          check=False)
    m = _STEPS_LINE.search(done.stderr + done.stdout)
    if m is None:
        raise RuntimeError(f"no 'steps in' line (exit {done.returncode}): {done.stderr[-800:]}")
    return float(m.group(2)) / int(m.group(1)), run_dir


def micro_costs(n: int = 20000) -> dict[str, float]:
    """Microseconds per traced collective (enter + exit with the state file) and per span."""
    from trainguard.train.tracing import Tracer

    with tempfile.TemporaryDirectory() as tmp:
        t = Tracer(rank=0, state_path=Path(tmp) / "r.trace")
        t.on_step(0)
        t0 = time.perf_counter()
        for _ in range(n):
            call = t.enter("all_gather", "world", 2, 4096, blocking=True)
            t.exit(call)
        coll = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for _ in range(n):
            with t.span("forward"):
                pass
        span = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for step in range(1, n + 1):
            t.on_step(step)
        step_cost = (time.perf_counter() - t0) / n
        t.close()
    return {"collective_us": coll * 1e6, "span_us": span * 1e6, "step_us": step_cost * 1e6}


def calls_per_step(run_dir: Path) -> tuple[float, float]:
    """(collectives, spans) per step on rank 0 of a traced run."""
    from trainguard.trace.runfiles import rank_files, read_windows

    f = rank_files(run_dir)[0]
    ws = read_windows(f.events).windows
    steps = sum(w.steps for w in ws) or 1
    colls = sum(op.count for w in ws for op in w.collectives.values())
    spans = sum(op.count for w in ws for op in w.spans.values())
    return colls / steps, spans / steps


def hang_to_culprit(work: Path, hang_timeout: float) -> dict[str, Any]:
    run_dir = work / "hang"
    cmd = [sys.executable, "-m", "trainguard.cli.main", "run", "--run-dir", str(run_dir),
           "--db", str(work / "tg.db"), "--nodes", "node1,node2,node3", "--nproc-per-node",
           "1", "--hang-timeout", str(hang_timeout), "--max-retries", "0", "--inject",
           "hang:rank=1,step=30", "--", sys.executable, str(EXAMPLE), "--steps", "100000",
           "--ckpt-dir", str(run_dir / "ck")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=work,
                          env={**os.environ, "TRAINGUARD_DB": ""}, check=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    doc = json.loads((run_dir / "attempts" / "0" / "hang.json").read_text())
    attempt = summary["attempts"][0]
    stop_t = None
    events = run_dir / "attempts" / "0" / "node2" / "rank1.events.jsonl"
    steps = [json.loads(x) for x in events.read_text().splitlines() if '"step"' in x]
    if steps:
        stop_t = max(r["t"] for r in steps if r.get("kind") == "step")
    culprit = doc["culprits"][0] if doc["culprits"] else {}
    return {"exit": done.returncode, "hang_timeout_s": hang_timeout,
            "declared_after_last_step_s": None if stop_t is None
            else attempt["failed_at"] - stop_t,
            "named_after_declared_s": doc["diagnosed_at"] - attempt["failed_at"],
            "culprit": {k: culprit.get(k) for k in ("rank", "node", "process", "reason")},
            "summary": doc["summary"]}


def measure(repeats: int, steps: int, hang_timeout: float,
            log: Any = lambda m: print(m, file=sys.stderr, flush=True)) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tg-bench-trace-"))
    try:
        nodes = ["--nodes", "node1", "--nproc-per-node", "2"]
        per: dict[str, list[float]] = {"off": [], "on": []}
        traced_run: Path | None = None
        for rep in range(repeats):
            for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                s, run_dir = run_example(work, steps, mode == "on", *nodes)
                per[mode].append(s)
                if mode == "on":
                    traced_run = run_dir
                log(f"repeat {rep + 1}/{repeats} tracing {mode}: {s * 1000:.2f} ms/step")
        assert traced_run is not None
        colls, spans = calls_per_step(traced_run)
        micro = micro_costs()
        off, on = statistics.median(per["off"]), statistics.median(per["on"])
        pairs = [b / a for a, b in zip(per["off"], per["on"], strict=True)]
        model = (colls * micro["collective_us"] + spans * micro["span_us"]
                 + micro["step_us"]) / 1e6
        log("hang to culprit ...")
        hang = hang_to_culprit(work, hang_timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"repeats": repeats, "steps": steps, "step_s": per, "median_off_s": off,
            "median_on_s": on, "overhead": statistics.median(pairs) - 1.0,
            "pair_overheads": [p - 1.0 for p in pairs], "calls_per_step": colls,
            "spans_per_step": spans, "micro": micro, "modelled_overhead": model / off,
            "hang": hang}


def render(r: dict[str, Any]) -> str:
    lines = [f"{'measurement':<46} {'value':>14} {'target':>10}",
             f"{'median step, tracing off':<46} {r['median_off_s'] * 1000:>11.2f} ms",
             f"{'median step, tracing on':<46} {r['median_on_s'] * 1000:>11.2f} ms",
             f"{'end-to-end overhead (median of paired on/off)':<46} {r['overhead']:>14.2%} "
             f"{'<= 1%':>10}",
             f"{'paired overheads (min..max)':<46} "
             f"{min(r['pair_overheads']):>+7.1%}..{max(r['pair_overheads']):+.1%}",
             f"{'runs per mode (steps each)':<46} {r['repeats']:>10} ({r['steps']})",
             f"{'spread off (min..max ms)':<46} "
             f"{min(r['step_s']['off']) * 1000:>6.1f}..{max(r['step_s']['off']) * 1000:.1f}",
             f"{'spread on (min..max ms)':<46} "
             f"{min(r['step_s']['on']) * 1000:>6.1f}..{max(r['step_s']['on']) * 1000:.1f}",
             f"{'tracer cost per collective':<46} {r['micro']['collective_us']:>11.2f} us",
             f"{'tracer cost per span':<46} {r['micro']['span_us']:>11.2f} us",
             f"{'tracer cost per step (window bookkeeping)':<46} "
             f"{r['micro']['step_us']:>11.2f} us",
             f"{'collectives / spans per step (example)':<46} "
             f"{r['calls_per_step']:>6.1f} / {r['spans_per_step']:.1f}",
             f"{'modelled overhead (costs x calls / step)':<46} "
             f"{r['modelled_overhead']:>14.3%} {'<= 1%':>10}"]
    h = r["hang"]
    lines += [f"{'hang timeout':<46} {h['hang_timeout_s']:>12.1f} s",
              f"{'last step of the stopped rank -> hang declared':<46} "
              f"{h['declared_after_last_step_s'] or float('nan'):>12.1f} s",
              f"{'hang declared -> culprit named':<46} {h['named_after_declared_s']:>12.2f} s "
              f"{'<= 10 s':>10}",
              f"culprit: rank {h['culprit'].get('rank')} on {h['culprit'].get('node')} "
              f"({h['culprit'].get('process')}): {h['culprit'].get('reason')}"]
    met = r["overhead"] <= 0.01
    lines.append(f"[{'met' if met else 'NOT MET'}] end-to-end tracing overhead <= 1%: "
                 f"{r['overhead']:.2%} (modelled {r['modelled_overhead']:.3%})")
    lines.append(f"[{'met' if h['named_after_declared_s'] <= 10 else 'NOT MET'}] culprit named "
                 f"within 10 s after the hang timeout: {h['named_after_declared_s']:.2f} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=8, help="runs per mode (default 8)")
    p.add_argument("--steps", type=int, default=300, help="steps per run (default 300)")
    p.add_argument("--hang-timeout", type=float, default=10.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.steps < 20:
        p.error("--repeats >= 1 and --steps >= 20")
    try:
        import torch  # noqa: F401
    except ImportError:
        print("bench_tracing: needs torch (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    result = measure(args.repeats, args.steps, args.hang_timeout)
    print(json.dumps(result, indent=1) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
