"""An agent's part of the memory snapshot tier (docs/design/recovery-in-seconds.md).

Started by the launch message's ``snapshot`` field, before the host's ranks:

- it touches the host's ``lease`` every second (warm standbys exit when it goes stale);
- with ``replicate``, it runs this host's :class:`~trainguard.snapshot.replicawire.ReplicaServer`
  (other hosts push replicas to it, and pull shards from it before a restore), scans ``own/``,
  ``replica/*/`` and ``fetched/`` for committed slots and reports each new one (``snapinv``:
  every copy there at start, the new ones after), and pushes its ranks' new own slots to
  the buddy the controller named (``snapbuddy``), every new one, oldest first;
- it pulls a shard from another host into ``fetched/`` when told (``snapfetch``).

The slot files outlive this agent (they are in host memory, not its work dir): the next
attempt's agent finds them and reports them again. A fenced agent (``live()`` false) neither
pushes nor serves: its server is closed at the first look that finds it fenced.

    svc = SnapshotService(HostDirs(root, run, "n1"), secret, attempt=3, addr="10.0.0.1")
    addr, port = svc.start()        # told to the controller in a ``snapserve`` message
    svc.set_buddy("n2", ("10.0.0.2", 40123))
    msgs = svc.take()               # [{"t": "snapinv", "copies": [...]}]
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from trainguard.agent.dirwatch import DirWatch
from trainguard.errors import SnapshotError
from trainguard.snapshot.layout import HostDirs
from trainguard.snapshot.plane import CopyKind, ShardCopy
from trainguard.snapshot.replicawire import (
    ReplicaConfig,
    ReplicaServer,
    Wanted,
    fetch_slot,
    fetched_path,
    push_slot,
)
from trainguard.snapshot.slot import SlotHeader, read_header, slot_paths

log = logging.getLogger(__name__)

SCAN_S = 0.05
"""How often the agent looks for news: an inotify read of ``own/`` (a rank committed a slot)
and whether the replica server stored a copy; the slot directories are only read (a header per
slot file) when there is news, or every :data:`FULL_SCAN_S`."""
FULL_SCAN_S = 1.0
"""The slot directories are read at least this often (and on every look without inotify)."""
LEASE_S = 1.0
RETRY_S = 1.0
"""After a failed push, how long before the next try."""
_MAX_COPIES = 4096
"""Copies per ``snapinv`` message."""


def _rank_of(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    if stem.startswith("rank") and stem[4:].isdigit():
        return int(stem[4:])
    return None


def scan_copies(dirs: HostDirs) -> list[ShardCopy]:
    """Every committed slot on this host: own, replicas of other hosts, fetched shards."""
    places: list[tuple[Path, CopyKind]] = [(dirs.own, "own"), (dirs.fetched, "fetched")]
    with contextlib.suppress(OSError):
        places += [(sub, "replica") for sub in sorted((dirs.host / "replica").iterdir())
                   if sub.is_dir() and not sub.is_symlink()]
    out: list[ShardCopy] = []
    for directory, kind in places:
        try:
            names = sorted(p.name for p in directory.iterdir())
        except OSError:
            continue
        for name in names:
            rank = _rank_of(name)
            path = directory / name
            header = read_header(path) if rank is not None else None
            if header is None or header.rank != rank:
                continue
            out.append(ShardCopy(header.rank, header.step, header.attempt, header.digest,
                                 dirs.node, kind, str(path), header.payload_bytes))
    return out


def copy_fields(copy: ShardCopy) -> dict[str, Any]:
    """A copy as the wire carries it (``holder`` is the sending agent's node)."""
    return asdict(copy)


class SnapshotService:
    """One host's snapshot work for one attempt (see the module docstring)."""

    def __init__(self, dirs: HostDirs, secret: bytes, attempt: int, *, addr: str = "127.0.0.1",
                 replicate: bool = True, live: Callable[[], bool] = lambda: True,
                 config: ReplicaConfig | None = None, push_timeout_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dirs = dirs
        self._secret = secret
        self.attempt = attempt
        self._addr = addr
        self.replicate = replicate
        self._live = live
        self._config = config
        self._push_timeout_s = push_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._server: ReplicaServer | None = None
        self._buddy: tuple[str, tuple[str, int]] | None = None
        self._pushed: dict[tuple[str, int], tuple[int, int, str]] = {}
        """(buddy, rank) -> the (attempt, step, digest) last pushed there (or skipped)."""
        self._retry_at: dict[tuple[str, int], float] = {}
        self._seen: dict[str, tuple[int, int, str]] = {}
        """Path -> the slot last reported there."""
        self._out: list[dict[str, Any]] = []
        self._next_lease = 0.0
        self._watch: DirWatch | None = None
        self._news = threading.Event()
        """Set when the replica server stored a copy or the buddy changed."""
        self._next_full = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> tuple[str, int] | None:
        """Create the directories, report what is there, serve; the server's address (None
        without ``replicate``). :class:`SnapshotError` when the directories or the server
        cannot be made."""
        self.dirs.create()
        self.touch()
        if self.replicate:
            self._watch = DirWatch.open(self.dirs.own)
            self._server = ReplicaServer(self.dirs, self._secret, self.attempt, host=self._addr,
                                         config=self._config, live=self._live,
                                         on_copy=lambda _p, _h: self._news.set()).start()
            self.scan()
        self._thread = threading.Thread(target=self._run, name="snapshots", daemon=True)
        self._thread.start()
        return (self._addr, self._server.port) if self._server is not None else None

    def close(self, wait: bool = True) -> None:
        """Stop serving and pushing now (fencing, the agent's end); ``wait``: for a push
        under way to end (a fence does not wait: the agent exits, and the push with it)."""
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.close()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self._push_timeout_s + 1.0)

    def _run(self) -> None:
        while not self._stop.wait(SCAN_S):
            try:
                self.step()
            except (OSError, SnapshotError) as exc:  # the next look tries again
                log.warning("snapshots on %s: %s", self.dirs.node, exc)

    def step(self) -> None:
        """One look: the lease, new copies, pushes to the buddy; nothing once fenced."""
        if not self._live():
            self.close()
            return
        if self._clock() >= self._next_lease:
            self.touch()
        if self.replicate and self._news_since_last_look():
            self.scan()
            self.push_new()

    def _news_since_last_look(self) -> bool:
        """Whether the slot directories may hold something new: a rank wrote in ``own/``
        (inotify), the server stored a copy, the buddy changed, a push is due again, or
        :data:`FULL_SCAN_S` passed (also: always, without inotify)."""
        now = self._clock()
        changed = self._watch.changed() if self._watch is not None else None
        news = self._news.is_set()
        self._news.clear()
        retry = any(now >= t for t in self._retry_at.values())
        if changed is None or changed or news or retry or now >= self._next_full:
            self._next_full = now + FULL_SCAN_S
            return True
        return False

    def touch(self) -> None:
        self._next_lease = self._clock() + LEASE_S
        try:
            self.dirs.touch_lease()
        except OSError as exc:
            log.warning("snapshots on %s: cannot touch the lease: %s", self.dirs.node, exc)

    # -- inventory ---------------------------------------------------------------------------

    def scan(self) -> list[ShardCopy]:
        """Copies not reported yet (queued for :meth:`take` too)."""
        new = []
        for copy in scan_copies(self.dirs):
            key = (copy.step, copy.attempt, copy.digest)
            if self._seen.get(copy.path) != key:
                self._seen[copy.path] = key
                new.append(copy)
        if new:
            with self._lock:
                for start in range(0, len(new), _MAX_COPIES):
                    self._out.append({"t": "snapinv", "copies": [
                        copy_fields(c) for c in new[start:start + _MAX_COPIES]]})
        return new

    def take(self) -> list[dict[str, Any]]:
        """Messages for the controller since the last call."""
        with self._lock:
            out, self._out = self._out, []
        return out

    # -- replication -------------------------------------------------------------------------

    def set_buddy(self, node: str | None, addr: tuple[str, int] | None) -> None:
        """Push new own slots to ``node``'s server at ``addr`` from now on (None: to nobody)."""
        with self._lock:
            self._buddy = (node, addr) if node is not None and addr is not None else None
        self._news.set()

    def push_new(self) -> int:
        """Each rank's own slots not sent to the buddy yet, oldest first; the count.

        Both slots, not only the newest: when two snapshots were committed since the last
        look, pushing only the newest would leave the older one on one host, and ranks whose
        agents looked at different moments would be replicated at different steps (no step
        complete). The older slot is the next one the rank writes: a push torn by that
        write fails the receiver's digest check and is skipped (the newer one follows)."""
        with self._lock:
            buddy = self._buddy
        if buddy is None:
            return 0
        node, addr = buddy
        ranks = sorted({r for p in _names(self.dirs.own) if (r := _rank_of(p)) is not None})
        sent = 0
        for rank in ranks:
            key = (node, rank)
            if self._clock() < self._retry_at.get(key, 0.0):
                continue
            self._retry_at.pop(key, None)
            for path, header in _unpushed(self.dirs.own, rank, self._pushed.get(key)):
                if not self._live() or self._stop.is_set():
                    return sent
                ident = (header.attempt, header.step, header.digest)
                try:
                    push_slot(addr, self._secret, self.dirs.node, self.attempt, path,
                              self._push_timeout_s)
                except SnapshotError as exc:
                    if read_header(path) != header:  # overwritten meanwhile: the next one
                        self._pushed[key] = ident
                        continue
                    self._retry_at[key] = self._clock() + RETRY_S
                    log.warning("snapshots on %s: replica of rank %d to %s failed: %s",
                                self.dirs.node, rank, node, exc)
                    break
                self._pushed[key] = ident
                sent += 1
        return sent

    # -- fetches and cleanup -----------------------------------------------------------------

    def fetch(self, msg: Mapping[str, Any]) -> ShardCopy:
        """The ``snapfetch`` command: pull a shard into ``fetched/`` (blocking)."""
        if not self._live():
            raise SnapshotError("this agent is fenced")
        rank, step, attempt = (_int(msg, k) for k in ("rank", "step", "attempt"))
        digest, addr = _text(msg, "digest", 64), _text(msg, "addr", 256)
        port = _int(msg, "port")
        if not 0 < port < 65536:
            raise SnapshotError("snapfetch: port must be in 1..65535")
        dst = fetched_path(self.dirs, rank)
        if "path" in msg and msg["path"] != str(dst):
            raise SnapshotError(f"snapfetch: this host keeps rank {rank}'s fetched shard at "
                                f"{dst}, not {str(msg['path'])[:200]}")
        header = fetch_slot((addr, port), self._secret, self.dirs.node, self.attempt,
                            Wanted(rank, step, attempt, digest), dst, self._push_timeout_s)
        copy = ShardCopy(rank, header.step, header.attempt, header.digest, self.dirs.node,
                         "fetched", str(dst), header.payload_bytes)
        self._seen[str(dst)] = (header.step, header.attempt, header.digest)
        return copy


def remove_run(dirs: HostDirs) -> bool:
    """Remove this host's directory of the run (and the run's, once empty); whether there
    was one. Standby interpreters of the run exit when it is gone."""
    host = dirs.host
    if host.is_symlink():
        raise SnapshotError(f"snapshot directory {host} is a symlink")
    existed = host.exists()
    shutil.rmtree(host, ignore_errors=True)
    # Not empty while other nodes' directories are there (virtual nodes of one machine).
    with contextlib.suppress(OSError):
        dirs.run.rmdir()
    return existed


def _unpushed(own: Path, rank: int, last: tuple[int, int, str] | None
              ) -> list[tuple[Path, SlotHeader]]:
    """``rank``'s committed own slots newer than ``last`` (attempt, step, digest), oldest
    first."""
    found = []
    for path in slot_paths(own, rank):
        header = read_header(path)
        if header is None or header.rank != rank:
            continue
        ident = (header.attempt, header.step, header.digest)
        if last is None or ident[:2] > last[:2]:
            found.append((ident, path, header))
    return [(path, header) for _, path, header in sorted(found, key=lambda f: f[0][:2])]


def _names(directory: Path) -> list[str]:
    try:
        return [p.name for p in directory.iterdir()]
    except OSError:
        return []


def _int(msg: Mapping[str, Any], key: str) -> int:
    value = msg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 62:
        raise SnapshotError(f"{key} must be an integer >= 0")
    return value


def _text(msg: Mapping[str, Any], key: str, limit: int) -> str:
    value = msg.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise SnapshotError(f"{key} must be a non-empty string of at most {limit} characters")
    return value


__all__ = ["LEASE_S", "SCAN_S", "SnapshotService", "copy_fields", "remove_run", "scan_copies"]
