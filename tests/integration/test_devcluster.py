"""The namespaced multi-host dev cluster (trainguard.devcluster) on this machine: real network,
mount, UTS and PID namespaces. Needs root; skips otherwise (fails under CI=true)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainguard.devcluster import DevClusterError, HostCluster, missing_requirements
from trainguard.devcluster import net as devnet
from trainguard.devcluster.common import SLURM_PROGRAMS, is_zombie, ns_link, pids_in_namespace

pytestmark = [pytest.mark.integration, pytest.mark.multihost]
PY = sys.executable
# A TCP server: prints "ready PORT", then answers each connection with its hostname.
SERVER = ("import socket,sys\n"
          "s=socket.create_server((sys.argv[1],0)); print('ready',s.getsockname()[1],flush=True)\n"
          "while True:\n c,_=s.accept(); c.sendall(socket.gethostname().encode()); c.close()\n")
# Connect to argv[1]:argv[2] (1 s timeout), print what the server sent; exit 1 if unreachable.
CLIENT = ("import socket,sys\n"
          "try:\n"
          " c=socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=1)\n"
          " print(c.recv(100).decode())\n"
          "except OSError as e:\n print(e,file=sys.stderr); sys.exit(1)\n")


def _unavailable(reasons: list[str]) -> None:
    if reasons:
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(f"{'; '.join(reasons)} (CI=true: the dev cluster is required)",
                        pytrace=False)
        pytest.skip("; ".join(reasons))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[HostCluster]:
    _unavailable(missing_requirements())
    with HostCluster(3, tmp_path / "c", prefix="tgt") as c:
        yield c


def _read_line(proc: subprocess.Popen[str], timeout_s: float = 10) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout_s), "no output in time"
        return proc.stdout.readline().strip()


def _server(cluster: HostCluster, node: str) -> tuple[subprocess.Popen[str], int]:
    proc = cluster.popen(node, [PY, "-c", SERVER, "0.0.0.0"], stdout=subprocess.PIPE, text=True)
    word, port = _read_line(proc).split()
    assert word == "ready"
    return proc, int(port)


def _client(
    cluster: HostCluster, node: str, addr: str, port: int
) -> subprocess.CompletedProcess[Any]:
    return cluster.run(node, [PY, "-c", CLIENT, addr, str(port)], capture_output=True, text=True,
                       timeout=20)


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()  # relayed into the host: the server ends, nothing is orphaned
    proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


def test_each_host_has_its_name_address_and_namespaces(cluster: HostCluster) -> None:
    assert [h.name for h in cluster.hosts] == ["host1", "host2", "host3"]
    addrs = {h.addr for h in cluster.hosts} | {cluster.bridge_addr}
    assert len(addrs) == 4
    mine = {kind: ns_link(os.getpid(), kind) for kind in ("net", "pid", "mnt", "uts")}
    for host in cluster.hosts:
        assert host.pid not in (1, os.getpid())
        for kind, link in mine.items():
            assert ns_link(host.pid, kind) not in (None, link), kind
        out = cluster.run(host.name, ["sh", "-c", "hostname; ip -4 -o addr show dev eth0; "
                                      "getent hosts controller host1; echo $$"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
        assert out[0] == host.name
        assert f" {host.addr}/24 " in out[1]
        assert out[2].split() == [cluster.bridge_addr, "controller"]
        assert out[3].split() == [cluster.host("host1").addr, "host1"]
        assert int(out[4]) < 100  # a fresh PID namespace numbers from 1


def test_tcp_between_hosts_and_to_the_root_namespace(cluster: HostCluster) -> None:
    server, port = _server(cluster, "host1")
    try:
        by_name = _client(cluster, "host2", "host1", port)
        assert (by_name.returncode, by_name.stdout.strip()) == (0, "host1"), by_name.stderr
        with socket.create_connection((cluster.host("host1").addr, port), timeout=5) as conn:
            assert conn.recv(100) == b"host1"
    finally:
        _stop(server)


def test_root_server_on_the_bridge_is_reachable_as_controller(cluster: HostCluster) -> None:
    srv = socket.create_server((cluster.bridge_addr, 0))
    srv.settimeout(20)

    def answer() -> None:
        conn, _ = srv.accept()
        conn.sendall(b"root-side")
        conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        out = _client(cluster, "host3", "controller", srv.getsockname()[1])
        assert (out.returncode, out.stdout.strip()) == (0, "root-side"), out.stderr
    finally:
        thread.join(20)
        srv.close()


def test_tmp_and_var_log_are_private_per_host(cluster: HostCluster) -> None:
    token = f"tg-private-{os.getpid()}-{time.monotonic_ns()}"
    for host in cluster.hosts:  # fresh and empty at start
        assert cluster.run(host.name, ["stat", "-c", "%s", "/var/log/kern.log"],
                           capture_output=True, text=True, check=True).stdout.strip() == "0"
    cluster.run("host2", ["sh", "-c", f"echo {token} > /tmp/{token}; echo {token} >> "
                          "/var/log/kern.log"], check=True)
    seen = cluster.run("host2", ["sh", "-c", f"cat /tmp/{token} /var/log/kern.log"],
                       capture_output=True, text=True, check=True).stdout
    assert seen.split() == [token, token]
    assert not Path(f"/tmp/{token}").exists()
    assert token not in _read(Path("/var/log/kern.log"))
    other = cluster.run("host1", ["sh", "-c", f"test ! -e /tmp/{token} && cat /var/log/kern.log"],
                        capture_output=True, text=True)
    assert (other.returncode, other.stdout) == (0, "")
    fs = cluster.run("host2", ["stat", "-f", "-c", "%T", "/tmp", "/var/log"],
                     capture_output=True, text=True, check=True).stdout.split()
    assert fs == ["tmpfs", "tmpfs"]


def test_a_checkout_under_tmp_is_seen_by_every_host_and_tmp_stays_private(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make test` in a clone under /tmp: the hosts' private /tmp must not hide the checkout
    (the working directory, where its venv's python lies), but hides the rest of /tmp."""
    _unavailable(missing_requirements())
    checkout = tmp_path / "checkout"  # under /tmp, outside the cluster root
    (checkout / ".venv" / "bin").mkdir(parents=True)
    python = checkout / ".venv" / "bin" / "python"
    python.symlink_to(PY)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "secret.txt").write_text("root namespace only")
    monkeypatch.chdir(checkout)  # as make test runs from the repository root
    with HostCluster(2, tmp_path / "c", prefix="tgt") as cluster:
        assert checkout in cluster.visible
        for host in cluster.hosts:
            out = cluster.run(host.name, [str(python), "-c",
                                          "import os, socket; print(os.getcwd(), "
                                          "socket.gethostname())"],
                              capture_output=True, text=True, timeout=30)
            assert (out.returncode, out.stdout.split()) == (0, [str(checkout), host.name]), \
                out.stderr
            hidden = cluster.run(host.name, ["test", "-e", str(other / "secret.txt")])
            assert hidden.returncode == 1
            fs = cluster.run(host.name, ["stat", "-f", "-c", "%T", "/tmp"],
                             capture_output=True, text=True, check=True).stdout.split()
            assert fs == ["tmpfs"]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def test_shared_dir_is_read_write_from_every_host(cluster: HostCluster) -> None:
    for host in cluster.hosts:
        cluster.run(host.name, ["sh", "-c", f'hostname > "{cluster.shared}/{host.name}.txt"'],
                    check=True)
    names = [h.name for h in cluster.hosts]
    for host in cluster.hosts:
        out = cluster.run(host.name, ["sh", "-c", f'cd "{cluster.shared}" && cat *.txt'],
                          capture_output=True, text=True, check=True).stdout.split()
        assert sorted(out) == names
    assert sorted(p.read_text().strip() for p in cluster.shared.glob("*.txt")) == names


def test_enter_keeps_cwd_and_environment_and_rejects_unknown_hosts(cluster: HostCluster) -> None:
    out = cluster.run("host1", ["sh", "-c", 'pwd; echo "$TG_MARK"'], cwd=cluster.shared,
                      env={**os.environ, "TG_MARK": "kept"}, capture_output=True, text=True,
                      check=True).stdout.split("\n")
    assert out[:2] == [str(cluster.shared), "kept"]
    assert cluster.run("host1", ["sh", "-c", "exit 7"]).returncode == 7
    bad = subprocess.run([str(cluster.enter_script), "nosuch", "true"], capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "enter: unknown host 'nosuch' (hosts: host1 host2 host3)"]
    with pytest.raises(DevClusterError, match="unknown host 'nosuch'"):
        cluster.argv("nosuch", ["true"])


def test_enter_passes_stdin_relays_sigterm_and_never_orphans(cluster: HostCluster) -> None:
    echoed = cluster.run("host1", ["cat"], input="through stdin", capture_output=True,
                         text=True, check=True)
    assert echoed.stdout == "through stdin"
    graceful = cluster.popen("host1", ["sh", "-c", 'trap "echo got-term; exit 0" TERM; '
                                       "echo up; while :; do sleep 0.05; done"],
                             stdout=subprocess.PIPE, text=True)
    assert _read_line(graceful) == "up"
    graceful.terminate()
    assert graceful.wait(10) == 0
    assert graceful.stdout is not None and graceful.stdout.read().strip() == "got-term"
    graceful.stdout.close()
    killed = cluster.popen("host1", ["sleep", "1003"])
    deadline = time.monotonic() + 10
    while not _sleeps(cluster, "host1"):
        assert time.monotonic() < deadline
    killed.kill()  # only the enter process; the sleep inside the host must not outlive it
    assert killed.wait(10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while _sleeps(cluster, "host1"):
        assert time.monotonic() < deadline, _sleeps(cluster, "host1")


def test_link_down_cuts_a_host_off_and_link_up_restores_it(cluster: HostCluster) -> None:
    server, port = _server(cluster, "host1")
    try:
        assert _client(cluster, "host2", "host1", port).returncode == 0
        cluster.link_down("host2")
        assert _client(cluster, "host2", "host1", port).returncode == 1
        assert _client(cluster, "host2", "controller", 1).returncode == 1
        assert _client(cluster, "host3", "host1", port).returncode == 0  # others unaffected
        cluster.link_up("host2")
        deadline = time.monotonic() + 10  # a real link: carrier comes back asynchronously
        while (back := _client(cluster, "host2", "host1", port)).returncode != 0:
            assert time.monotonic() < deadline, back.stderr
        assert back.stdout.strip() == "host1"
    finally:
        _stop(server)


def test_processes_lists_a_sleep_and_kill_host_ends_them_all(cluster: HostCluster) -> None:
    sleeper = cluster.popen("host2", ["sleep", "1000"])
    spawner = cluster.popen("host2", ["sh", "-c", "sleep 1001 & sleep 1002 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(_sleeps(cluster, "host2")) < 3:
            assert time.monotonic() < deadline, _sleeps(cluster, "host2")
        assert sorted(_sleeps(cluster, "host2").values()) == [
            "sleep 1000", "sleep 1001", "sleep 1002"]
        assert cluster.host("host2").pid not in cluster.processes("host2")
        assert _sleeps(cluster, "host1") == {}
        pids = [*cluster.processes("host2"), cluster.host("host2").pid]
        link = ns_link(cluster.host("host2").pid)
        cluster.kill_host("host2")
        assert cluster.processes("host2") == []
        assert [p for p in pids if Path(f"/proc/{p}").exists()] == []
        assert sleeper.wait(10) == -signal.SIGKILL
        with pytest.raises(DevClusterError, match="host2 was killed"):
            cluster.run("host2", ["true"])
        dead = subprocess.run([str(cluster.enter_script), "host2", "true"], capture_output=True,
                              text=True, check=False)
        assert (dead.returncode, dead.stderr.strip()) == (2, "enter: host 'host2' was killed")
        assert cluster.run("host1", ["true"]).returncode == 0
        assert spawner.wait(10) == -signal.SIGKILL  # reaped: nothing else holds host2's
        # The kernel hands a freed namespace's number to the next new one (the lowest free);
        # the cluster holds host2's until it stops, so no host started meanwhile (another
        # test's, holding namespaces of its own) passes for host2's survivors.
        assert _new_namespaces(32).isdisjoint({link})
    finally:
        for proc in (sleeper, spawner):
            proc.kill()
            proc.wait(10)


def _new_namespaces(count: int) -> set[str]:
    """The links of ``count`` new PID namespaces, alive at the same time."""
    holders = [subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sh", "-c",
                                 "readlink /proc/self/ns/pid; exec sleep 60"],
                                stdout=subprocess.PIPE, text=True) for _ in range(count)]
    try:
        return {_read_line(p) for p in holders}
    finally:
        for p in holders:
            p.kill()
            p.wait(10)


def _sleeps(cluster: HostCluster, node: str) -> dict[int, str]:
    found = {}
    for pid in cluster.processes(node):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0] == b"sleep":
            found[pid] = " ".join(a.decode() for a in argv if a)
    return found


def _residue(tag: str, pid_links: list[str], pids: list[int]) -> list[str]:
    ip_netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    ip_link = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found = [line for line in (ip_netns + ip_link).splitlines() if tag in line]
    # Zombies do not count: they hold nothing, and a crashed owner's are this machine's init's
    # to reap, whenever it gets to them.
    found += [f"pid {p}" for link in pid_links for p in pids_in_namespace(link, live_only=True)]
    found += [f"pid {p}" for p in pids if Path(f"/proc/{p}").exists() and not is_zombie(p)]
    return found


def _lock_is_free(tag: str) -> bool:
    fd = os.open(devnet.LOCK_DIR / f"{tag}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.parametrize("body_raises", [False, True])
def test_stop_leaves_no_namespace_link_or_process(tmp_path: Path, body_raises: bool) -> None:
    _unavailable(missing_requirements())
    cluster = HostCluster(["alpha", "beta"], tmp_path / "c", prefix="tgt")
    procs: list[subprocess.Popen[bytes]] = []
    expect_raise = pytest.raises(RuntimeError) if body_raises else contextlib.nullcontext()
    with expect_raise, cluster:
        tag = cluster.plan.tag
        procs += [cluster.popen(h.name, ["sh", "-c", "sleep 1000 & sleep 1000"])
                  for h in cluster.hosts]
        links = [ns_link(h.pid, "pid") or "" for h in cluster.hosts]
        pids = [h.pid for h in cluster.hosts]
        deadline = time.monotonic() + 10
        while not all(len(_sleeps(cluster, h.name)) == 2 for h in cluster.hosts):
            assert time.monotonic() < deadline
        assert _residue(tag, links, pids)  # the check sees a live cluster
        if body_raises:
            raise RuntimeError("test body failed")
    assert _residue(tag, links, pids) == []
    assert [p.wait(10) for p in procs] == [-signal.SIGKILL] * 2
    assert _lock_is_free(tag)
    assert not cluster.enter_script.exists()
    cluster.stop()  # idempotent
    assert cluster.stop_s is not None and cluster.start_s is not None


def test_start_removes_the_leftovers_of_a_crashed_instance(tmp_path: Path) -> None:
    _unavailable(missing_requirements())
    crash = ("import os,sys\nfrom pathlib import Path\nfrom trainguard.devcluster import "
             "HostCluster\nc = HostCluster(2, Path(sys.argv[1]), prefix='tgc').start()\n"
             "print(c.plan.tag, *[h.pid for h in c.hosts], flush=True)\n"
             "os.kill(os.getpid(), 9)\n")
    out = subprocess.run([PY, "-c", crash, str(tmp_path / "crashed")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr
    tag, *pid_text = out.stdout.split()
    pids = [int(p) for p in pid_text]
    links = [ns_link(p, "pid") or "" for p in pids]
    try:
        assert _residue(tag, links, pids)  # the crash really left hosts and links behind
        with HostCluster(1, tmp_path / "next", prefix="tgc") as fresh:
            assert fresh.plan.tag != tag
            assert _residue(tag, links, pids) == []
    finally:
        devnet.purge(tag)


# -- Slurm across the hosts ----------------------------------------------------------------------

def test_slurm_runs_steps_on_four_namespaced_hosts(tmp_path: Path) -> None:
    _unavailable(missing_requirements(SLURM_PROGRAMS))
    from trainguard.devcluster import SlurmHostCluster

    with SlurmHostCluster(4, tmp_path / "s", prefix="tgt", cpus=4) as slurm:
        names = ["host1", "host2", "host3", "host4"]
        assert slurm.idle_hosts() == names
        out = slurm.run(["srun", "-N4", "hostname"], check=True).stdout.split()
        assert sorted(out) == names
        token = f"tg-task-{os.getpid()}"
        script = (f'hostname > /tmp/{token}; echo "$(hostname) $SLURMD_NODENAME '
                  '$(stat -f -c %T /tmp) $(ls /tmp | grep -c tg-task-)"')
        lines = slurm.run(["srun", "-N4", "sh", "-c", script], check=True).stdout.splitlines()
        assert sorted(lines) == [f"{n} {n} tmpfs 1" for n in names]
        assert not Path(f"/tmp/{token}").exists()
        for host in slurm.hosts:  # each host kept its own marker, and only its own
            mine = slurm.cluster.run(host.name, ["cat", f"/tmp/{token}"], capture_output=True,
                                     text=True, check=True).stdout.strip()
            assert mine == host.name
        started = slurm.start_s
    assert started is not None and slurm.stop_s is not None
    assert slurm.cluster.stop_s is not None
    assert not Path(slurm.root / "run" / "slurmctld.pid").exists()
