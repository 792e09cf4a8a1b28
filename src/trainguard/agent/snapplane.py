"""The snapshot tier's data plane when attempts run through agents (multi-host).

:class:`AgentSnapshotPlane` is the :class:`~trainguard.snapshot.plane.SnapshotPlane` of an
:class:`~trainguard.agent.backend.AgentBackend`. The bytes never pass through the controller:
each host's agent runs a replica server (:mod:`trainguard.snapshot.replicawire`) and pushes
its ranks' new snapshots to its buddy's server (:mod:`trainguard.agent.snapshots`); the plane
only relays addresses and collects the agents' inventory. Messages (agent -> controller):

- ``{"t": "snapserve", "addr", "port"}``: this agent's replica server;
- ``{"t": "snapinv", "copies": [{rank, step, attempt, digest, holder, kind, path,
  payload_bytes}, ...]}``: every copy on the host at start, then each new one;
- ``{"t": "reply", "req", "copy": {...}}`` or ``{"t": "reply", "req", "error"}``: a fetch.

Controller -> agent: the launch message's ``snapshot`` field ``{"root", "run", "replicate",
"fetch": [ranks], "fetch_timeout_s"}``; ``{"t": "snapbuddy", "node", "addr", "port"}`` (node
None: stop replicating); ``{"t": "snapfetch", "req", "rank", "step", "attempt", "digest",
"from_node", "addr", "port", "path"}``; ``{"t": "snapclean", "req", "root", "run"}``.

Agents live for one attempt, and none runs between attempts. So :meth:`fetch` is carried out
by the next launch: it records the shard to pull and returns the copy it will be (in the
destination's ``fetched/``); the destination's agent starts its ranks only once the shard is
there (or its time is up: the rank then fails to restore it, ``SnapshotError``, and the
supervisor relaunches from disk). :meth:`close` with ``remove`` starts short-lived agents
(like a host check's) that remove the run's directories.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trainguard.agent.validate import shard_copy
from trainguard.errors import LaunchError, SnapshotError
from trainguard.recover.launchplan import LaunchPlan
from trainguard.snapshot.layout import HostDirs
from trainguard.snapshot.plane import ShardCopy
from trainguard.snapshot.replicawire import fetched_path

log = logging.getLogger(__name__)

CLEAN_ATTEMPT_BASE = 2_000_000
"""Clean-up sessions' attempt numbers (apart from a run's attempts and host checks')."""
CLEAN_TIMEOUT_S = 20.0
_REQ_BASE = 1 << 40
"""The plane's request numbers, apart from the attempt's own (which count from 1)."""

_clean_numbers = itertools.count(CLEAN_ATTEMPT_BASE)

Send = Callable[[str, Mapping[str, Any]], bool]


class CleanAgents(Protocol):
    """What the clean-up needs of the backend (:class:`~trainguard.agent.backend.AgentBackend`)."""

    def launch(self, plan: LaunchPlan) -> Any: ...

    def reached(self) -> frozenset[str]:
        """Nodes whose agent has connected at least once in this run."""
        ...


@dataclass(slots=True)
class _Fetch:
    copy: ShardCopy
    to_node: str
    timeout_s: float
    req: int = 0
    sent: bool = False


class AgentSnapshotPlane:
    """The agents' snapshot plane of one run (see the module docstring)."""

    def __init__(self, root: Path, run_id: str, nodes: tuple[str, ...], send: Send, *,
                 backend: CleanAgents | None = None, clean_timeout_s: float = CLEAN_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        for node in nodes:
            HostDirs(root, run_id, node).host  # noqa: B018 - SnapshotError for a bad name
        self.root, self.run_id, self.nodes = root, run_id, nodes
        self._send = send
        self._backend = backend
        self._clean_timeout_s = clean_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._attempt = -1
        self._buddies: dict[str, str] = {}
        self._servers: dict[str, tuple[str, int]] = {}
        """This attempt's replica servers, as their agents reported them."""
        self._told: dict[str, tuple[str, int] | None] = {}
        """The buddy address each node's agent was last sent."""
        self._pending: dict[str, list[_Fetch]] = {}
        """Fetches for the next launch, by destination."""
        self._inflight: dict[int, _Fetch] = {}
        self._req = itertools.count(_REQ_BASE)
        self._new: list[ShardCopy] = []
        self._seen: set[ShardCopy] = set()
        self._lost: set[str] = set()
        self.failed: list[str] = []
        """Fetches that failed, one line each (for the status and tests)."""

    # -- SnapshotPlane -----------------------------------------------------------------------

    def begin(self, attempt: int, nodes: tuple[str, ...], buddies: Mapping[str, str]) -> None:
        with self._lock:
            self._attempt = attempt
            self._buddies = {n: b for n, b in buddies.items() if b not in self._lost}
            self._servers, self._told, self._inflight = {}, {}, {}

    def copies(self) -> list[ShardCopy]:
        with self._lock:
            out, self._new = self._new, []
        return out

    def fetch(self, rank: int, copy: ShardCopy, to_node: str, timeout_s: float) -> ShardCopy:
        """Recorded for the next launch (module docstring); the copy it will be."""
        if copy.holder == to_node:
            return copy
        with self._lock:
            for node in (copy.holder, to_node):
                if node in self._lost:
                    raise SnapshotError(f"cannot fetch rank {rank}'s shard: {node} is lost")
            pending = self._pending.setdefault(to_node, [])
            pending[:] = [f for f in pending if f.copy.rank != rank]
            pending.append(_Fetch(copy, to_node, timeout_s))
        dst = fetched_path(HostDirs(self.root, self.run_id, to_node), rank)
        return ShardCopy(rank, copy.step, copy.attempt, copy.digest, to_node, "fetched",
                         str(dst), copy.payload_bytes)

    def lost(self, node: str) -> None:
        with self._lock:
            self._lost.add(node)
            self._servers.pop(node, None)
            orphans = sorted(n for n, b in self._buddies.items() if b == node)
            self._buddies = {n: b for n, b in self._buddies.items() if b != node}
            self._pending.pop(node, None)
            for fetches in self._pending.values():
                fetches[:] = [f for f in fetches if f.copy.holder != node]
            for n in orphans:
                self._told.pop(n, None)
        for n in orphans:  # nothing is pushed to a lost host any more
            self._send(n, {"t": "snapbuddy", "node": None})
        self.tick()

    def close(self, remove: bool) -> None:
        if remove and self._backend is not None:
            # Only agents make snapshot directories: a host none ever reached has none.
            reached = self._backend.reached()
            nodes = tuple(n for n in self.nodes if n not in self._lost and n in reached)
            # A lost host may be up (excluded on evidence, or back after a cut link): its
            # memory is freed too when its agent answers within a short grace.
            lost = tuple(n for n in self.nodes if n in self._lost and n in reached)
            if nodes or lost:
                clean_hosts(self._backend, nodes, self.root, self.run_id,
                            self._clean_timeout_s, self._clock, optional=lost)

    # -- the attempt's side (agent.remote.SnapshotLink) --------------------------------------

    def launch_fields(self, node: str) -> dict[str, Any]:
        with self._lock:
            fetches = self._pending.pop(node, [])
            for f in fetches:
                f.req = next(self._req)
                self._inflight[f.req] = f
        timeout = max((f.timeout_s for f in fetches), default=60.0)
        return {"replicate": True, "fetch": sorted(f.copy.rank for f in fetches),
                "fetch_timeout_s": timeout}

    def claims(self, req: int) -> bool:
        with self._lock:
            return req in self._inflight

    def receive(self, node: str, msg: Mapping[str, Any]) -> None:
        kind = msg.get("t")
        if kind == "snapserve":
            with self._lock:
                if node not in self._lost:
                    self._servers[node] = (str(msg["addr"]), int(msg["port"]))
        elif kind == "snapinv":
            self._add(node, msg["copies"])
        elif kind == "reply":
            with self._lock:
                job = self._inflight.pop(int(msg["req"]), None)
            if job is None or job.to_node != node:
                return
            if "copy" in msg:
                self._add(node, [msg["copy"]])
            else:
                why = (f"fetch of rank {job.copy.rank}'s shard from {job.copy.holder} to "
                       f"{node} failed: {str(msg.get('error'))[:300]}")
                self.failed.append(why)
                log.warning("snapshots: %s", why)

    def _add(self, node: str, entries: list[Any]) -> None:
        """Copies reported by ``node``'s agent: its own host's, whatever they say."""
        with self._lock:
            if node in self._lost:
                return
            for entry in entries:
                raw = shard_copy(entry, "snapinv")
                copy = ShardCopy(int(raw["rank"]), int(raw["step"]), int(raw["attempt"]),
                                 str(raw["digest"]), node, raw["kind"], str(raw["path"]),
                                 int(raw.get("payload_bytes", 0)))
                if copy not in self._seen:
                    self._seen.add(copy)
                    self._new.append(copy)

    def tick(self) -> None:
        """Tell each agent its buddy's server, and each destination where to fetch from, as
        soon as the servers are known."""
        out: list[tuple[str, dict[str, Any]]] = []
        with self._lock:
            for node, buddy in sorted(self._buddies.items()):
                if node in self._lost or node not in self._servers:
                    continue
                addr = self._servers.get(buddy)
                if addr is not None and self._told.get(node) != addr:
                    out.append((node, {"t": "snapbuddy", "node": buddy, "addr": addr[0],
                                       "port": addr[1]}))
                    self._told[node] = addr
            for req, job in sorted(self._inflight.items()):
                source = self._servers.get(job.copy.holder)
                if job.sent or source is None or job.to_node not in self._servers:
                    continue
                c = job.copy
                out.append((job.to_node, {
                    "t": "snapfetch", "req": req, "rank": c.rank, "step": c.step,
                    "attempt": c.attempt, "digest": c.digest, "from_node": c.holder,
                    "addr": source[0], "port": source[1],
                    "path": str(fetched_path(HostDirs(self.root, self.run_id, job.to_node),
                                             c.rank))}))
                job.sent = True
        for node, msg in out:
            if not self._send(node, msg):
                with self._lock:  # not connected now: again at the next tick
                    if msg["t"] == "snapbuddy":
                        self._told.pop(node, None)
                    elif msg["req"] in self._inflight:
                        self._inflight[msg["req"]].sent = False


def clean_hosts(backend: CleanAgents, nodes: tuple[str, ...], root: Path, run_id: str,
                timeout_s: float, clock: Callable[[], float] = time.monotonic, *,
                optional: tuple[str, ...] = (), optional_wait_s: float = 2.0) -> set[str]:
    """Start an agent on each of ``nodes`` (no ranks) to remove the run's snapshot
    directories there; the nodes that answered. ``optional`` hosts (lost ones) are asked
    too, but waited for at most ``optional_wait_s`` once ``nodes`` are connected."""
    work = Path(tempfile.mkdtemp(prefix="trainguard-snapclean-"))
    done: set[str] = set()
    attempt = None
    try:
        every = (*nodes, *optional)
        plan = LaunchPlan(attempt=next(_clean_numbers), command=(), nodes=every, ranks=(),
                          workdir=work)
        attempt = backend.launch(plan)
        deadline = clock() + timeout_s
        while clock() < deadline and not attempt.connected() >= set(nodes):
            time.sleep(0.05)
        grace = min(deadline, clock() + optional_wait_s)
        while optional and clock() < grace and not attempt.connected() >= set(every):
            time.sleep(0.05)
        left = max(1.0, deadline - clock())
        replies = attempt.request(attempt.connected(), {"t": "snapclean", "root": str(root),
                                                       "run": run_id}, left)
        done = {n for n, r in replies.items() if "removed" in r}
    except (SnapshotError, LaunchError) as exc:
        log.warning("snapshots: clean-up failed: %s", exc)
    finally:
        if attempt is not None:
            attempt.close()
        shutil.rmtree(work, ignore_errors=True)
    missing = sorted(set((*nodes, *optional)) - done)
    if missing:
        log.warning("snapshots: the run's snapshot directories may remain on %s",
                    ", ".join(missing))
    return done


__all__ = ["CLEAN_ATTEMPT_BASE", "AgentSnapshotPlane", "clean_hosts"]
