"""The processes of ``bench_controller_scale.py``: the controller, the simulated agents, the flood.

``python -m benchmarks.bench_controller_scale_sim ROLE``, started by the benchmark:

- ``controller``: an :class:`~trainguard.agent.hub.AgentHub` and a real
  :class:`~trainguard.agent.remote.RemoteAttempt` polled every 50 ms, as ``trainguard run``
  runs them; ``hub.take`` is wrapped to time each SDK record of local rank 0 (send to take, send
  to the hub's inbox). stdin: ``phase NAME`` labels the samples, ``count`` answers ``COUNT
  connected taken``; at EOF it prints ``RESULT {json}``.
- ``load``: the simulated agents, asyncio tasks speaking through :mod:`trainguard.agent.client`
  (``dial``, ``Outbox``, ``Connection.send``/``feed``); at EOF they flush and it prints its tally.
- ``flood``: idle unauthenticated connections, garbage and wrong-secret hellos from other
  loopback addresses; at EOF it prints its tally.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_agents import dist, to_json
from benchmarks.bench_controller_scale import (
    FLOOD_ADDRESSES,
    POLL_S,
    ROOT,
    SDK_PERIOD_S,
    SECRET_ENV,
    SESSION_ENV,
    TRACE_EVERY,
    BenchError,
    node_names,
    raise_fd_limit,
    stamp,
    step_record,
    trace_record,
)

# ---- the controller process ----------------------------------------------------------------------


class _NoProcs:
    """The agents are not this process's children: nothing to see or close."""

    def exited(self) -> dict[str, int]:
        return {}

    def close(self, wait_s: float) -> None:
        return None


def controller_main(nodes: int, ranks: int, run_dir: Path) -> None:
    """Hub + RemoteAttempt polled every 50 ms; stdin: ``phase NAME`` labels the latency
    samples, ``count`` answers ``COUNT connected taken``; at EOF prints the samples' summary."""
    from trainguard.agent.hub import AgentHub, Inbound
    from trainguard.agent.remote import RemoteAttempt
    from trainguard.recover.launchplan import LaunchPlan, RankLaunch

    names = node_names(nodes)
    hub = AgentHub(os.environ[SECRET_ENV], os.environ[SESSION_ENV])
    host, port = hub.start()
    launches = tuple(RankLaunch(
        n * ranks + r, r, name, n, {"TRAINGUARD_EVENTS": str(run_dir / name / f"rank{r}.jsonl")},
        run_dir / name / f"rank{r}.log") for n, name in enumerate(names) for r in range(ranks))
    plan = LaunchPlan(0, ("true",), names, launches, ROOT)
    hub.expect(0, names)
    attempt = RemoteAttempt(plan, hub, _NoProcs(), node_timeout_s=60, connect_timeout_s=600)
    lock = threading.Lock()
    state: dict[str, Any] = {"phase": "", "taken": 0}
    taken: dict[str, list[float]] = {}
    arrived: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    take = hub.take
    # BENCH_SCALE_DUMP=PATH: every timed record (phase node sent arrived taken), to study a tail
    dump = open(os.environ["BENCH_SCALE_DUMP"], "w") if os.environ.get("BENCH_SCALE_DUMP") \
        else None  # noqa: SIM115 - open for the process's life

    def measured_take() -> list[Inbound]:
        got = take()
        now = time.time()
        with lock:
            phase = state["phase"]
            state["taken"] += len(got)
        if phase:
            counts[phase] = counts.get(phase, 0) + len(got)
            for ib in got:
                msg = ib.msg
                if msg.get("t") == "sdk" and msg.get("rank", 1) % ranks == 0:
                    sent = stamp(msg["data"]) if isinstance(msg.get("data"), bytes) else None
                    if sent is not None:
                        taken.setdefault(phase, []).append(now - sent)
                        arrived.setdefault(phase, []).append(ib.at - sent)
                        if dump is not None:
                            dump.write(f"{phase} {ib.node} {sent:.3f} {ib.at - sent:.3f} "
                                       f"{now - sent:.3f}\n")
        return got

    hub.take = measured_take  # type: ignore[method-assign]
    done = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["phase"]:
                with lock:
                    state["phase"] = words[1] if len(words) > 1 else ""
            elif words[:1] == ["count"]:
                connected = sum(v.connected for v in hub.peers().values())
                with lock:
                    total = state["taken"]
                print(f"COUNT {connected} {total}", flush=True)
        done.set()

    threading.Thread(target=commands, daemon=True).start()
    print(f"LISTEN {host} {port}", flush=True)
    next_poll = time.monotonic()
    while not done.is_set():
        attempt.poll()
        next_poll += POLL_S
        time.sleep(max(0.0, next_poll - time.monotonic()))
    attempt.poll()
    result = {"taken": {k: to_json(dist(v)) for k, v in taken.items()},
              "arrived": {k: to_json(dist(v)) for k, v in arrived.items()},
              "counts": counts, "lost": attempt.lost, "rejected": hub.rejected,
              "refused": hub.refused, "errors": attempt.errors[:5]}
    print("RESULT " + json.dumps(result), flush=True)
    hub.close()


# ---- the simulated agents ------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    sdk: int = 0
    """SDK records sent (each must end up in the run directory)."""
    reconnects: int = 0
    refusals: int = 0
    kicks: dict[int, str] = field(default_factory=dict)
    """Agents told to drop their connection and dial again, with the phase to record it in."""
    redial_s: dict[str, list[float]] = field(default_factory=dict)
    """Per phase, how long each told agent took to be connected again."""


async def _agent(index: int, node: str, ranks: int, address: tuple[str, int], secret: bytes,
                 session: str, stop: asyncio.Event, tally: _Tally, ramp_s: float) -> None:
    from trainguard.agent.client import Connection, Identity, Outbox, dial
    from trainguard.agent.wire import WireError, pack

    me = Identity("agent", node, session, 0, secret)
    outbox = Outbox()
    beat = pack({"t": "hb"})
    base = index * ranks
    await asyncio.sleep(random.uniform(0, ramp_s))
    conn: Connection | None = None
    delay = 0.1

    async def receive(c: Connection) -> None:
        msgs = list(c.early)
        while True:
            for msg in msgs:
                kind = msg.get("t")
                if kind == "ack" and isinstance(msg.get("seq"), int):
                    outbox.ack(msg["seq"])
                elif kind == "launch":
                    c.send([outbox.add({"t": "started", "pids": {
                        str(base + r): 10_000 + base + r for r in range(ranks)}})])
            data = await c.reader.read(c.frames.limit)
            if not data:
                raise ConnectionError("closed by the controller")
            msgs = c.feed(data)

    async def connect() -> tuple[Connection, asyncio.Task[None]]:
        nonlocal delay
        while True:
            try:
                c = await dial(*address, me)
            except (OSError, WireError, TimeoutError):
                tally.refusals += 1
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 1.0)
                continue
            delay = 0.1
            outbox.ack(c.acked)
            c.send(outbox.pending())
            return c, asyncio.create_task(receive(c))

    conn, reader = await connect()
    loop = asyncio.get_running_loop()
    start, k = loop.time(), 0
    try:
        while not stop.is_set():
            phase = tally.kicks.pop(index, None)
            if phase is not None:  # as after a network blip: the same agent dials again
                t0 = loop.time()
                reader.cancel()
                conn.writer.close()
                conn, reader = await connect()
                tally.redial_s.setdefault(phase, []).append(loop.time() - t0)
            if reader.done():
                tally.reconnects += 1
                conn.writer.close()
                conn, reader = await connect()
            k += 1
            now = time.time()
            bodies = [outbox.add({"t": "sdk", "rank": base + r,
                                  "data": step_record(now, base + r, k)}) for r in range(ranks)]
            tally.sdk += ranks
            if k % TRACE_EVERY == 0:
                bodies += [outbox.add({"t": "sdk", "rank": base + r,
                                       "data": trace_record(now, base + r, k)})
                           for r in range(ranks)]
                tally.sdk += ranks
            if k % 2 == 0:  # once a second
                bodies.append(outbox.add({"t": "out", "rank": base, "data":
                                          f"step {k} loss 2.31 lr 3e-4\n".encode()}))
                bodies.append(outbox.add({"t": "procstat", "ranks": [
                    [base + r, "running", round(k * 0.5, 3)] for r in range(ranks)]}))
                bodies.append(beat)
            with contextlib.suppress(ConnectionError, OSError):
                conn.send(bodies)
                await conn.writer.drain()
            await asyncio.sleep(max(0.0, start + k * SDK_PERIOD_S - loop.time()))
        # The last records reach the controller before the agent leaves.
        deadline = loop.time() + 5.0
        while len(outbox) and loop.time() < deadline and not reader.done():
            await asyncio.sleep(0.05)
    finally:
        reader.cancel()
        conn.writer.close()


async def _load(agents: int, first: int, ranks: int, address: tuple[str, int],
                ramp_s: float) -> _Tally:
    secret, session = os.environ[SECRET_ENV].encode(), os.environ[SESSION_ENV]
    names = node_names(first + agents)[first:]
    stop = asyncio.Event()
    tally = _Tally()

    def command(line: str) -> None:
        words = line.split()
        if len(words) == 3 and words[0] == "redial":  # redial N PHASE: N agents, spread out
            n = min(int(words[1]), agents)
            for i in range(n):
                tally.kicks[first + i * agents // n] = words[2]

    _stop_at_eof(stop, command)
    tasks = [asyncio.create_task(_agent(first + i, name, ranks, address, secret, session, stop,
                                        tally, ramp_s)) for i, name in enumerate(names)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise BenchError(f"{len(errors)} simulated agents failed: {errors[0]!r}")
    return tally


def _stop_at_eof(stop: asyncio.Event, command: Callable[[str], None] | None = None) -> None:
    """Set ``stop`` when the parent closes this process's stdin; ``command`` gets each line."""
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    pending = b""

    def readable() -> None:
        nonlocal pending
        data = os.read(fd, 4096)
        if not data:
            loop.remove_reader(fd)
            stop.set()
            return
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            if command is not None:
                command(line.decode())

    loop.add_reader(fd, readable)


# ---- the flood -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Flood:
    idle_opened: int = 0
    garbage: int = 0
    wrong_secret: int = 0
    failed: int = 0


async def _idle(address: tuple[str, int], local: str, stop: asyncio.Event, f: _Flood) -> None:
    """One idle unauthenticated connection, reopened whenever the hub drops it."""
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(*address, local_addr=(local, 0))
        except OSError:
            f.failed += 1
            await asyncio.sleep(0.2)
            continue
        f.idle_opened += 1
        opened = time.monotonic()
        with contextlib.suppress(OSError):
            while await reader.read(4096):
                pass  # the challenge; then nothing from us until the hub gives up
        writer.close()
        # Held until the handshake timeout: take the place again at once. Refused at once (the
        # gate is full): try again in a second, so the churn stays a few thousand a second.
        await asyncio.sleep(0.05 if time.monotonic() - opened > 1.0 else 1.0)


async def _garbage(address: tuple[str, int], local: str, f: _Flood) -> None:
    try:
        reader, writer = await asyncio.open_connection(*address, local_addr=(local, 0))
        writer.write(os.urandom(512))
        await writer.drain()
        with contextlib.suppress(OSError):
            await asyncio.wait_for(reader.read(4096), 1.0)
        writer.close()
        f.garbage += 1
    except (OSError, TimeoutError):
        f.failed += 1


async def _wrong_secret(address: tuple[str, int], session: str, f: _Flood) -> None:
    from trainguard.agent.client import Identity, dial
    from trainguard.agent.wire import WireError

    try:
        conn = await dial(*address, Identity("agent", "sim0000", session, 0, b"not the secret"))
        conn.writer.close()
    except (OSError, WireError, TimeoutError):
        f.wrong_secret += 1


async def _flood(address: tuple[str, int], idle: int, rate: float) -> _Flood:
    f = _Flood()
    stop = asyncio.Event()
    _stop_at_eof(stop)
    idlers = [asyncio.create_task(_idle(address, FLOOD_ADDRESSES[i % len(FLOOD_ADDRESSES)],
                                        stop, f)) for i in range(idle)]
    shots: set[asyncio.Task[None]] = set()
    session = os.environ[SESSION_ENV]
    i = 0
    while not stop.is_set() and rate > 0:
        i += 1
        coro = (_garbage(address, FLOOD_ADDRESSES[i % len(FLOOD_ADDRESSES)], f) if i % 2
                else _wrong_secret(address, session, f))
        task = asyncio.create_task(coro)
        shots.add(task)
        task.add_done_callback(shots.discard)
        await asyncio.sleep(1.0 / rate)
    await stop.wait()
    for t in [*idlers, *shots]:
        t.cancel()
    await asyncio.gather(*idlers, *shots, return_exceptions=True)
    return f


def _role(argv: Sequence[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["controller", "load", "flood"])
    ap.add_argument("--agents", type=int, default=0)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--run-dir", type=Path)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ramp", type=float, default=0.0)
    ap.add_argument("--idle", type=int, default=0)
    ap.add_argument("--rate", type=float, default=0.0)
    a = ap.parse_args(argv)
    raise_fd_limit()
    with contextlib.suppress(KeyboardInterrupt):
        if a.role == "controller":
            controller_main(a.agents, a.ranks, a.run_dir)
        elif a.role == "load":
            tally = asyncio.run(_load(a.agents, 0, a.ranks, (a.host, a.port), a.ramp))
            print(json.dumps({"sdk": tally.sdk, "reconnects": tally.reconnects,
                              "refusals": tally.refusals, "redial_s": tally.redial_s}),
                  flush=True)
        else:
            f = asyncio.run(_flood((a.host, a.port), a.idle, a.rate))
            print(json.dumps({"idle_opened": f.idle_opened, "garbage": f.garbage,
                              "wrong_secret": f.wrong_secret, "failed": f.failed}), flush=True)


if __name__ == "__main__":
    _role(sys.argv[1:])
