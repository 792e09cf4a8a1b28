"""trainguard.devcluster's pure parts: names, the network plan, the enter script, slurm.conf.
Runs without root."""

from __future__ import annotations

import importlib
import ipaddress
import os
import subprocess
from pathlib import Path

import pytest

from trainguard.devcluster import DevClusterError, HostCluster, SlurmHostCluster
from trainguard.devcluster.hostproc import enter_script
from trainguard.devcluster.netplan import (
    IFNAME_MAX,
    MAX_HOSTS,
    SLOTS,
    first_slot,
    host_names,
    is_own_name,
    plan,
    subnet_of,
)
from trainguard.devcluster.slurm import slurm_conf
from trainguard.errors import TrainguardError


def test_exports_import() -> None:
    module = importlib.import_module("trainguard.devcluster")
    assert all(hasattr(module, name) for name in module.__all__)
    assert issubclass(DevClusterError, TrainguardError)


def test_host_names_default_and_given() -> None:
    assert host_names(3) == ("host1", "host2", "host3")
    assert host_names(["gpu-a", "gpu-b"]) == ("gpu-a", "gpu-b")


@pytest.mark.parametrize(("hosts", "message"), [
    (0, "between 1 and 253"),
    (MAX_HOSTS + 1, "between 1 and 253"),
    ([], "between 1 and 253"),
    (["a", "b", "a"], "duplicate host names: a"),
    (["Host1"], "'Host1' is invalid"),
    (["1host"], "'1host' is invalid"),
    (["a;reboot"], "'a;reboot' is invalid"),
    (["x" * 64], "is invalid"),
    (["controller"], "'controller' is reserved"),
    (["localhost"], "'localhost' is reserved"),
])
def test_bad_hosts_are_one_clear_error(hosts: int | list[str], message: str,
                                       tmp_path: Path) -> None:
    with pytest.raises(DevClusterError, match=message):
        HostCluster(hosts, tmp_path)


@pytest.mark.parametrize("prefix", ["", "abcdefg", "Tgh", "9ab", "tg-h", "tg h"])
def test_bad_prefix(prefix: str, tmp_path: Path) -> None:
    with pytest.raises(DevClusterError, match="prefix"):
        HostCluster(2, tmp_path, prefix=prefix)


def test_bad_cpus(tmp_path: Path) -> None:
    with pytest.raises(DevClusterError, match="cpus must be >= 1"):
        SlurmHostCluster(2, tmp_path, cpus=0)


def test_use_before_start_is_an_error(tmp_path: Path) -> None:
    cluster = HostCluster(2, tmp_path)
    with pytest.raises(DevClusterError, match="not started"):
        cluster.run("host1", ["true"])
    with pytest.raises(DevClusterError, match="not started"):
        _ = cluster.bridge_addr
    cluster.stop()  # nothing to stop: no error


@pytest.mark.parametrize("slot", [0, 1, 255, 256, SLOTS - 1])
def test_plan_names_fit_and_addresses_are_distinct(slot: int) -> None:
    names = host_names(MAX_HOSTS)
    net = plan("abcdef", slot, names)  # the longest prefix, the most hosts
    ifnames = [net.bridge, *(h.veth for h in net.hosts)]
    assert max(len(n) for n in ifnames) <= IFNAME_MAX
    assert len(set(ifnames)) == len(ifnames)
    assert len({h.netns for h in net.hosts}) == len(names)
    addrs = [net.bridge_addr, *(h.addr for h in net.hosts)]
    assert len(set(addrs)) == len(addrs)
    assert all(ipaddress.IPv4Address(a) in net.subnet for a in addrs)
    assert net.subnet.subnet_of(ipaddress.IPv4Network("10.0.0.0/8"))
    assert all(is_own_name(n, net.tag) for n in [*ifnames, *(h.netns for h in net.hosts)])


def test_every_slot_has_its_own_subnet() -> None:
    subnets = {subnet_of(slot) for slot in range(SLOTS)}
    assert len(subnets) == SLOTS
    with pytest.raises(DevClusterError, match="slot"):
        subnet_of(SLOTS)


def test_instances_of_one_process_start_on_different_slots() -> None:
    pid = os.getpid()
    assert len({first_slot(pid, i) for i in range(1, 8)}) == 7
    assert first_slot(pid, 1) != first_slot(pid + 1, 1)


@pytest.mark.parametrize(("name", "own"), [
    ("tgh0a1fbr", True), ("tgh0a1fv12", True), ("tgh0a1f-host1", True),
    ("tgh0a1fv", False), ("tgh0a1fvx", False), ("tgh0a1f", False), ("tgh0a1fbrx", False),
    ("tgh0a1e-host1", False), ("eth0", False),
])
def test_is_own_name(name: str, own: bool) -> None:
    assert is_own_name(name, "tgh0a1f") is own


def test_hosts_file_maps_every_host_and_controller() -> None:
    net = plan("tgh", 5, ["alpha", "beta"])
    lines = {tuple(line.split()) for line in net.hosts_file().splitlines()}
    assert (net.bridge_addr, "controller") in lines
    assert {(h.addr, h.name) for h in net.hosts} <= lines


def _enter(tmp_path: Path, live: list[tuple[str, int, str]], dead: list[str],
           *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "enter"
    script.write_text(enter_script(live, dead))
    script.chmod(0o755)
    return subprocess.run([str(script), *args], capture_output=True, text=True, check=False)


def test_enter_script_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    live = [("host1", os.getpid(), "pid:[1]"), ("host2", os.getpid(), "pid:[2]")]
    cases = [
        (("nosuch", "true"), "enter: unknown host 'nosuch' (hosts: host1 host2)"),
        (("host3", "true"), "enter: host 'host3' was killed"),
        (("host1", "true"), "enter: host 'host1' is not running"),  # pid's namespace differs
        (("host1",), "usage:"),
    ]
    for args, message in cases:
        out = _enter(tmp_path, live, ["host3"], *args)
        assert out.returncode == 2, args
        assert len(out.stderr.splitlines()) == 1
        assert out.stderr.startswith(message) or message in out.stderr, out.stderr


def test_slurm_conf_names_every_host_address(monkeypatch: pytest.MonkeyPatch) -> None:
    net = plan("tgh", 7, ["a1", "a2", "a3"])
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    conf = slurm_conf(net, Path("/r"), Path("/run/x"), cpus=2, ctld_port=7000)
    assert f"({net.bridge_addr})" in conf
    for host in net.hosts:
        assert f"NodeName={host.name} NodeHostname={host.name} NodeAddr={host.addr} " in conf
    assert "config_overrides" not in conf
    assert "socket=/run/x/munge.sock" in conf
    assert "config_overrides" in slurm_conf(net, Path("/r"), Path("/x"), cpus=4, ctld_port=1)


def test_only_paths_hidden_by_a_hosts_private_mounts_are_mounted_back() -> None:
    from trainguard.devcluster.hostproc import keep_visible

    kept = keep_visible([Path("/tmp/clone/.venv"), Path("/tmp/clone"), Path("/tmp/clone/src"),
                         Path("/tmp/pytest-of-root/p0/c"), Path("/work/main"), Path("/tmp"),
                         Path("/tmpfoo/x"), Path("/var/log/x/../y"), Path("relative/tmp")])
    # the private directories themselves are never mounted back (they would not be private)
    assert kept == (Path("/tmp/clone"), Path("/tmp/pytest-of-root/p0/c"), Path("/var/log/y"))


def test_a_cluster_keeps_this_process_checkout_and_interpreter_visible(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cluster = HostCluster(2, tmp_path / "c")
    if Path("/tmp") in tmp_path.parents:  # the root lies inside the working directory
        assert tmp_path in cluster.visible and tmp_path / "c" not in cluster.visible
    given = HostCluster(2, Path("/tmp/tg-root"), visible=[Path("/tmp/tg-root/x"),
                                                          Path("/tmp/venv"), Path("/opt/v")])
    assert given.visible == (Path("/tmp/tg-root"), Path("/tmp/venv"))
