"""Benchmark: fleet history import + analysis, and the planning model against the replay (#29).

Targets (issue #29):
- `trainguard history import` + `trainguard fleet` on a year of fault events of a few hundred
  nodes: under 5 s, end to end (two fresh processes, as an operator runs them);
- the planning model against the trace-driven replay, for job sizes 8 to 256 nodes: expected
  ETTR within 2 percentage points and the spares needed within one node, where the model's
  assumptions hold. Where they do not (bursts, lemons), the replay must say so and the answer
  must come from it: those rows are judged on that, not on the gap.

Cases: synthetic years from benchmarks/fleet_synth.py (independent nodes; with lemon nodes; with
bursts of correlated faults), and the real InfiniteHBD trace when ``TRAINGUARD_FLEET_TRACE``
names a local copy of its fault_trace.json (400 nodes, relative days; its last event is at day
348.98, so the window ends at 349).

    python benchmarks/bench_fleet.py [--nodes 400] [--days 365] [--replays 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 5.0
ETTR_PP = 2.0
SPARES = 1
SIZES = "8,16,32,64,128,256"
MAPPING = ROOT / "examples" / "fleet" / "infinitehbd-map.toml"


@dataclass(frozen=True)
class Case:
    name: str
    trace: Path
    fleet_size: int
    import_args: tuple[str, ...]


@dataclass(frozen=True)
class Timing:
    case: str
    faults: int
    import_s: float
    fleet_s: float

    @property
    def total_s(self) -> float:
        return self.import_s + self.fleet_s

    @property
    def ratio(self) -> float:
        return self.total_s / TARGET_S


@dataclass(frozen=True)
class Agreement:
    case: str
    nodes: int
    spares_model: int | None
    spares_replay: int | None
    ettr_model: float
    ettr_replay: float
    answer_from: str
    why: str

    @property
    def gap_pp(self) -> float:
        return 100.0 * (self.ettr_model - self.ettr_replay)

    @property
    def spares_gap(self) -> int | None:
        if self.spares_model is None or self.spares_replay is None:
            return None
        return abs(self.spares_model - self.spares_replay)

    @property
    def verdict(self) -> str:
        """'agrees' within both targets; else whether the replay flagged it and answered."""
        close = abs(self.gap_pp) <= ETTR_PP and self.spares_gap is not None \
            and self.spares_gap <= SPARES
        if close:
            return "agrees"
        return "replay answers" if self.answer_from == "replay" else "MISSES"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainguard.cli.main", *args]


def _run(argv: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(argv)}\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def synth(out: Path, *, nodes: int, days: int, seed: int, extra: tuple[str, ...] = ()) -> Path:
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fleet_synth.py"),
                    "--nodes", str(nodes), "--days", str(days), "--seed", str(seed),
                    "--out", str(out), *extra], check=True, capture_output=True)
    return out


def measure(case: Case, work: Path, replays: int) -> tuple[Timing, list[Agreement]]:
    db = work / f"{case.name}.db"
    import_s, text = _run(_cli("history", "import", str(case.trace), "--fleet-size",
                               str(case.fleet_size), "--name", case.name, "--db", str(db),
                               "--json", *case.import_args))
    faults = int(json.loads(text)["counts"]["faults"])
    fleet_s, text = _run(_cli("fleet", "--history", case.name, "--db", str(db), "--json",
                              "--job-sizes", SIZES, "--replays", str(replays)))
    doc = json.loads(text)
    rows = [Agreement(case.name, s["nodes"], s["spares_needed"]["model"],
                      s["spares_needed"]["replay"], s["ettr"]["model"], s["ettr"]["replay"],
                      s["answer_from"], s["why"])
            for s in doc["planning"]["sizes"]]
    return Timing(case.name, faults, import_s, fleet_s), rows


def timing_table(rows: list[Timing]) -> str:
    lines = [f"{'case':<10} {'faults':>7} {'import s':>9} {'fleet s':>8} {'total s':>8} "
             f"{'target s':>9} {'x target':>9}  verdict"]
    for r in rows:
        verdict = "meets target" if r.total_s <= TARGET_S else "over target"
        lines.append(f"{r.case:<10} {r.faults:>7} {r.import_s:>9.2f} {r.fleet_s:>8.2f} "
                     f"{r.total_s:>8.2f} {TARGET_S:>9.1f} {r.ratio:>9.2f}  {verdict}")
    return "\n".join(lines)


def agreement_table(rows: list[Agreement]) -> str:
    def spares(x: int | None) -> str:
        return "-" if x is None else str(x)

    lines = [f"{'case':<10} {'N':>4} {'spares m/r':>10} {'ETTR model':>10} {'ETTR replay':>11} "
             f"{'gap pp':>7} {'answer':>7}  verdict (why)"]
    for r in rows:
        lines.append(f"{r.case:<10} {r.nodes:>4} "
                     f"{spares(r.spares_model) + '/' + spares(r.spares_replay):>10} "
                     f"{r.ettr_model:>10.2%} {r.ettr_replay:>11.2%} {r.gap_pp:>7.2f} "
                     f"{r.answer_from:>7}  {r.verdict} ({r.why})")
    return "\n".join(lines)


def cases(work: Path, nodes: int, days: int) -> list[Case]:
    relative = ("--time-unit", "days", "--window-end", str(days), "--map", str(MAPPING))
    found = [
        Case("poisson", synth(work / "poisson.json", nodes=nodes, days=days, seed=1),
             nodes, relative),
        Case("lemons", synth(work / "lemons.json", nodes=nodes, days=days, seed=2,
                             extra=("--lemons", "8")), nodes, relative),
        Case("bursty", synth(work / "bursty.json", nodes=nodes, days=days, seed=3,
                             extra=("--bursts", "12")), nodes, relative),
    ]
    real = os.environ.get("TRAINGUARD_FLEET_TRACE")
    if real:
        found.append(Case("real", Path(real), 400,
                          ("--time-unit", "days", "--origin", "2024-03-30", "--window-end",
                           "349", "--map", str(MAPPING))))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=400)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--replays", type=int, default=8)
    args = parser.parse_args(argv)
    timings: list[Timing] = []
    agreements: list[Agreement] = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        for case in cases(Path(tmp), args.nodes, args.days):
            timing, rows = measure(case, Path(tmp), args.replays)
            timings.append(timing)
            agreements.extend(rows)
    if not os.environ.get("TRAINGUARD_FLEET_TRACE"):
        print("(real trace skipped: set TRAINGUARD_FLEET_TRACE to a local fault_trace.json)")
    print(f"history import + fleet, two fresh processes each (target < {TARGET_S:g} s):")
    print(timing_table(timings))
    print(f"\nplanning model vs trace replay (targets: ETTR within {ETTR_PP:g} pp, spares "
          f"within {SPARES}; where the replay flags the model, it answers):")
    print(agreement_table(agreements))
    missed = [a for a in agreements if a.verdict == "MISSES"]
    slow = [t for t in timings if t.total_s > TARGET_S]
    return 1 if missed or slow else 0


if __name__ == "__main__":
    raise SystemExit(main())
