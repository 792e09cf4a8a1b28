"""A real Slurm cluster on this machine for integration tests: one slurmctld, N slurmd.

Debian's Slurm 22.05 packages (``scripts/sysdeps.sh``) run one controller and N virtual nodes,
one ``slurmd -N nodeX`` per node on its own port, all on loopback, with a private munged. Needs
root (the slurmds run in a private mount namespace whose /etc/hosts maps nodeX -> 127.0.0.1, so
job steps can resolve node names; the real /etc/hosts is untouched). Every daemon is stopped by
PID.

    cluster = SlurmCluster(nodes=4).start()
    try:
        job = cluster.sbatch(["-N2"], "srun hostname")
        assert cluster.wait_job(job) == "COMPLETED"
    finally:
        cluster.stop()
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ports import free_port

REQUIRED_PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue",
                     "scancel", "unshare", "mount")
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED",
                           "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                           "STAGE_OUT"})
_DAEMONS = ("slurmd", "slurmctld", "munged")  # process names stop() may signal
_KILL_WAIT_S = 5.0


class SlurmClusterError(RuntimeError):
    """The test cluster could not be started or stopped."""


def missing_programs() -> list[str]:
    """Programs the cluster needs that are not on PATH (plus sbin, where Debian puts daemons)."""
    return [p for p in REQUIRED_PROGRAMS if _which(p) is None]


def _which(program: str) -> str | None:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return shutil.which(program, path=path)


class SlurmCluster:
    """A private Slurm cluster under ``root`` (a fresh short /tmp directory by default)."""

    def __init__(self, nodes: int = 4, cpus: int = 4, root: Path | None = None) -> None:
        if nodes < 1 or cpus < 1:
            raise ValueError("nodes and cpus must be >= 1")
        self._own_root = root is None
        # unix socket paths are limited to ~100 characters: keep the root short
        self.root = Path(tempfile.mkdtemp(prefix="tgslurm-", dir="/tmp")) if root is None else root
        self.nodes: tuple[str, ...] = tuple(f"node{i}" for i in range(1, nodes + 1))
        self.cpus = cpus
        self.conf = self.root / "etc" / "slurm.conf"
        self.jobcomp = self.root / "log" / "jobcomp.txt"
        self.jobs_dir = self.root / "jobs"
        self.env: dict[str, str] = {"SLURM_CONF": str(self.conf)}
        self.ctld_port = 0
        self.node_port0 = 0
        self.start_s: float | None = None
        """Seconds start() took."""
        self.stop_s: float | None = None
        """Seconds stop() took."""
        self._started = False
        self._stopped = False

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        t0 = time.monotonic()
        self._started = True
        # The daemons fork into the background; as a subreaper this process becomes their
        # parent, so stop() can reap them instead of leaving zombies for init.
        _set_child_subreaper(True)
        try:
            for sub in ("etc", "state/ctld", "log", "run", "munge", "jobs"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            for path in (self.root, self.root / "munge"):
                path.chmod(0o755)  # munged wants its socket directory reachable (o+x)
            self._start_munged()
            self.ctld_port = free_port("0.0.0.0")
            self.node_port0 = _free_port_block(len(self.nodes) + 1, avoid={self.ctld_port})
            self._write_config()
            self._check(["slurmctld", "-f", str(self.conf)])
            self._start_slurmds()
            self.wait_idle(timeout_s=30)
        except BaseException:
            with contextlib.suppress(Exception):
                self.stop()
            raise
        finally:
            _set_child_subreaper(False)
            _reap_daemon_zombies()  # the daemons' exited intermediate forks
        self.start_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Cancel every job, stop every daemon by PID (SIGTERM, SIGKILL after 5 s), check that
        they are gone. Safe to call twice."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        t0 = time.monotonic()
        with contextlib.suppress(Exception):  # the controller may not be up (failed start)
            self._cancel_all()
        survivors: list[str] = []
        for pid_file in [*sorted((self.root / "run").glob("slurmd_*.pid")),
                         self.root / "run" / "slurmctld.pid", self.root / "munge" / "munged.pid"]:
            pid = _read_pid(pid_file)
            if pid is not None and not _stop_pid(pid):
                survivors.append(f"{pid} ({pid_file.name})")
            pid_file.unlink(missing_ok=True)
        _reap_daemon_zombies()
        self.stop_s = time.monotonic() - t0
        if survivors:
            raise SlurmClusterError(f"daemons still alive after SIGKILL: {', '.join(survivors)}")
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- client commands ------------------------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, timeout_s: float = 60, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run a client command against this cluster (``SLURM_CONF`` set, other ``SLURM_*``
        variables of the caller removed)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(self.env)
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=env,
                              timeout=timeout_s, check=False, cwd=self.jobs_dir)
        if check and proc.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def sbatch(self, args: Sequence[str], script: str) -> str:
        """Submit ``script`` (``--wrap``); output goes to :meth:`output`. Returns the job id."""
        proc = self.run(["sbatch", "--parsable", "-o", str(self.jobs_dir / "%j.out"), *args,
                         "--wrap", script], check=True)
        return proc.stdout.strip().split(";")[0]

    def output(self, job_id: str) -> str:
        path = self.jobs_dir / f"{job_id}.out"
        return path.read_text() if path.exists() else ""

    def job_state(self, job_id: str) -> str | None:
        proc = self.run(["scontrol", "show", "job", "-o", job_id])
        match = re.search(r"\bJobState=(\S+)", proc.stdout)
        return match.group(1) if match else None

    def wait_job(self, job_id: str, *, timeout_s: float = 30,
                 until: Callable[[str | None], bool] | None = None) -> str | None:
        """Poll until the job has left the active states (or ``until(state)``); its state."""
        done = until or (lambda state: state is not None and state not in ACTIVE_STATES)
        state = self.job_state(job_id)
        deadline = time.monotonic() + timeout_s
        while not done(state) and time.monotonic() < deadline:
            time.sleep(0.1)
            state = self.job_state(job_id)
        return state

    def idle_nodes(self) -> list[str]:
        """Nodes that are idle and responding (``sinfo -t idle`` also lists ``idle*``, which a
        resumed node shows for a moment until slurmctld pings it)."""
        proc = self.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N %T"])
        if proc.returncode != 0:
            return []
        pairs = (line.split() for line in proc.stdout.splitlines())
        return sorted({p[0] for p in pairs if len(p) == 2 and p[1] == "idle"})

    def wait_idle(self, *, timeout_s: float = 30, nodes: Sequence[str] | None = None) -> None:
        """Poll ``sinfo -t idle`` until every node (or ``nodes``) is idle and responding."""
        wanted = set(self.nodes if nodes is None else nodes)
        deadline = time.monotonic() + timeout_s
        while not wanted <= set(self.idle_nodes()):
            if time.monotonic() > deadline:
                raise SlurmClusterError(
                    f"nodes not idle after {timeout_s:g} s: "
                    f"{self.run(['sinfo', '-N']).stdout}\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, chars: int = 1500) -> str:
        """The end of every daemon log, for failure messages."""
        parts = []
        for log in [*sorted((self.root / "log").glob("*.log")), self.root / "munge/munged.log"]:
            with contextlib.suppress(OSError):
                parts.append(f"== {log.name}\n{log.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    # -- internals ----------------------------------------------------------------------------

    def _check(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30,
                              check=False, env={**os.environ, **self.env, **(env or {})})
        if proc.returncode != 0:
            raise SlurmClusterError(
                f"{' '.join(argv)} failed ({proc.returncode}): {proc.stdout}{proc.stderr}\n"
                f"{self.log_tail()}")

    def _start_munged(self) -> None:
        munge = self.root / "munge"
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._check(["munged", f"--key-file={key}", f"--socket={munge / 'munge.sock'}",
                     f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
                     f"--seed-file={munge / 'munged.seed'}"])

    def _start_slurmds(self) -> None:
        hosts = self.root / "etc" / "hosts"
        host = socket.gethostname().split(".")[0]
        hosts.write_text(f"127.0.0.1 localhost {host}\n127.0.0.1 {' '.join(self.nodes)}\n")
        for node in self.nodes:
            (self.root / "state" / f"slurmd_{node}").mkdir(parents=True, exist_ok=True)
        # One private mount namespace for all slurmds (they daemonize; unshare then exits).
        # The script is fixed text; paths and node names arrive as positional arguments.
        script = ('mount --bind "$1" /etc/hosts || exit 1; conf=$2; shift 2; '
                  'for node in "$@"; do slurmd -f "$conf" -N "$node" || exit 1; done')
        self._check(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                     str(hosts), str(self.conf), *self.nodes])

    def _write_config(self) -> None:
        r = self.root
        host = socket.gethostname().split(".")[0]
        lines = [
            "ClusterName=tgtest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire is also the hold before a requeued job may start again (default 120 s)
            f"AuthInfo=socket={r}/munge/munge.sock,cred_expire=10",
            f"StateSaveLocation={r}/state/ctld",
            f"SlurmdSpoolDir={r}/state/slurmd_%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd_%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd_%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "MailProg=/bin/true",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_interval=2",
            "MpiDefault=none",
            "ReturnToService=1",  # a drain is never undone by Slurm itself (2 would)
            "SlurmdParameters=config_overrides",
            "SlurmdTimeout=10",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=300",
            "JobRequeue=1",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp}",
        ]
        for i, node in enumerate(self.nodes, 1):
            lines.append(f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 "
                         f"Port={self.node_port0 + i} CPUs={self.cpus} RealMemory=4000 "
                         "State=UNKNOWN")
        lines.append(f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES "
                     "DefaultTime=1:00:00 MaxTime=INFINITE OverSubscribe=EXCLUSIVE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")

    def _cancel_all(self) -> None:
        """scancel every job and wait (up to KillWait + a margin) for their processes to end."""
        proc = self.run(["squeue", "-h", "-o", "%i"], timeout_s=10)
        job_ids = proc.stdout.split()
        if job_ids:
            self.run(["scancel", *job_ids], timeout_s=10)
        deadline = time.monotonic() + _KILL_WAIT_S + 5
        while time.monotonic() < deadline:
            states = self.run(["squeue", "-h", "-o", "%T"], timeout_s=10).stdout.split()
            if not any(s in ACTIVE_STATES for s in states):
                return
            time.sleep(0.1)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _free_port_block(count: int, avoid: set[int]) -> int:
    """A port P with P .. P+count-1 all free (outside the usual ephemeral range)."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 32000 - count)
        block = range(base, base + count)
        if not avoid.intersection(block) and all(_port_free(p) for p in block):
            return base
    raise SlurmClusterError(f"no {count} consecutive free ports found")


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    """Running (not a zombie nobody has reaped yet) and still one of our daemons."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(") ", 1)[-1][:1] == "Z":
        return False
    return _comm(pid) in _DAEMONS


def _stop_pid(pid: int) -> bool:
    """SIGTERM, then SIGKILL after 5 s; True when the process is gone. A pid that is not (or no
    longer) one of our daemons is left alone."""
    for sig, wait_s in ((signal.SIGTERM, _KILL_WAIT_S), (signal.SIGKILL, 5.0)):
        if not _alive(pid):
            break
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    return not _alive(pid)


def _reap_daemon_zombies() -> None:
    """Reap exited daemons (and their intermediate forks) that are our children; only those,
    so no other child's ``Popen.wait`` is disturbed."""
    me = os.getpid()
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_file.read_text()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1 : stat.rfind(")")]
        state, ppid = stat[stat.rfind(")") + 2 :].split()[:2]
        if state == "Z" and int(ppid) == me and comm in _DAEMONS:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(stat_file.parent.name), os.WNOHANG)


def _set_child_subreaper(on: bool) -> None:
    """prctl(PR_SET_CHILD_SUBREAPER): orphaned descendants are reparented to this process."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, int(on), 0, 0, 0)  # 36 = PR_SET_CHILD_SUBREAPER (Linux >= 3.4)


__all__ = ["SlurmCluster", "SlurmClusterError", "missing_programs"]
