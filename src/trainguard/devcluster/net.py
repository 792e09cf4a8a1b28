"""The root-namespace side of a dev cluster's network: claiming a slot, building the bridge,
namespaces and veths with ``ip``, and removing them (also the leftovers of a crashed instance).

A slot is claimed with an ``flock`` on ``/run/trainguard-devcluster/<tag>.lock`` held for the
cluster's life: the kernel drops it when the owning process dies, so names with a slot whose lock
is free belong to a crashed instance and are removed before reuse.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from trainguard.devcluster.common import (
    DevClusterError,
    check_call,
    comm,
    is_zombie,
    kill_quietly,
    pids_in_namespace,
    wait_until,
    which,
)
from trainguard.devcluster.netplan import SLOTS, NetPlan, first_slot, is_own_name, plan

log = logging.getLogger(__name__)
LOCK_DIR = Path("/run/trainguard-devcluster")
_instances = 0  # clusters this process has claimed, to spread their first slots


@dataclass(frozen=True, slots=True)
class Claim:
    """A slot held by this process (the lock stays held while ``fd`` is open)."""

    plan: NetPlan
    fd: int


def ip(*args: str, stdin: str | None = None) -> str:
    exe = which("ip")
    if exe is None:
        raise DevClusterError("the 'ip' program (iproute2) is not installed")
    return check_call([exe, *args], stdin=stdin)


def claim(prefix: str, names: Sequence[str]) -> Claim:
    """Lock a free slot whose subnet no route of this machine overlaps; remove its leftovers."""
    global _instances
    _instances += 1
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    purge_abandoned(prefix)
    start = first_slot(os.getpid(), _instances)
    for step in range(256):
        net = plan(prefix, (start + step) % SLOTS, names)
        fd = _try_lock(net.tag)
        if fd is None:
            continue  # a live instance holds it
        purge(net.tag)
        if not _overlaps(net.subnet):
            return Claim(plan=net, fd=fd)
        os.close(fd)
    raise DevClusterError(f"no free dev-cluster slot for prefix {prefix!r} after 256 tries")


def release(claim_: Claim) -> None:
    with contextlib.suppress(OSError):
        os.close(claim_.fd)


def _try_lock(tag: str) -> int | None:
    """An fd holding the slot's lock, or None when a live instance holds it."""
    fd = os.open(LOCK_DIR / f"{tag}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def abandoned_tags(prefix: str) -> list[str]:
    """Tags of ``prefix`` instances that have namespaces or links but no live owner."""
    pattern = re.compile(re.escape(prefix) + r"[0-9a-f]{4}")
    names = [n.get("name", "") for n in json.loads(ip("-j", "netns", "list") or "[]")]
    names += [n.get("ifname", "") for n in json.loads(ip("-j", "link", "show") or "[]")]
    tags = {m.group(0) for n in names if (m := pattern.match(n)) and is_own_name(n, m.group(0))}
    abandoned = []
    for tag in sorted(tags):
        fd = _try_lock(tag)
        if fd is not None:
            os.close(fd)
            abandoned.append(tag)
    return abandoned


def purge_abandoned(prefix: str) -> list[str]:
    """Remove what crashed instances with ``prefix`` left behind (their locks are free: the
    kernel released them when the owner died). The tags removed."""
    tags = abandoned_tags(prefix)
    for tag in tags:
        fd = _try_lock(tag)
        if fd is None:
            continue  # claimed by a new instance meanwhile: it purges the slot itself
        try:
            log.info("removing leftovers of crashed dev cluster %s", tag)
            purge(tag)
        finally:
            os.close(fd)
    return tags


def _overlaps(subnet: ipaddress.IPv4Network) -> bool:
    routes = json.loads(ip("-j", "-4", "route", "show", "table", "all") or "[]")
    for route in routes:
        dst = route.get("dst", "")
        if dst in ("", "default"):
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.IPv4Network(dst, strict=False).overlaps(subnet):
                return True
    return False


def build(net: NetPlan) -> None:
    """Bridge (.1) in the root namespace; per host a netns, a veth into it as ``eth0`` with the
    host's address, loopback up and a default route via the bridge."""
    lines = [f"link add {net.bridge} type bridge",
             f"addr add {net.bridge_addr}/{net.subnet.prefixlen} dev {net.bridge}",
             f"link set {net.bridge} up"]
    for host in net.hosts:
        lines += [f"netns add {host.netns}",
                  f"link add {host.veth} type veth peer name eth0 netns {host.netns}",
                  f"link set {host.veth} master {net.bridge}",
                  f"link set {host.veth} up"]
    ip("-batch", "-", stdin="\n".join(lines) + "\n")
    for host in net.hosts:
        ip("-n", host.netns, "-batch", "-", stdin=(
            "link set lo up\n"
            f"addr add {host.addr}/{net.subnet.prefixlen} dev eth0\n"
            "link set eth0 up\n"
            f"route add default via {net.bridge_addr}\n"))


def netns_names(tag: str) -> list[str]:
    listing = json.loads(ip("-j", "netns", "list") or "[]")
    return sorted(n["name"] for n in listing if is_own_name(n.get("name", ""), tag))


def link_names(tag: str) -> list[str]:
    listing = json.loads(ip("-j", "link", "show") or "[]")
    return sorted(n["ifname"] for n in listing if is_own_name(n.get("ifname", ""), tag))


def run_dir(tag: str) -> Path:
    """Per-instance directory for root-namespace daemons (sockets, ``NAME.pid`` files). On
    /run, shared with every host, and found again by :func:`purge` after a crash."""
    return LOCK_DIR / f"{tag}.run"


def _kill_daemons(tag: str) -> None:
    """Kill the processes named by ``run_dir(tag)/NAME.pid`` that are still called NAME."""
    for pid_file in sorted(run_dir(tag).glob("*.pid")):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pid_file.read_text().split()[0])
            if comm(pid) == pid_file.stem:
                kill_quietly(pid)
                wait_until(partial(_gone, pid, pid_file.stem), 10)


def _gone(pid: int, name: str) -> bool:
    return comm(pid) != name or is_zombie(pid)


def purge(tag: str) -> None:
    """Kill the instance's daemons and every process inside its network namespaces, then delete
    the namespaces, links and run directory. Safe when nothing exists."""
    _kill_daemons(tag)
    shutil.rmtree(run_dir(tag), ignore_errors=True)
    namespaces = netns_names(tag)
    for name in namespaces:
        link = ns_link_of_netns(name)
        if link is None:
            continue
        for pid in pids_in_namespace(link, "net"):
            kill_quietly(pid)
        if not wait_until(partial(_empty_netns, link), timeout_s=10):
            raise DevClusterError(f"processes in network namespace {name} survive SIGKILL")
    lines = [f"netns del {n}" for n in namespaces] + [f"link del {n}" for n in link_names(tag)]
    if lines:
        with contextlib.suppress(DevClusterError):  # -force: some may already be gone
            ip("-force", "-batch", "-", stdin="\n".join(lines) + "\n")


def _empty_netns(link: str) -> bool:
    """No live process in the network namespace (a zombie no longer holds it)."""
    return not pids_in_namespace(link, "net", live_only=True)


def ns_link_of_netns(name: str) -> str | None:
    """``net:[inode]`` of a named network namespace (the bind-mounted file's inode)."""
    try:
        return f"net:[{os.stat(f'/run/netns/{name}').st_ino}]"
    except OSError:
        return None


def leftovers(tag: str) -> list[str]:
    """Namespaces and links of the instance that still exist (empty after a clean stop)."""
    return [*netns_names(tag), *link_names(tag)]


__all__ = ["Claim", "abandoned_tags", "build", "claim", "leftovers", "link_names",
           "netns_names", "purge", "purge_abandoned", "release", "run_dir"]
