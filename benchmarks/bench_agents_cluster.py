"""The cluster half of ``bench_agents.py``: recovery against torchrun, rank-to-controller
latency and the agent's CPU, on a namespaced :class:`~trainguard.devcluster.HostCluster`.

Every process started here is killed by pid (or process group) on the way out, failures
included; processes left inside a host (torchrun's workers outlive a killed torchrun) are found
by their command line among that host's processes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from benchmarks.bench_agents import (
    RANK_PATTERN,
    ROOT,
    BenchError,
    Config,
    Dist,
    Recovery,
    Usage,
    cpu_percent,
    cpu_ticks,
    dist,
    first_step_after_resume,
    line_delays,
    progress,
    vm_hwm_kib,
)
from trainguard.agent.backend import AgentBackend
from trainguard.agent.launch_local import LocalLauncher
from trainguard.agent.remote import RemoteAttempt
from trainguard.devcluster import HostCluster, missing_requirements
from trainguard.filetail import FileTail
from trainguard.recover.backend import LaunchPlan, RankLaunch
from trainguard.recover.local import LocalBackend
from trainguard.train.env import DEFAULT_HEARTBEAT_S

sys.path.insert(0, str(ROOT / "tests" / "integration"))
from multihost_job import SCRIPT, Job  # type: ignore[import-not-found]  # a test helper

NODES = ("host1", "host2", "host3")
SUPERVISOR_POLL_S = 0.05
"""The supervisor's default poll interval (``RunSpec.poll_interval_s``)."""
LATENCY_PERIOD_S = 0.02
LATENCY_POLL_S = 0.01
LATENCY_SKIP = 25
"""Lines of each kind left out at the start (the agent's first connection)."""

RANK_PROGRAM = """
import json, os, sys, time
mode, period = sys.argv[1], float(sys.argv[2])
rank = int(os.environ.get("RANK", "0"))
events = open(os.environ["TRAINGUARD_EVENTS"], "a", buffering=1)
every = max(1, round(1.0 / period))
start, k = time.monotonic(), 0
while True:
    k += 1
    rec = {"t": time.time(), "rank": rank, "kind": "step", "step": k, "loss": 1.0,
           "step_s": period}
    if mode == "latency":
        print(f"t {time.time():.6f}", flush=True)
    elif k % every == 0:
        print(f"step {k} alive", flush=True)
    events.write(json.dumps(rec) + "\\n")
    time.sleep(max(0.0, start + k * period - time.monotonic()))
"""
"""A rank without torch: an SDK-style step record every ``period`` to $TRAINGUARD_EVENTS;
``latency``: also a ``t <time.time()>`` output line each time, else one output line a second."""


@contextlib.contextmanager
def cluster() -> Iterator[HostCluster]:
    """4 namespaced hosts (host4 is the trainguard run's spare); the working directory is the
    repository meanwhile (the enter script runs commands in the caller's directory, which must
    exist inside the hosts: their /tmp is private)."""
    if os.geteuid() != 0:
        raise BenchError("the namespaced cluster needs root")
    missing = missing_requirements()
    if missing:
        raise BenchError(f"the namespaced cluster needs: {', '.join(missing)}")
    root = Path(tempfile.mkdtemp(prefix="bench-agents-"))
    old = os.getcwd()
    os.chdir(ROOT)
    try:
        with HostCluster(4, root / "cluster") as c:
            yield c
    finally:
        os.chdir(old)
        shutil.rmtree(root, ignore_errors=True)


def _runs(c: HostCluster, name: str) -> Path:
    path = c.root.parent / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def wait_for(found: Callable[[], bool], timeout_s: float, alive: Callable[[], bool],
             poll_s: float = 0.01) -> float | None:
    """When ``found()`` first held (None: not within ``timeout_s``, or ``alive()`` failed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found():
            return time.time()
        if not alive():
            return time.time() if found() else None
        time.sleep(poll_s)
    return None


def _text(path: Path, offset: int = 0) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _last_lines(text: str, n: int = 3) -> str:
    return " | ".join(line.strip()[:160] for line in text.strip().splitlines()[-n:])


def kill_rank(c: HostCluster, node: str) -> float:
    """SIGKILL ``node``'s training rank from inside the host; when the kill was issued."""
    t = time.time()
    done = c.run(node, ["pkill", "-KILL", "-f", RANK_PATTERN], capture_output=True)
    if done.returncode != 0:
        raise BenchError(f"no rank matching {RANK_PATTERN!r} on {node}")
    return t


def kill_leftovers(c: HostCluster, markers: Sequence[bytes]) -> None:
    for node in c.names:
        for pid in c.processes(node):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if any(m in cmd for m in markers):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


# ---- 1. recovery -------------------------------------------------------------------------------


def recovery(c: HostCluster, cfg: Config) -> list[Recovery]:
    tg: list[float | None] = []
    tr: list[float | None] = []
    tg_notes: list[str] = []
    tr_notes: list[str] = []
    for i in range(cfg.repeats):
        total, note = _trainguard_once(c, cfg, i)
        tg.append(total)
        tg_notes += [f"run {i + 1}: {note}"] if note else []
        progress(f"trainguard #{i + 1}: {_fmt(total)}")
        total, note = _torchrun_once(c, cfg, i)
        tr.append(total)
        tr_notes += [f"run {i + 1}: {note}"] if note else []
        progress(f"torchrun #{i + 1}: {_fmt(total)}")
    return [Recovery("trainguard", tuple(tg), tuple(tg_notes)),
            Recovery("torchrun", tuple(tr), tuple(tr_notes))]


def _fmt(total: float | None) -> str:
    return "not recovered" if total is None else f"{total:.2f} s kill to resumed step"


def _trainguard_once(c: HostCluster, cfg: Config, i: int) -> tuple[float | None, str]:
    job = Job(c, _runs(c, "tg"), f"tg{i}", steps=cfg.steps)
    try:
        try:
            job.wait_for_step(cfg.kill_step, timeout_s=180)
        except AssertionError as exc:
            raise BenchError(f"trainguard run {i + 1} did not reach step {cfg.kill_step}: "
                             f"{exc}") from None
        t_kill = kill_rank(c, "host2")
        mirror = job.run_dir / "attempts" / "1" / "host1" / "rank0.log"
        t_step = wait_for(lambda: first_step_after_resume(_text(mirror)) is not None, 120,
                          lambda: job.proc.poll() is None)
        if t_step is None:
            return None, f"no step after the kill within 120 s ({_last_lines(job.output())})"
        try:
            summary = job.wait(timeout_s=180)
        except AssertionError:
            return t_step - t_kill, "resumed, but the run did not end within 180 s"
        note = "" if summary.get("status") == "succeeded" else f"status {summary.get('status')}"
        return t_step - t_kill, note
    finally:
        job.kill()


def _torchrun_argv(c: HostCluster, cfg: Config, i: int) -> list[str]:
    torchrun = Path(sys.executable).with_name("torchrun")
    return [str(torchrun) if torchrun.exists() else "torchrun", "--nnodes=3",
            "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=host1:{29400 + i}",
            f"--rdzv-id=bench-tr{i}", "--max-restarts=3", str(SCRIPT), "--steps",
            str(cfg.steps), "--ckpt-dir", str(c.shared / f"ckpt-tr{i}"), "--loss-log",
            str(c.shared / f"loss-tr{i}.txt")]


def _torchrun_once(c: HostCluster, cfg: Config, i: int) -> tuple[float | None, str]:
    argv = _torchrun_argv(c, cfg, i)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRAINGUARD_", "TORCHELASTIC_"))}
    env.update(PYTHONUNBUFFERED="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    runs = _runs(c, "tr")
    outs = {node: runs / f"tr{i}-{node}.out" for node in NODES}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for node in NODES:
            with open(outs[node], "wb") as out:
                procs[node] = c.popen(node, argv, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env, cwd=ROOT,
                                      start_new_session=True)

        def all_alive() -> bool:
            return all(p.poll() is None for p in procs.values())

        marker = f"step {cfg.kill_step} loss"
        if wait_for(lambda: marker in _text(outs["host1"]), 180, all_alive, 0.05) is None:
            raise BenchError(f"torchrun run {i + 1} did not reach step {cfg.kill_step}:\n"
                             f"{_text(outs['host1'])[-2000:]}")
        offset = outs["host1"].stat().st_size
        t_kill = kill_rank(c, "host2")
        t_step = wait_for(lambda: first_step_after_resume(_text(outs["host1"], offset))
                          is not None, 90, lambda: procs["host1"].poll() is None)
        if t_step is None:
            return None, ("no step after the kill within 90 s "
                          f"({_last_lines(_text(outs['host1'], offset))})")
        wait_for(lambda: not any(p.poll() is None for p in procs.values()), 60, lambda: True,
                 0.1)
        codes = {n: p.poll() for n, p in procs.items()}
        note = "" if all(v == 0 for v in codes.values()) else f"exit statuses {codes}"
        return t_step - t_kill, note
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        kill_leftovers(c, [b"torchrun", SCRIPT.name.encode()])


# ---- 2 and 3. a real agent on host1 ------------------------------------------------------------


@contextlib.contextmanager
def agent_attempt(c: HostCluster, run_dir: Path, args: Sequence[str], nranks: int
                  ) -> Iterator[tuple[RemoteAttempt, tuple[RankLaunch, ...]]]:
    """``nranks`` ranks of :data:`RANK_PROGRAM` on host1, through a real agent entered into it;
    stopped, and the agent gone, on the way out."""
    backend = AgentBackend(LocalBackend(), LocalLauncher(f"{c.enter_script} {{node}}"),
                           listen=c.bridge_addr, advertise=c.bridge_addr)
    where = run_dir / "attempts" / "0" / "host1"
    ranks = tuple(RankLaunch(r, r, "host1", 0, {
        "RANK": str(r), "TRAINGUARD_EVENTS": str(where / f"rank{r}.events.jsonl")},
        where / f"rank{r}.log") for r in range(nranks))
    plan = LaunchPlan(0, (sys.executable, "-c", RANK_PROGRAM, *args), ("host1",), ranks, ROOT)
    try:
        attempt = backend.launch(plan)
        try:
            _wait_started(attempt, nranks)
            yield attempt, ranks
        finally:
            attempt.stop(2.0)
            attempt.close()
    finally:
        backend.close()


def _wait_started(attempt: RemoteAttempt, nranks: int) -> None:
    deadline = time.monotonic() + 30
    while len(attempt.pids_seen) < nranks:
        if attempt.poll() or attempt.lost or attempt.errors or time.monotonic() > deadline:
            raise BenchError(f"the agent did not start {nranks} ranks: "
                             f"{attempt.errors or attempt.lost or 'timeout'}")
        time.sleep(0.02)


def _check(attempt: RemoteAttempt) -> None:
    exits = attempt.poll()
    if exits or attempt.lost:
        raise BenchError(f"a rank or the agent ended early: {exits or attempt.lost}")


def latency(c: HostCluster, cfg: Config) -> dict[str, Dist | None]:
    """Rank line to the controller's mirror, per kind of line (see the module docstring)."""
    with agent_attempt(c, _runs(c, "latency"), ("latency", str(LATENCY_PERIOD_S)), 1) \
            as (attempt, ranks):
        rl = ranks[0]
        tails = {"output line": FileTail(rl.output),
                 "SDK event": FileTail(Path(rl.env["TRAINGUARD_EVENTS"]))}
        samples: dict[str, list[float]] = {name: [] for name in tails}
        want = cfg.latency_events + LATENCY_SKIP
        deadline = time.monotonic() + want * LATENCY_PERIOD_S * 3 + 30
        tick = time.monotonic()
        while min(len(s) for s in samples.values()) < want:
            if time.monotonic() > deadline:
                raise BenchError(f"fewer than {want} lines arrived in time")
            _check(attempt)
            now = time.time()
            for name, tail in tails.items():
                data, _ = tail.read()
                samples[name] += line_delays(data, now, "t")
            tick += LATENCY_POLL_S
            time.sleep(max(0.0, tick - time.monotonic()))
    return {f"{name} (rank to controller)": dist(s[LATENCY_SKIP:])
            for name, s in samples.items()}


def agent_pid(c: HostCluster, node: str) -> int:
    """The root-namespace pid of ``node``'s agent."""
    for _ in range(200):
        for pid in c.processes(node):
            with contextlib.suppress(OSError):
                if b"trainguard.agent" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        time.sleep(0.05)
    raise BenchError(f"no agent process in {node}")


def _drive(attempt: RemoteAttempt, seconds: float) -> None:
    """Follow the attempt as the supervisor does, for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _check(attempt)
        time.sleep(SUPERVISOR_POLL_S)


def agent_cpu(c: HostCluster, cfg: Config, nranks: int = 8) -> Usage:
    """The agent's CPU with ``nranks`` heartbeating ranks (see the module docstring)."""
    run_dir = _runs(c, "cpu")
    with agent_attempt(c, run_dir, ("heartbeat", str(DEFAULT_HEARTBEAT_S)), nranks) \
            as (attempt, ranks):
        pid = agent_pid(c, "host1")
        _drive(attempt, cfg.warmup_s)
        hz = os.sysconf("SC_CLK_TCK")
        t0, c0 = time.monotonic(), cpu_ticks(Path(f"/proc/{pid}/stat").read_text())
        n0 = _lines([Path(rl.env["TRAINGUARD_EVENTS"]) for rl in ranks])
        _drive(attempt, cfg.window_s)
        c1, t1 = cpu_ticks(Path(f"/proc/{pid}/stat").read_text()), time.monotonic()
        hwm = vm_hwm_kib(Path(f"/proc/{pid}/status").read_text())
        n1 = _lines([Path(rl.env["TRAINGUARD_EVENTS"]) for rl in ranks])
    expected = nranks * (t1 - t0) / DEFAULT_HEARTBEAT_S
    return Usage(f"agent ({nranks} ranks, heartbeat every {DEFAULT_HEARTBEAT_S:g} s)",
                 cpu_percent(c1 - c0, t1 - t0, hz), t1 - t0, hwm / 1024,
                 f"{n1 - n0} SDK records mirrored in the window, about {expected:.0f} sent")


def _lines(paths: Sequence[Path]) -> int:
    return sum(_text(p).count("\n") for p in paths)
