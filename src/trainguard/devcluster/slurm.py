"""A Slurm cluster across the virtual hosts of a :class:`HostCluster`.

munged and ``slurmctld`` run in the root namespace (the bridge address is the controller's),
one ``slurmd -D -N <host>`` runs inside each host with its spool, pid file and log under the
host's private /tmp and /var/log. Client commands (srun, sbatch, sinfo) run from the root
namespace with :meth:`SlurmHostCluster.env`.

    with SlurmHostCluster(4, tmp_path) as slurm:
        out = slurm.run(["srun", "-N4", "hostname"]).stdout   # host1..host4
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from trainguard.devcluster import net
from trainguard.devcluster.common import (
    SLURM_PROGRAMS,
    DevClusterError,
    check_call,
    comm,
    is_zombie,
    kill_quietly,
    missing_requirements,
    wait_until,
    which,
)
from trainguard.devcluster.hosts import HostCluster, VirtualHost
from trainguard.devcluster.netplan import NetPlan

SLURMD_PORT = 6818  # every host has its own network namespace, so one port serves all
_TERM_WAIT_S = 5.0


class SlurmHostCluster:
    """Slurm over ``hosts`` virtual hosts under ``root``; ``cpus`` advertised per host."""

    def __init__(self, hosts: int | Sequence[str], root: Path, *, prefix: str = "tgh",
                 cpus: int = 2) -> None:
        if cpus < 1:
            raise DevClusterError(f"cpus must be >= 1, got {cpus}")
        self.cluster = HostCluster(hosts, root, prefix=prefix)
        self.root = self.cluster.root
        self.cpus = cpus
        self.conf = self.root / "etc" / "slurm.conf"
        self.jobs_dir = self.root / "shared" / "jobs"
        self.start_s: float | None = None
        self.stop_s: float | None = None
        self._slurmds: dict[str, subprocess.Popen[bytes]] = {}
        self._started = False
        self._stopped = False

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> SlurmHostCluster:
        reasons = missing_requirements(SLURM_PROGRAMS)
        if reasons:
            raise DevClusterError(f"cannot start a Slurm dev cluster: {'; '.join(reasons)}")
        t0 = time.monotonic()
        self._started = True
        try:
            self.cluster.start()
            for sub in ("state/ctld", "shared/jobs"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            self._start_munged()
            self.conf.write_text(slurm_conf(self.cluster.plan, self.root, self._run_dir(),
                                            cpus=self.cpus,
                                            ctld_port=_free_port(self.cluster.bridge_addr)))
            self._daemon(["slurmctld", "-c", "-i", "-f", str(self.conf)])
            for host in self.cluster.hosts:
                self._start_slurmd(host)
            self.wait_idle(timeout_s=30)
        except BaseException:
            with contextlib.suppress(DevClusterError):
                self.stop()
            raise
        self.start_s = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop the slurmds, slurmctld and munged by pid, then everything HostCluster.stop
        does. Safe after a failed start and when called twice."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        t0 = time.monotonic()
        try:
            for name in list(self._slurmds):
                with contextlib.suppress(DevClusterError):
                    for pid in self.cluster.processes(name):
                        if comm(pid) == "slurmd":
                            _terminate(pid, "slurmd")
                with contextlib.suppress(subprocess.TimeoutExpired):  # the host kill ends it
                    self._slurmds[name].wait(_TERM_WAIT_S)
            for pid_file, daemon in ((self._run_dir() / "slurmctld.pid", "slurmctld"),
                                     (self._run_dir() / "munged.pid", "munged")):
                daemon_pid = _read_pid(pid_file)
                if daemon_pid is not None:
                    _terminate(daemon_pid, daemon)
                pid_file.unlink(missing_ok=True)
        finally:
            self.cluster.stop()  # also removes the run dir (and kills what a failure left)
        self.stop_s = time.monotonic() - t0

    def __enter__(self) -> SlurmHostCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients --------------------------------------------------------------------------------

    @property
    def hosts(self) -> tuple[VirtualHost, ...]:
        return self.cluster.hosts

    def env(self) -> dict[str, str]:
        """The caller's environment without its ``SLURM_*`` variables, plus ``SLURM_CONF``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, argv: Sequence[str], *, timeout_s: float = 60,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command from the root namespace against this cluster."""
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env(),
                                  timeout=timeout_s, check=False, cwd=self.jobs_dir)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DevClusterError(f"{' '.join(argv)}: {exc}") from exc
        if check and proc.returncode != 0:
            raise DevClusterError(f"{' '.join(argv)} failed ({proc.returncode}): "
                                  f"{' '.join(proc.stderr.split())[:500]}")
        return proc

    def idle_hosts(self) -> list[str]:
        """Hosts that are idle and responding (``idle*`` is not)."""
        proc = self.run(["sinfo", "-h", "-N", "-o", "%N %T"])
        pairs = (line.split() for line in proc.stdout.splitlines())
        return sorted({p[0] for p in pairs if len(p) == 2 and p[1] == "idle"})

    def wait_idle(self, timeout_s: float = 30) -> None:
        wanted = {h.name for h in self.cluster.hosts}
        if not wait_until(lambda: wanted <= set(self.idle_hosts()), timeout_s, interval_s=0.1):
            raise DevClusterError(f"hosts not idle after {timeout_s:g} s: "
                                  f"{' '.join(self.run(['sinfo', '-N', '-h']).stdout.split())}; "
                                  f"{self.log_tail()}")

    def log_tail(self, chars: int = 600) -> str:
        """The end of the controller's and every slurmd's log (read through /proc/PID/root)."""
        logs = [self.root / "log" / "slurmctld.log"]
        logs += [Path(f"/proc/{h.pid}/root/var/log/slurmd.log") for h in self.cluster.hosts]
        parts = []
        for log in logs:
            with contextlib.suppress(OSError):
                parts.append(f"== {log}\n{log.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    # -- internals ------------------------------------------------------------------------------

    def _daemon(self, argv: Sequence[str]) -> None:
        exe = which(argv[0])
        if exe is None:
            raise DevClusterError(f"{argv[0]} is not installed")
        try:
            check_call([exe, *argv[1:]])
        except DevClusterError as exc:
            raise DevClusterError(f"{exc}; {self.log_tail()}") from exc

    def _run_dir(self) -> Path:
        """munged's socket, key and log and the daemons' pid files. Not under ``root``: munged
        insists that every directory above its socket is world-executable, which pytest's
        tmp_path is not, and the socket path must stay short. A crashed instance's daemons are
        killed from here by the next start (see net.purge)."""
        return net.run_dir(self.cluster.plan.tag)

    def _start_munged(self) -> None:
        munge = self._run_dir()
        munge.mkdir(mode=0o755, parents=True, exist_ok=True)
        munge.chmod(0o755)
        key = munge / "munge.key"
        key.unlink(missing_ok=True)
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._daemon(["munged", f"--key-file={key}", f"--socket={munge / 'munge.sock'}",
                      f"--pid-file={munge / 'munged.pid'}",
                      f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"])

    def _start_slurmd(self, host: VirtualHost) -> None:
        slurmd = which("slurmd") or "slurmd"
        script = 'mkdir -p /tmp/slurmd && exec "$@"'
        self._slurmds[host.name] = self.cluster.popen(
            host.name, ["/bin/sh", "-c", script, "sh", slurmd, "-D", "-f", str(self.conf),
                        "-N", host.name],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)


def slurm_conf(plan: NetPlan, root: Path, run_dir: Path, *, cpus: int, ctld_port: int) -> str:
    """slurm.conf for the hosts of ``plan`` (pure)."""
    ctld_host = socket.gethostname().split(".")[0]
    lines = [
        "ClusterName=tgdev",
        f"SlurmctldHost={ctld_host}({plan.bridge_addr})",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={SLURMD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={run_dir}/munge.sock,cred_expire=10",
        f"StateSaveLocation={root}/state/ctld",
        "SlurmdSpoolDir=/tmp/slurmd",  # the host's private /tmp
        "SlurmdPidFile=/tmp/slurmd/slurmd.pid",
        f"SlurmctldPidFile={run_dir}/slurmctld.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        "SlurmdLogFile=/var/log/slurmd.log",  # the host's private /var/log
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
        "ReturnToService=1",
        "SlurmdTimeout=10",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=300",
        "JobRequeue=1",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root}/log/jobcomp.txt",
    ]
    if cpus > (os.cpu_count() or 1):
        lines.append("SlurmdParameters=config_overrides")
    for host in plan.hosts:
        lines.append(f"NodeName={host.name} NodeHostname={host.name} NodeAddr={host.addr} "
                     f"CPUs={cpus} RealMemory=1000 State=UNKNOWN")
    names = ",".join(h.name for h in plan.hosts)
    lines.append(f"PartitionName=debug Nodes={names} Default=YES DefaultTime=1:00:00 "
                 "MaxTime=INFINITE OverSubscribe=EXCLUSIVE State=UP")
    return "\n".join(lines) + "\n"


def _free_port(addr: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        port: int = s.getsockname()[1]
        return port


def _read_pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(path.read_text().split()[0])
    return None


def _terminate(pid: int, name: str) -> None:
    """SIGTERM, SIGKILL after 5 s; only while ``pid`` is still a process called ``name``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if comm(pid) != name:
            return
        kill_quietly(pid, sig)
        if wait_until(lambda: comm(pid) != name or is_zombie(pid), _TERM_WAIT_S):
            return
    raise DevClusterError(f"{name} (pid {pid}) survives SIGKILL")


__all__ = ["SLURMD_PORT", "SlurmHostCluster", "slurm_conf"]
