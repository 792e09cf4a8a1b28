"""The launch side of warm standbys, for :class:`~trainguard.recover.local.LocalBackend`:
take a standby for a rank when one matches, and pre-warm standbys for the next attempt.

Whoever runs a LocalBackend on a host (the local supervisor for virtual nodes, each agent on
its host) runs one :class:`WarmLauncher`; it also keeps the leases of the host directories it
pre-warmed in fresh (touched every second) until :meth:`WarmLauncher.close`.

    launcher = WarmLauncher(base_env)
    proc = launcher.claim(program, command, workdir, env, output)   # WarmProc | None
    launcher.prewarm(program, command, workdir, targets)            # after the launch
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainguard.warm.pool import (
    WarmCommand,
    WarmProc,
    claim,
    count_pending,
    parse_command,
    standby_env,
    start_standby,
)
from trainguard.warm.protocol import Assignment

log = logging.getLogger(__name__)

WARM_DIR_ENV = "TRAINGUARD_WARM_DIR"
WARM_START_ENV = "TRAINGUARD_WARM_START"
LEASE_EVERY_S = 1.0
PREWARM_AFTER_S = 3.0
"""Standbys for the next attempt start this long after the ranks they follow were launched:
the ranks' own start-up (imports, rendezvous, restore) gets the host's CPUs first, and a
standby is needed only at the next failure."""
PENDING_WAIT_S = 20.0
"""How long a rank waits for a standby of its host that is still importing (it is further
along than a cold interpreter started now) before it starts cold."""


@dataclass(frozen=True, slots=True)
class WarmTarget:
    """One standby wanted: in ``warm_dir`` (lease ``lease``), for a rank environment like
    ``env`` (only its start-up variables matter)."""

    warm_dir: Path
    lease: Path
    env: Mapping[str, str]


def plan_targets(nodes: Sequence[str], spares: Sequence[str], host_dirs: Mapping[str, str],
                 ranks: Sequence[tuple[str, int, Mapping[str, str]]]) -> list[WarmTarget]:
    """One target per rank slot of every node and spare (pure).

    ``ranks``: (node, local rank, full environment) of each rank launched. A node's directory
    is ``host_dirs[node]``, or the parent of its ranks' ``TRAINGUARD_WARM_DIR``; a spare uses
    the first node's slot environments. Empty when no rank asked for warm starts."""
    if not nodes or not any(WARM_DIR_ENV in env for _, _, env in ranks):
        return []
    per_node = max(1, len(ranks) // len(nodes))
    by_slot: dict[tuple[str, int], Mapping[str, str]] = {(n, lr): e for n, lr, e in ranks}
    first = nodes[0]
    out = []
    for node in (*nodes, *spares):
        host = host_dirs.get(node)
        if host is None:
            own = next((e for n, _, e in ranks if n == node and WARM_DIR_ENV in e), None)
            if own is None:
                continue
            host = str(Path(own[WARM_DIR_ENV]).parent)
        for slot in range(per_node):
            env = by_slot.get((node, slot)) or by_slot.get((first, slot))
            if env is not None:
                out.append(WarmTarget(Path(host) / "warm", Path(host) / "lease", env))
    return out


class WarmLauncher:
    """Claims standbys for ranks and starts standbys for later attempts."""

    def __init__(self, base_env: Mapping[str, str], lease_timeout_s: float = 15.0, *,
                 pending_wait_s: float = PENDING_WAIT_S,
                 prewarm_after_s: float = PREWARM_AFTER_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._base_env = dict(base_env)
        self._pending_wait_s = pending_wait_s
        self._prewarm_after_s = prewarm_after_s
        self._clock, self._sleep = clock, sleep
        self._lease_timeout_s = lease_timeout_s
        self._leases: set[Path] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._toucher: threading.Thread | None = None
        self._said_cold = False

    def command(self, program: str, command: tuple[str, ...], workdir: Path) -> WarmCommand | None:
        cmd = parse_command(command, program, workdir)
        if cmd is None and not self._said_cold:
            self._said_cold = True
            log.info("warm standbys only run 'python script.py ...' or 'python -m module ...':"
                     " %s starts cold", " ".join(command[:3]))
        return cmd

    def claim(self, cmd: WarmCommand, env: Mapping[str, str], output: Path,
              cwd: Path) -> WarmProc | None:
        """Start a rank (``env``: its full environment) in a matching standby of its host;
        None: start it cold. With no standby ready but some still importing (started for this
        attempt after the previous one, not long ago), it waits for one, at most
        ``pending_wait_s``."""
        warm_dir = env.get(WARM_DIR_ENV)
        if not warm_dir:
            return None
        job = Assignment(cmd.argv, {**env, WARM_START_ENV: "1"}, str(cwd), str(output))
        deadline = self._clock() + self._pending_wait_s
        key = cmd.key(dict(env))
        while True:
            try:
                proc = claim(cmd, dict(env), Path(warm_dir), job)
            except OSError as exc:
                log.info("no warm start (%s): starting cold", exc)
                return None
            if proc is not None or self._clock() >= deadline \
                    or count_pending(Path(warm_dir), key) == 0:
                return proc
            self._sleep(0.02)

    def prewarm(self, cmd: WarmCommand, targets: Sequence[WarmTarget]) -> threading.Thread:
        """Start, in the background and ``prewarm_after_s`` from now, the standbys
        ``targets`` want that are not there yet."""
        thread = threading.Thread(target=self._prewarm, args=(cmd, list(targets)),
                                  name="warm-prewarm", daemon=True)
        thread.start()
        return thread

    def _prewarm(self, cmd: WarmCommand, targets: list[WarmTarget]) -> None:
        if self._stop.wait(self._prewarm_after_s):
            return
        wanted: Counter[tuple[Path, Path, str]] = Counter()
        envs: dict[str, dict[str, str]] = {}
        for t in targets:
            env = standby_env(self._base_env, dict(t.env))
            key = cmd.key(env)
            envs[key] = env
            wanted[(t.warm_dir, t.lease, key)] += 1
        for (warm_dir, lease, key), n in wanted.items():
            self._keep_lease(lease)
            for _ in range(n - count_pending(warm_dir, key)):
                if self._stop.is_set():
                    return
                try:
                    start_standby(cmd, envs[key], warm_dir, lease,
                                  lease_timeout_s=self._lease_timeout_s)
                except OSError as exc:
                    log.warning("cannot start a standby in %s: %s", warm_dir, exc)
                    break

    def _keep_lease(self, lease: Path) -> None:
        with self._lock:
            self._leases.add(lease)
            if self._toucher is None:
                self._toucher = threading.Thread(target=self._touch, name="warm-lease",
                                                 daemon=True)
                self._toucher.start()
        self._touch_once()

    def _touch_once(self) -> None:
        with self._lock:
            leases = list(self._leases)
        for lease in leases:
            with contextlib.suppress(OSError):
                if lease.parent.is_dir():
                    lease.touch(exist_ok=True)

    def _touch(self) -> None:
        while not self._stop.wait(LEASE_EVERY_S):
            self._touch_once()

    def close(self) -> None:
        """Stop keeping leases (standbys left then exit once the lease is stale)."""
        self._stop.set()
        if self._toucher is not None:
            self._toucher.join(timeout=2.0)


__all__ = ["PREWARM_AFTER_S", "WARM_DIR_ENV", "WARM_START_ENV", "WarmLauncher", "WarmTarget",
           "plan_targets"]
