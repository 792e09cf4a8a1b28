"""Benchmark: the controller at scale (issue 26, section 5), part of ``make bench``.

A controller process runs what ``trainguard run`` runs for an attempt with agents: an
:class:`~trainguard.agent.hub.AgentHub` and a real :class:`~trainguard.agent.remote.RemoteAttempt`
(every SDK record and output line mirrored into the run directory), polled at the supervisor's
default 50 ms. ``--agents`` simulated agents (default 1,024), each a host of ``--ranks`` ranks
(default 8), send what a real agent sends for ranks that use the SDK:

- per rank, an SDK ``step`` record every ``DEFAULT_HEARTBEAT_S`` (0.5 s) and a ``trace`` record
  every trace window (5 s);
- per host, one output line per second (local rank 0), ``procstat`` every second and the agent
  heartbeat every second; what one look finds goes out in one write, as the real agent does.

The simulated agents are asyncio tasks in one load process that talk through the project's own
client (:mod:`trainguard.agent.client`: ``dial``, ``Outbox``, ``Connection.send``/``feed``), so
the benchmark follows the wire as it changes; like real agents they redial with a backoff when
the hub refuses or drops them. Two phases, each measured over ``--window`` seconds:

1. **steady**: the agents alone;
2. **flood**: the agents plus a flood process from 8 other loopback addresses, holding
   ``--flood-idle`` (4,000) idle unauthenticated connections (reopened as the hub drops them: more
   than the hub admits before authentication) and opening
   ``--flood-rate`` connections per second, half sending garbage, half a hello with a wrong
   secret (``dial`` with another secret).

Per phase: **event latency**, from an SDK record's send (the agent stamps it just before the
write) to the moment the supervisor's poll takes it from the hub (local rank 0 of every agent,
p50/p99/max), and to its arrival in the hub's inbox; the controller's **CPU** in cores (CPU
seconds per wall second, ``/proc/PID/stat``); its **RSS** (``VmRSS`` every second: first, peak,
last); **redial**: halfway through each window 16 agents drop their connection and dial again,
timed until they are back (what a network blip costs an agent, flooded or not). At the end every
SDK record sent must be in the run directory, and the controller's log must hold no traceback.
Targets: p99 < 200 ms, < 1 core, RSS bounded (growth over each window's second half < 16 MiB).

On a machine shared with other work the controller gets only its share of the CPUs (the
scheduler's autogroups share them between sessions): the benchmark first measures what a
CPU-bound process gets, and reports the controller's CPU per event, which says what one core of
its own would carry. ``BENCH_SCALE_DUMP=PATH`` writes every timed record to study a tail.

    python benchmarks/bench_controller_scale.py                 # about 2-3 minutes
    python benchmarks/bench_controller_scale.py --agents 64 --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_agents import Dist, cpu_ticks, dist, to_json  # noqa: E402

LATENCY_TARGET_MS = 200.0
CPU_TARGET_CORES = 1.0
RSS_GROWTH_MIB = 16.0
"""Most the controller's RSS may grow over the second half of a window ("bounded")."""
POLL_S = 0.05
"""The supervisor's default poll interval (``RunSpec.poll_interval_s``)."""
SDK_PERIOD_S = 0.5
"""``trainguard.train.env.DEFAULT_HEARTBEAT_S``: one step record per rank per period."""
TRACE_EVERY = 10
"""A ``trace`` record every 10 periods (the SDK's default 5 s trace window)."""
SECRET_ENV, SESSION_ENV = "BENCH_SCALE_SECRET", "BENCH_SCALE_SESSION"
REDIAL = 16
"""Agents that drop their connection and dial again halfway through each window."""
FLOOD_ADDRESSES = tuple(f"127.0.0.{i}" for i in range(2, 10))


class BenchError(Exception):
    """A run did not do what the benchmark needs."""


# ---- pure ----------------------------------------------------------------------------------------


def node_names(n: int) -> tuple[str, ...]:
    return tuple(f"sim{i:04d}" for i in range(n))


def step_record(now: float, rank: int, step: int) -> bytes:
    """One SDK step line, stamped with the send time (what :func:`stamp` reads back)."""
    return (json.dumps({"t": now, "rank": rank, "kind": "step", "step": step, "loss": 2.31,
                        "step_s": 0.5}) + "\n").encode()


def trace_record(now: float, rank: int, step: int) -> bytes:
    """A trace-window line of a realistic size (``trainguard.trace.model.TraceWindow``)."""
    rec = {"t": now, "rank": rank, "kind": "trace", "start": now - 5.0, "end": now,
           "steps": 10, "first_step": step - 9, "last_step": step, "step_s": 4.98,
           "collective_s": 1.2, "spans": {"data": [10, 0.05, 0], "forward": [10, 1.5, 0],
                                          "backward": [10, 2.9, 0]},
           "collectives": {"all_reduce": [20, 1.18, 2408448], "barrier": [1, 0.02, 0]}}
    return (json.dumps(rec) + "\n").encode()


def stamp(data: bytes) -> float | None:
    """The send time of the first line of an SDK ``data`` chunk; None if it has none."""
    try:
        value = json.loads(data.split(b"\n", 1)[0])["t"]
    except (ValueError, KeyError, TypeError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def nominal_events_per_s(agents: int, ranks: int) -> float:
    """Messages per second the simulated agents should send at the SDK's rate (heartbeats,
    which the hub does not queue, not counted): per rank a step record per period and a trace
    record per trace window, per host an output line and a ``procstat`` per second."""
    per_rank = (1 + 1 / TRACE_EVERY) / SDK_PERIOD_S
    return agents * (ranks * per_rank + 2.0)


def vm_rss_kib(status_text: str) -> int:
    """Resident set size (``VmRSS``, KiB) of a ``/proc/PID/status`` text."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError("no VmRSS line")


@dataclass(frozen=True, slots=True)
class Phase:
    """One measured window of the controller."""

    name: str
    agents: int
    connected: int
    events_per_s: float
    """Messages the hub handed to the supervisor per second (SDK, output, procstat...)."""
    taken: Dist | None
    """Send to the supervisor's ``take()``, seconds."""
    arrived: Dist | None
    """Send to the hub's inbox, seconds."""
    cpu_cores: float
    rss_mib: tuple[float, ...]
    """``VmRSS`` every second over the window."""
    nominal_per_s: float = 0.0
    """What the agents should have sent per second (:func:`nominal_events_per_s`)."""
    redial: Dist | None = None
    """Seconds until an agent that dropped its connection halfway was connected again."""
    detail: str = ""

    @property
    def cpu_us_per_event(self) -> float | None:
        """Controller CPU per message handed to the supervisor, microseconds."""
        return self.cpu_cores / self.events_per_s * 1e6 if self.events_per_s > 0 else None

    @property
    def rss_growth_mib(self) -> float:
        """Growth over the window's second half (0 with fewer than 2 samples)."""
        if len(self.rss_mib) < 2:
            return 0.0
        half = self.rss_mib[len(self.rss_mib) // 2:]
        return max(0.0, half[-1] - half[0])


def verdicts(phases: Sequence[Phase]) -> list[tuple[bool, str]]:
    out = []
    for p in phases:
        p99 = None if p.taken is None else p.taken.p99 * 1e3
        out.append((p99 is not None and p99 < LATENCY_TARGET_MS and p.connected == p.agents,
                    f"{p.name}: p99 event latency < {LATENCY_TARGET_MS:g} ms"
                    + ("" if p99 is None else f" ({p99:.0f} ms)")
                    + ("" if p.connected == p.agents
                       else f", only {p.connected}/{p.agents} agents connected")))
        out.append((p.cpu_cores < CPU_TARGET_CORES,
                    f"{p.name}: controller CPU < {CPU_TARGET_CORES:g} core "
                    f"({p.cpu_cores:.2f})"))
        out.append((p.rss_growth_mib < RSS_GROWTH_MIB,
                    f"{p.name}: RSS bounded (+{p.rss_growth_mib:.1f} MiB over the second half, "
                    f"limit {RSS_GROWTH_MIB:g})"))
    return out


def render(phases: Sequence[Phase], ranks: int) -> str:
    def ms(d: Dist | None, attr: str) -> str:
        return "-" if d is None else f"{getattr(d, attr) * 1e3:.0f}"

    head = ("phase", "agents", "ranks", "events/s (nominal)", "p50 ms", "p99 ms", "max ms",
            "inbox p99", "CPU cores", "us/event", "RSS MiB first/peak/last", "redial s p50/max")
    rows = [head]
    for p in phases:
        rss = "/".join(f"{v:.0f}" for v in (p.rss_mib[0], max(p.rss_mib), p.rss_mib[-1])) \
            if p.rss_mib else "-"
        us = p.cpu_us_per_event
        rows.append((p.name, f"{p.connected}/{p.agents}", str(p.agents * ranks),
                     f"{p.events_per_s:.0f} ({p.nominal_per_s:.0f})", ms(p.taken, "p50"),
                     ms(p.taken, "p99"), ms(p.taken, "max"), ms(p.arrived, "p99"),
                     f"{p.cpu_cores:.2f}", "-" if us is None else f"{us:.0f}", rss,
                     "-" if p.redial is None
                     else f"{p.redial.p50:.1f}/{p.redial.max:.1f} (n={p.redial.n})"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                       for i, (v, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    lines += [f"  {p.name}: {p.detail}" for p in phases if p.detail]
    return "\n".join(lines)


# ---- orchestration -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Config:
    agents: int
    ranks: int
    window_s: float
    warmup_s: float
    flood: bool
    flood_idle: int
    flood_rate: float
    controller_nice: int
    json: bool


def parse_args(argv: Sequence[str] | None) -> Config:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--agents", type=int, default=1024, help="simulated agents (hosts)")
    ap.add_argument("--ranks", type=int, default=8, help="ranks per simulated host")
    ap.add_argument("--window", type=float, default=30.0, help="seconds measured per phase")
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds after all agents connected before measuring")
    ap.add_argument("--no-flood", action="store_true", help="skip the flood phase")
    ap.add_argument("--flood-idle", type=int, default=4000,
                    help="idle unauthenticated connections held open (more than the hub's "
                    "pre-auth cap, 2,048 for 1,024 agents)")
    ap.add_argument("--flood-rate", type=float, default=200.0,
                    help="garbage / wrong-secret connections per second")
    ap.add_argument("--controller-nice", type=int, default=0,
                    help="run the controller at this nice value (negative: root; for a shared "
                    "machine where other work would starve it)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    a = ap.parse_args(argv)
    if a.agents < 1 or a.ranks < 1 or a.window <= 0 or a.warmup < 0 or a.flood_idle < 0 \
            or a.flood_rate < 0:
        ap.error("--agents, --ranks >= 1, --window > 0, --warmup/--flood-* >= 0")
    return Config(a.agents, a.ranks, a.window, a.warmup, not a.no_flood, a.flood_idle,
                  a.flood_rate, a.controller_nice, a.json)


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class _Controller:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin, self.stdout = proc.stdin, proc.stdout

    def line(self, prefix: str) -> str:
        while True:
            text = self.stdout.readline()
            if not text:
                raise BenchError(f"the controller exited (status {self.proc.wait()})")
            if text.startswith(prefix):
                return text[len(prefix):].strip()

    def say(self, text: str) -> None:
        self.stdin.write(text + "\n")
        self.stdin.flush()

    def count(self) -> tuple[int, int]:
        self.say("count")
        connected, taken = self.line("COUNT ").split()
        return int(connected), int(taken)

    def ticks(self) -> int:
        return cpu_ticks(Path(f"/proc/{self.proc.pid}/stat").read_text())

    def rss_mib(self) -> float:
        return vm_rss_kib(Path(f"/proc/{self.proc.pid}/status").read_text()) / 1024


def _spawn(role: str, args: Sequence[str], env: dict[str, str], stderr: Any = None,
           nice: int = 0) -> subprocess.Popen[str]:
    """A benchmark process; ``nice`` is applied before it starts any thread (all inherit it)."""
    return subprocess.Popen([sys.executable, "-m", "benchmarks.bench_controller_scale_sim", role,
                             *args], cwd=ROOT, env=env, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr, start_new_session=True,
                            preexec_fn=(lambda: os.nice(nice)) if nice else None)


def _measure(ctl: _Controller, load: subprocess.Popen[str], name: str, cfg: Config
             ) -> dict[str, Any]:
    """One window: CPU, RSS every second, what the hub handed over; halfway through,
    :data:`REDIAL` agents drop their connection and dial again (timed by the load process)."""
    ctl.say(f"phase {name}")
    c0, t0 = ctl.ticks(), time.monotonic()
    connected, taken0 = ctl.count()  # before anyone redials
    rss = [ctl.rss_mib()]
    end = t0 + cfg.window_s
    redial = t0 + cfg.window_s / 2
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(1.0, left))
        rss.append(ctl.rss_mib())
        if time.monotonic() >= redial:
            redial = math.inf
            assert load.stdin is not None
            load.stdin.write(f"redial {min(REDIAL, cfg.agents)} {name}\n")
            load.stdin.flush()
    c1, t1 = ctl.ticks(), time.monotonic()
    _, taken1 = ctl.count()
    ctl.say("phase")
    hz = os.sysconf("SC_CLK_TCK")
    return {"name": name, "connected": connected, "events_per_s": (taken1 - taken0) / (t1 - t0),
            "cpu_cores": (c1 - c0) / hz / (t1 - t0), "rss_mib": tuple(rss)}


def cpu_share(seconds: float = 2.0) -> float:
    """What a CPU-bound process in a session of its own gets now, in cores: on a machine shared
    with other work (the scheduler's autogroups share the CPUs between sessions) this is about
    what the controller can get, whatever it needs."""
    code = ("import time\nt, c = time.monotonic(), time.process_time()\n"
            f"while time.monotonic() - t < {seconds}: pass\n"
            "print((time.process_time() - c) / (time.monotonic() - t))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         start_new_session=True, check=True, timeout=seconds + 30)
    return float(out.stdout)


def _finish(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    """Close a load or flood process's stdin (its signal to stop); its JSON tally."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    out = proc.stdout.read()
    if proc.wait(timeout=timeout_s) != 0 or not out.strip():
        raise BenchError(f"a benchmark process failed (status {proc.returncode})")
    tally: dict[str, Any] = json.loads(out)
    return tally


def _wait_connected(ctl: _Controller, load: subprocess.Popen[str], agents: int,
                    limit_s: float) -> float:
    t0 = time.monotonic()
    while (connected := ctl.count()[0]) < agents:
        if load.poll() is not None:
            raise BenchError(f"the load process exited (status {load.returncode})")
        if time.monotonic() - t0 > limit_s:
            raise BenchError(f"only {connected} of {agents} agents connected in {limit_s:g} s")
        time.sleep(0.5)
    return time.monotonic() - t0


def _phases(cfg: Config, env: dict[str, str], run_dir: Path, log: Any,
            procs: list[subprocess.Popen[str]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Start the processes, measure the phases, stop them; raw figures and tallies."""
    ctl = _Controller(_spawn("controller", ["--agents", str(cfg.agents), "--ranks",
                                            str(cfg.ranks), "--run-dir", str(run_dir)], env, log,
                             cfg.controller_nice))
    procs.append(ctl.proc)
    host, port = ctl.line("LISTEN ").split()
    ramp = min(10.0, cfg.agents / 200)
    load = _spawn("load", ["--host", host, "--port", port, "--agents", str(cfg.agents),
                           "--ranks", str(cfg.ranks), "--ramp", str(ramp)], env)
    procs.append(load)
    connect_s = _wait_connected(ctl, load, cfg.agents, 120 + ramp)
    time.sleep(cfg.warmup_s)
    raw = [_measure(ctl, load, "steady", cfg)]
    flood: dict[str, Any] = {}
    if cfg.flood:
        fp = _spawn("flood", ["--host", host, "--port", port, "--idle", str(cfg.flood_idle),
                              "--rate", str(cfg.flood_rate)], env)
        procs.append(fp)
        time.sleep(2.0)
        raw.append(_measure(ctl, load, "flood", cfg))
        flood = _finish(fp, 30)
    tally = _finish(load, 60)
    time.sleep(2 * POLL_S + 0.5)  # the last records reach the mirror
    ctl.stdin.close()
    result = json.loads(ctl.line("RESULT "))
    ctl.proc.wait(timeout=30)
    return raw, {"connect_s": connect_s, "tally": tally, "flood": flood, "result": result}


def run(cfg: Config) -> tuple[list[Phase], dict[str, Any]]:
    """Both phases; raises :class:`BenchError` when a run does not work."""
    raise_fd_limit()
    share = cpu_share()
    secret, session = uuid.uuid4().hex + uuid.uuid4().hex, uuid.uuid4().hex[:16]
    env = {**os.environ, SECRET_ENV: secret, SESSION_ENV: session,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run_dir = Path(tempfile.mkdtemp(prefix="bench-ctl-scale-"))
    procs: list[subprocess.Popen[str]] = []
    # the controller's log: counted (a flood must not become a log flood), not shown
    with tempfile.TemporaryFile("w+") as log:
        try:
            raw, got = _phases(cfg, env, run_dir, log, procs)
            mirrored = sum(len(p.read_bytes().splitlines())
                           for p in run_dir.glob("*/rank*.jsonl"))
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            shutil.rmtree(run_dir, ignore_errors=True)
        log.seek(0)
        log_lines = log.read().splitlines()
    result, tally, flood = got["result"], got["tally"], got["flood"]
    if any("Traceback" in line for line in log_lines):
        raise BenchError("the controller logged a traceback: " + " | ".join(log_lines[-5:]))
    if mirrored != tally["sdk"]:
        raise BenchError(f"the controller mirrored {mirrored} of {tally['sdk']} SDK records")
    if result["lost"]:
        raise BenchError(f"the controller lost agents: {result['lost']}")
    phases = []
    for r in raw:
        name = r["name"]
        t, a = result["taken"].get(name), result["arrived"].get(name)
        detail = "" if name != "flood" else (
            f"{flood.get('idle_opened', 0)} idle connections opened, {flood.get('garbage', 0)} "
            f"garbage, {flood.get('wrong_secret', 0)} wrong-secret refused; hub refused "
            f"{result['refused']}, dropped {result['rejected']}")
        phases.append(Phase(name, cfg.agents, r["connected"], r["events_per_s"],
                            None if t is None else Dist(**t), None if a is None else Dist(**a),
                            r["cpu_cores"], r["rss_mib"],
                            nominal_events_per_s(cfg.agents, cfg.ranks),
                            dist(tally.get("redial_s", {}).get(name, [])), detail))
    extra = {"connect_s": round(got["connect_s"], 1), "sdk_records": tally["sdk"],
             "mirrored": mirrored, "reconnects": tally["reconnects"],
             "refused_dials": tally["refusals"], "controller_log_lines": len(log_lines),
             "flood": flood, "load_avg": os.getloadavg(), "cpu_share": round(share, 2),
             "controller_nice": cfg.controller_nice}
    return phases, extra


def main(argv: Sequence[str] | None = None) -> int:
    """0 when every target is met, 1 when one is not, 2 when a run failed."""
    cfg = parse_args(argv)
    t0 = time.monotonic()
    try:
        phases, extra = run(cfg)
    except BenchError as exc:
        print(f"bench_controller_scale: {exc}", file=sys.stderr)
        return 2
    checks = verdicts(phases)
    if cfg.json:
        print(json.dumps({"phases": to_json(phases), **extra,
                          "verdicts": [("PASS " if ok else "FAIL ") + t for ok, t in checks],
                          "wall_s": round(time.monotonic() - t0, 1)}, indent=2))
    else:
        print(f"-- controller with {cfg.agents} simulated agents x {cfg.ranks} ranks "
              f"(SDK step every {SDK_PERIOD_S:g} s, trace every {SDK_PERIOD_S * TRACE_EVERY:g} "
              f"s, output + procstat + heartbeat every 1 s; supervisor poll {POLL_S * 1e3:.0f} "
              "ms" + (f"; controller at nice {cfg.controller_nice}" if cfg.controller_nice
                      else "") + ")")
        print(render(phases, cfg.ranks))
        print(f"  all {cfg.agents} connected in {extra['connect_s']} s; "
              f"{extra['mirrored']} of {extra['sdk_records']} SDK records mirrored; "
              f"{extra['reconnects']} reconnects, {extra['refused_dials']} refused dials; "
              f"controller log: {extra['controller_log_lines']} lines")
        print(f"  machine: {os.cpu_count()} CPUs, load average "
              + " ".join(f"{v:.1f}" for v in extra["load_avg"])
              + f"; a CPU-bound process got {extra['cpu_share']:.2f} cores before the run")
        for ph in phases:
            us = ph.cpu_us_per_event
            if us is not None and ph.cpu_cores >= 0.1:  # else fixed costs dominate
                print(f"  {ph.name}: {us:.0f} us of controller CPU per event: one core would "
                      f"carry about {1e6 / us:,.0f} events/s")
        for ok, text in checks:
            print(("PASS  " if ok else "FAIL  ") + text)
        print(f"wall time {time.monotonic() - t0:.0f} s")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
