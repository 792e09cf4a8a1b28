"""The controller half of ``bench_agents.py``: a controller process with N simulated agents.

The controller (``python -m benchmarks.bench_agents_sim controller``) is what ``trainguard run``
runs for an attempt with agents: an :class:`~trainguard.agent.hub.AgentHub` and a real
:class:`~trainguard.agent.remote.RemoteAttempt` (one rank per node, so every SDK record is
mirrored into the run directory as in a real run), polled at the supervisor's default 50 ms.
It runs until its stdin closes. The simulated agents are asyncio clients in the benchmark's own
process: each dials and authenticates like an agent, sends an SDK step record every
``DEFAULT_HEARTBEAT_S`` through an :class:`~trainguard.agent.client.Outbox` (acknowledged by
the controller) and the agent heartbeat every second. Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.bench_agents import (
    ROOT,
    BenchError,
    Config,
    Usage,
    cpu_percent,
    cpu_ticks,
    progress,
    vm_hwm_kib,
)
from trainguard.agent.client import Identity, Outbox, dial
from trainguard.agent.wire import SECRET_ENV, WireError, new_secret, pack
from trainguard.train.env import DEFAULT_HEARTBEAT_S

SESSION_ENV = "BENCH_AGENTS_SESSION"
POLL_S = 0.05
"""The supervisor's default poll interval (``RunSpec.poll_interval_s``)."""
AGENT_HEARTBEAT_S = 1.0
"""``AgentConfig.heartbeat_s``'s default."""


def node_names(n: int) -> tuple[str, ...]:
    return tuple(f"sim{i}" for i in range(n))


# ---- the controller process --------------------------------------------------------------------


class _NoProcs:
    """The agents are not this process's children: nothing to see or close."""

    def exited(self) -> Mapping[str, int]:
        return {}

    def close(self, wait_s: float) -> None:
        return None


def controller_main(nodes: int, run_dir: Path) -> None:
    from trainguard.agent.hub import AgentHub
    from trainguard.agent.remote import RemoteAttempt
    from trainguard.recover.backend import LaunchPlan, RankLaunch

    names = node_names(nodes)
    hub = AgentHub(os.environ[SECRET_ENV], os.environ[SESSION_ENV])
    host, port = hub.start()
    ranks = tuple(RankLaunch(i, 0, n, i, {"TRAINGUARD_EVENTS": str(
        run_dir / n / f"rank{i}.events.jsonl")}, run_dir / n / f"rank{i}.log")
        for i, n in enumerate(names))
    plan = LaunchPlan(0, ("true",), names, ranks, ROOT)
    hub.expect(0, names)
    attempt = RemoteAttempt(plan, hub, _NoProcs(), node_timeout_s=60, connect_timeout_s=60)
    stop = threading.Event()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    print(f"LISTEN {host} {port}", flush=True)
    while not stop.is_set():
        attempt.poll()
        if attempt.lost:
            print(f"LOST {attempt.lost}", flush=True)
        time.sleep(POLL_S)
    attempt.poll()
    hub.close()


# ---- the simulated agents ----------------------------------------------------------------------


async def _agent(i: int, node: str, address: tuple[str, int], secret: bytes, session: str,
                 until: float, sent: list[int]) -> None:
    conn = await dial(*address, Identity("agent", node, session, 0, secret))
    outbox = Outbox()

    async def acks() -> None:
        while data := await conn.reader.read(conn.frames.limit):
            for msg in conn.feed(data):
                if msg.get("t") == "ack" and isinstance(msg.get("seq"), int):
                    outbox.ack(msg["seq"])

    reader = asyncio.create_task(acks())
    beat = pack({"t": "hb"})
    loop = asyncio.get_running_loop()
    # Spread the agents over the period, as real agents started at different times are.
    await asyncio.sleep(DEFAULT_HEARTBEAT_S * i / 64 % DEFAULT_HEARTBEAT_S)
    start, k, next_beat = loop.time(), 0, 0.0
    try:
        while time.time() < until:
            k += 1
            now = time.time()
            rec = {"t": now, "rank": i, "kind": "step", "step": k, "loss": 1.0, "step_s": 0.5}
            conn.send([outbox.add({"t": "sdk", "rank": i,
                                   "data": (json.dumps(rec) + "\n").encode()})])
            sent[i] += 1
            if loop.time() >= next_beat:
                next_beat = loop.time() + AGENT_HEARTBEAT_S
                conn.send([beat])
            await conn.writer.drain()
            await asyncio.sleep(max(0.0, start + k * DEFAULT_HEARTBEAT_S - loop.time()))
    finally:
        reader.cancel()
        conn.writer.close()


async def _load(n: int, address: tuple[str, int], secret: bytes, session: str, pid: int,
                warmup_s: float, window_s: float) -> tuple[float, int, int, list[int]]:
    until = time.time() + warmup_s + window_s + 1.0
    sent = [0] * n
    tasks = [asyncio.create_task(_agent(i, name, address, secret, session, until, sent))
             for i, name in enumerate(node_names(n))]
    await asyncio.sleep(warmup_s)
    failed = [t for t in tasks if t.done() and t.exception() is not None]
    if failed:
        raise BenchError(f"{len(failed)} simulated agents failed: {failed[0].exception()}")
    t0, c0 = time.monotonic(), _ticks(pid)
    await asyncio.sleep(window_s)
    c1, t1 = _ticks(pid), time.monotonic()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise BenchError(f"{len(errors)} simulated agents failed: {errors[0]}")
    return t1 - t0, c1 - c0, vm_hwm_kib(Path(f"/proc/{pid}/status").read_text()), sent


def _ticks(pid: int) -> int:
    return cpu_ticks(Path(f"/proc/{pid}/stat").read_text())


def controller_load(cfg: Config) -> Usage:
    """The controller's CPU and peak RSS with ``cfg.agents`` simulated agents."""
    secret, session = new_secret(), uuid.uuid4().hex[:16]
    run_dir = Path(tempfile.mkdtemp(prefix="bench-agents-ctl-"))
    env = {**os.environ, SECRET_ENV: secret, SESSION_ENV: session}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_agents_sim", "controller", "--nodes",
         str(cfg.agents), "--run-dir", str(run_dir)], cwd=ROOT, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = proc.stdout.readline().decode().split()
        if len(first) != 3 or first[0] != "LISTEN":
            raise BenchError(f"the controller did not start: {first}")
        address = (first[1], int(first[2]))
        progress(f"controller pid {proc.pid} on {address[0]}:{address[1]}; "
                 f"{cfg.agents} simulated agents for {cfg.warmup_s + cfg.window_s:g} s")
        try:
            wall, ticks, hwm, sent = asyncio.run(_load(
                cfg.agents, address, secret.encode(), session, proc.pid, cfg.warmup_s,
                cfg.window_s))
        except (OSError, WireError) as exc:
            raise BenchError(f"a simulated agent could not talk to the controller: {exc}") \
                from None
        time.sleep(1.0)  # the last records reach the controller's mirror
        proc.stdin.close()
        proc.wait(timeout=10)
        mirrored = sum(len((run_dir / n / f"rank{i}.events.jsonl").read_bytes().splitlines())
                       for i, n in enumerate(node_names(cfg.agents)))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(run_dir, ignore_errors=True)
    if mirrored != sum(sent):
        raise BenchError(f"the controller mirrored {mirrored} of {sum(sent)} SDK records")
    hz = os.sysconf("SC_CLK_TCK")
    return Usage(f"controller ({cfg.agents} agents x SDK record every "
                 f"{DEFAULT_HEARTBEAT_S:g} s + heartbeat every {AGENT_HEARTBEAT_S:g} s)",
                 cpu_percent(ticks, wall, hz), wall, hwm / 1024,
                 f"{mirrored} records mirrored, none lost")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["controller"])
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--run-dir", type=Path, required=True)
    a = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        controller_main(a.nodes, a.run_dir)


if __name__ == "__main__":
    main()
