"""Benchmark: how long `trainguard` takes to start (issue #28).

Targets: `trainguard --help` under 0.3 s, `trainguard logs classify` of a small file under
0.5 s. Each case runs as N fresh processes (after one warm-up run that compiles the bytecode);
the table gives the median wall time, the median CPU time (user + system: steadier on a busy
machine) and wall / target. Baselines: the interpreter alone, the floor any typer command with
rich help pays (importing typer's rich help module), and importing every command module, which
is what each start cost before the commands were imported on demand.

    python benchmarks/bench_startup.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

SMALL_LOG = """\
Nov 18 03:12:01 node7 kernel: [12345.678901] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
Nov 18 03:12:02 node7 kernel: [12346.000001] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
Nov 18 03:12:05 node7 kernel: [12349.100000] eth0: link up, 100Gbps
"""  # noqa: E501  (kernel log lines are long)


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    target_s: float | None = None


@dataclass(frozen=True)
class Row:
    name: str
    wall_s: float
    cpu_s: float
    target_s: float | None

    @property
    def ratio(self) -> float | None:
        return None if self.target_s is None else self.wall_s / self.target_s

    @property
    def verdict(self) -> str:
        if self.target_s is None:
            return "baseline"
        return "meets target" if self.wall_s <= self.target_s else "over target"


def _command_modules() -> list[str]:
    sys.path.insert(0, str(SRC))
    from trainguard.cli.commands import COMMANDS

    return sorted({e.target.partition(":")[0] for e in COMMANDS})


def cases(small_log: Path) -> list[Case]:
    py = sys.executable
    cli = (py, "-m", "trainguard.cli.main")
    eager = "import " + ", ".join(_command_modules())
    return [
        Case("python -c pass", (py, "-c", "pass")),
        Case("import typer.rich_utils (typer's help floor)", (py, "-c", "import typer.rich_utils")),
        Case("import every command module (the old start-up)", (py, "-c", eager)),
        Case("trainguard --help", (*cli, "--help"), 0.3),
        Case("trainguard logs classify <small file>",
             (*cli, "logs", "classify", str(small_log)), 0.5),
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ, COLUMNS="100")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return env


def _once(argv: tuple[str, ...], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run (the CPU of the child, from wait4)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(case: Case, repeats: int, env: dict[str, str]) -> Row:
    _once(case.argv, env)  # warm-up: bytecode, page cache
    runs = [_once(case.argv, env) for _ in range(repeats)]
    return summarize(case, runs)


def summarize(case: Case, runs: list[tuple[float, float]]) -> Row:
    """The medians of (wall, CPU) samples."""
    return Row(case.name, statistics.median(w for w, _ in runs),
               statistics.median(c for _, c in runs), case.target_s)


def table(rows: list[Row]) -> str:
    width = max(len(r.name) for r in rows)
    head = f"{'case':<{width}}  {'wall s':>7}  {'CPU s':>6}  {'target':>6}  {'ratio':>5}"
    lines = [f"{head}  verdict"]
    for r in rows:
        target = "" if r.target_s is None else f"{r.target_s:.2f}"
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}"
        lines.append(f"{r.name:<{width}}  {r.wall_s:7.3f}  {r.cpu_s:6.3f}  {target:>6}  "
                     f"{ratio:>5}  {r.verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="runs per case (median)")
    args = parser.parse_args(argv)
    env = _env()
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "node7-kern.log"
        small.write_text(SMALL_LOG)
        rows = [measure(c, args.repeats, env) for c in cases(small)]
    print(f"{args.repeats} fresh processes per case, medians; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
