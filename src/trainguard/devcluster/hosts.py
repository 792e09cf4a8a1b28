"""N virtual hosts on one machine, made of Linux namespaces, for multi-host tests and demos.

Each host has its own network namespace (an address on a bridge in the root namespace), hostname,
PID namespace and mount namespace in which /tmp and /var/log are fresh tmpfs mounts and /etc/hosts
names every host (and ``controller``, the bridge address). The rest of the filesystem is shared,
and ``cluster.shared`` plays the shared filesystem; what lies below /tmp but must be seen in
the hosts (the cluster root, a checkout and its venv under /tmp: ``visible``) is bind-mounted
back at its own path. Needs root.

    with HostCluster(3, tmp_path) as cluster:
        out = cluster.run("host1", ["hostname"], capture_output=True, text=True).stdout
        server = cluster.popen("host2", ["python", "-m", "http.server"])
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainguard.devcluster import hostproc, net
from trainguard.devcluster.common import (
    HOST_PROGRAMS,
    DevClusterError,
    check_call,
    children,
    kill_quietly,
    missing_requirements,
    ns_link,
    pids_in_namespace,
    wait_until,
)
from trainguard.devcluster.netplan import NetPlan, check_prefix, host_names

_READY_TIMEOUT_S = 20.0
_EXIT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class VirtualHost:
    """One started host."""

    name: str
    addr: str
    pid: int
    """Root-namespace pid of the host's PID 1 (what commands enter); never 1."""


@dataclass(slots=True)
class _Running:
    host: VirtualHost
    pidns: str
    outer: subprocess.Popen[bytes]
    """The ``unshare`` process, parent of the host's PID 1."""
    ns_fd: int
    """An open handle on the PID namespace, held until :meth:`HostCluster.stop`: the kernel
    reuses a freed namespace's number, and a host started meanwhile (another test's) would
    then pass for this one's survivors."""
    killed: bool = False


class HostCluster:
    """Virtual hosts under ``root`` (config, logs, ``enter`` script, ``shared/``)."""

    def __init__(self, hosts: int | Sequence[str], root: Path, *, prefix: str = "tgh",
                 visible: Sequence[Path] | None = None) -> None:
        """``visible``: directories the hosts must see although they lie below a private
        mount (/tmp...) [default: this process's interpreter, venv, trainguard source, import
        path and working directory]; the cluster root is always visible."""
        self.names = host_names(hosts)
        self.prefix = check_prefix(prefix)
        self.root = Path(root).absolute()
        extra = hostproc.process_paths() if visible is None else [Path(p) for p in visible]
        self.visible = hostproc.keep_visible([self.root, *extra])
        """What each host mounts back through its private /tmp, /var/log and /dev/shm."""
        self.shared = self.root / "shared"
        self.enter_script = self.root / "enter"
        self.hosts_file = self.root / "etc" / "hosts"
        self.start_s: float | None = None
        """Seconds start() took."""
        self.stop_s: float | None = None
        """Seconds stop() took."""
        self._claim: net.Claim | None = None
        self._running: dict[str, _Running] = {}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._state = "new"

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> HostCluster:
        if self._state != "new":
            raise DevClusterError(f"cluster already {self._state}; create a new HostCluster")
        reasons = missing_requirements(HOST_PROGRAMS)
        if reasons:
            raise DevClusterError(f"cannot start a dev cluster: {'; '.join(reasons)}")
        t0 = time.monotonic()
        self._state = "started"
        try:
            for sub in ("etc", "log", "shared"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            self._claim = net.claim(self.prefix, self.names)
            self.hosts_file.write_text(self._claim.plan.hosts_file())
            (self.root / "etc" / "resolv.conf").write_text(hostproc.RESOLV_CONF)
            net.build(self._claim.plan)
            self._launch_all(self._claim.plan)
            self._write_enter_script()
        except BaseException:
            with contextlib.suppress(DevClusterError):
                self.stop()
            raise
        self.start_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Kill every host, delete veths, bridge and namespaces; check nothing is left. Also
        after a failed start; a second call does nothing."""
        if self._state != "started":
            return
        self._state = "stopped"
        t0 = time.monotonic()
        for running in self._running.values():
            self._kill(running)
        for proc in self._procs:  # hosts whose PID 1 was never found (failed start)
            kill_quietly(proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(_EXIT_TIMEOUT_S)
        problems: list[str] = []
        if self._claim is not None:
            tag = self._claim.plan.tag
            try:
                net.purge(tag)
                problems += [f"left over: {', '.join(left)}" for left in [net.leftovers(tag)]
                             if left]
            finally:
                net.release(self._claim)
        alive = [f"{r.host.name}: {pids}" for r in self._running.values()
                 if (pids := pids_in_namespace(r.pidns, live_only=True))]
        problems += [f"processes still alive: {'; '.join(alive)}"] if alive else []
        for running in self._running.values():
            with contextlib.suppress(OSError):
                os.close(running.ns_fd)
        self.enter_script.unlink(missing_ok=True)
        self.stop_s = time.monotonic() - t0
        if problems:
            raise DevClusterError(f"dev cluster stop incomplete: {' | '.join(problems)}")

    def __enter__(self) -> HostCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- queries --------------------------------------------------------------------------------

    @property
    def plan(self) -> NetPlan:
        if self._claim is None:
            raise DevClusterError("the cluster is not started")
        return self._claim.plan

    @property
    def hosts(self) -> tuple[VirtualHost, ...]:
        return tuple(self._running[name].host for name in self.names if name in self._running)

    @property
    def bridge_addr(self) -> str:
        return self.plan.bridge_addr

    def host(self, name: str) -> VirtualHost:
        return self._get(name).host

    def processes(self, node: str) -> list[int]:
        """Root-namespace pids of every process in the host's PID namespace except its PID 1
        (zombies excluded: a killed process whose parent is outside the host, e.g. a killed
        ``enter``, is this machine's init's to reap, whenever it gets to it)."""
        running = self._get(node, alive=False)
        return [p for p in pids_in_namespace(running.pidns, live_only=True)
                if p != running.host.pid]

    # -- commands -------------------------------------------------------------------------------

    def argv(self, node: str, cmd: Sequence[str]) -> list[str]:
        """An argv that runs ``cmd`` inside ``node`` (through :attr:`enter_script`)."""
        self._get(node)
        if not cmd:
            raise DevClusterError("an empty command cannot run in a host")
        return [str(self.enter_script), node, *cmd]

    def popen(self, node: str, cmd: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.argv(node, cmd), **popen_kwargs)

    def run(self, node: str, cmd: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.argv(node, cmd), **kw)

    # -- faults ---------------------------------------------------------------------------------

    def link_down(self, node: str) -> None:
        net.ip("link", "set", "dev", self._veth(node), "down")

    def link_up(self, node: str) -> None:
        net.ip("link", "set", "dev", self._veth(node), "up")

    def throttle(self, node: str, mbit: float, *, burst_kb: int | None = None) -> None:
        """Rate-limit the host's link to ``mbit`` Mbit/s both ways (``tc ... tbf`` on both ends
        of its veth: this kernel has tbf but no netem). ``burst_kb`` below the MTU (1.5 kB)
        lets nothing through: a link that is up but passes no traffic."""
        if not mbit > 0:
            raise DevClusterError("throttle: the rate must be > 0 Mbit/s")
        netns = next(h.netns for h in self.plan.hosts if h.name == node)
        rate = f"{max(1, round(mbit * 1e6))}bit"
        # burst: ~10 ms at the rate, at least 16 kB; latency bounds the queue
        burst = f"{burst_kb if burst_kb is not None else max(16, int(mbit * 1.25 * 10))}kb"
        for prefix, dev in (([], self._veth(node)), (["ip", "netns", "exec", netns], "eth0")):
            self.unthrottle_dev(prefix, dev)
            check_call([*prefix, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                        "burst", burst, "latency", "50ms"])

    def unthrottle(self, node: str) -> None:
        """Remove :meth:`throttle`'s limits."""
        netns = next(h.netns for h in self.plan.hosts if h.name == node)
        self.unthrottle_dev([], self._veth(node))
        self.unthrottle_dev(["ip", "netns", "exec", netns], "eth0")

    @staticmethod
    def unthrottle_dev(prefix: list[str], dev: str) -> None:
        subprocess.run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"], capture_output=True,
                       check=False, timeout=30)

    def kill_host(self, node: str) -> None:
        """SIGKILL the host's PID 1: the kernel then kills every process of the host. The host
        cannot be entered afterwards."""
        running = self._get(node, alive=False)
        if running.killed:
            return
        self._kill(running)
        self._write_enter_script()
        if pids_in_namespace(running.pidns, live_only=True):
            raise DevClusterError(f"host {node}: processes survive the kill of its PID 1")

    # -- internals ------------------------------------------------------------------------------

    def _get(self, node: str, *, alive: bool = True) -> _Running:
        if self._state != "started":
            raise DevClusterError(f"the cluster is {self._state}, not started")
        running = self._running.get(node)
        if running is None:
            raise DevClusterError(f"unknown host {node!r} (hosts: {', '.join(self.names)})")
        if alive and running.killed:
            raise DevClusterError(f"host {node} was killed")
        return running

    def _veth(self, node: str) -> str:
        self._get(node, alive=False)
        return next(h.veth for h in self.plan.hosts if h.name == node)

    def _launch_all(self, plan: NetPlan) -> None:
        logs = {h.name: self.root / "log" / f"{h.name}.host.log" for h in plan.hosts}
        procs = {}
        for h in plan.hosts:
            procs[h.name] = hostproc.launch(h.name, h.netns, self.root / "etc", self.visible,
                                            logs[h.name])
            self._procs.append(procs[h.name])
        hostproc.wait_ready(procs, logs, _READY_TIMEOUT_S)
        mine = ns_link(os.getpid())
        for h in plan.hosts:
            outer = procs[h.name]
            kids = children(outer.pid)
            links = [ns_link(k) for k in kids]
            if len(kids) != 1 or links[0] in (None, mine):
                raise DevClusterError(f"host {h.name}: cannot find its PID 1 (children {kids})")
            pidns = links[0]
            assert pidns is not None  # checked just above
            ns_fd = _hold_namespace(kids[0], pidns)
            if ns_fd is None:
                raise DevClusterError(f"host {h.name}: its PID 1 ({kids[0]}) exited at start")
            host = VirtualHost(name=h.name, addr=h.addr, pid=kids[0])
            self._running[h.name] = _Running(host=host, pidns=pidns, outer=outer, ns_fd=ns_fd)
            self._procs.remove(outer)

    def _kill(self, running: _Running) -> None:
        running.killed = True
        # Kill PID 1 only: its parent (unshare) reaps it and exits. Killing unshare first
        # would orphan PID 1 to this machine's init, which may take seconds to reap it.
        if ns_link(running.host.pid) == running.pidns:  # still our PID 1, not a reused pid
            kill_quietly(running.host.pid, signal.SIGKILL)
        try:
            running.outer.wait(_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_quietly(running.outer.pid, signal.SIGKILL)  # --kill-child takes PID 1 along
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.outer.wait(_EXIT_TIMEOUT_S)
        if running.outer.stdout is not None:
            running.outer.stdout.close()
        wait_until(lambda: not pids_in_namespace(running.pidns, live_only=True), _EXIT_TIMEOUT_S)

    def _write_enter_script(self) -> None:
        live = [(r.host.name, r.host.pid, r.pidns) for r in self._running.values() if not r.killed]
        dead = [r.host.name for r in self._running.values() if r.killed]
        tmp = self.enter_script.with_suffix(".tmp")
        tmp.write_text(hostproc.enter_script(live, dead))
        tmp.chmod(0o755)
        tmp.replace(self.enter_script)


def _hold_namespace(pid: int, link: str) -> int | None:
    """An open handle on ``pid``'s PID namespace when it is still ``link`` (None: the process
    is gone, or its pid was reused)."""
    try:
        fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    if f"pid:[{os.fstat(fd).st_ino}]" != link:
        os.close(fd)
        return None
    return fd


__all__ = ["HostCluster", "VirtualHost"]
