"""The pure plan of a dev cluster's network: names, interface names and addresses.

Every name of one cluster instance carries its *slot* (a number below 32768, written as four hex
digits) after the prefix, and the slot picks the private subnet ``10.(128 + slot // 256).(slot %
256).0/24``, so two live instances never share an interface name, a namespace name or a subnet.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.devcluster.common import DevClusterError

SLOTS = 32768
MAX_HOSTS = 253  # .2 .. .254 of a /24; .1 is the bridge ("controller")
IFNAME_MAX = 15  # Linux IFNAMSIZ - 1
_HOST_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}\Z")
_PREFIX = re.compile(r"[a-z][a-z0-9]{0,5}\Z")
RESERVED_NAMES = frozenset({"controller", "localhost"})


@dataclass(frozen=True, slots=True)
class HostPlan:
    """One virtual host's names and address."""

    name: str
    netns: str
    """Name of its network namespace (``ip netns``)."""
    veth: str
    """Root-namespace end of its veth pair; the host end is ``eth0``."""
    addr: str


@dataclass(frozen=True, slots=True)
class NetPlan:
    """The network of one cluster instance."""

    prefix: str
    slot: int
    subnet: ipaddress.IPv4Network
    bridge: str
    bridge_addr: str
    hosts: tuple[HostPlan, ...]

    @property
    def tag(self) -> str:
        """What every interface and namespace name of this instance starts with."""
        return f"{self.prefix}{self.slot:04x}"

    def hosts_file(self, extra: Sequence[tuple[str, str]] = ()) -> str:
        """/etc/hosts for every host: each host name, ``controller`` -> the bridge address."""
        lines = ["127.0.0.1 localhost", f"{self.bridge_addr} controller"]
        lines += [f"{addr} {name}" for addr, name in extra]
        lines += [f"{h.addr} {h.name}" for h in self.hosts]
        return "\n".join(lines) + "\n"


def host_names(hosts: int | Sequence[str]) -> tuple[str, ...]:
    """``host1..hostN`` for a count, else the given names, validated (lowercase DNS labels,
    unique, not ``controller``/``localhost``, at most 253)."""
    if isinstance(hosts, int):
        if not 1 <= hosts <= MAX_HOSTS:
            raise DevClusterError(f"hosts must be between 1 and {MAX_HOSTS}, got {hosts}")
        return tuple(f"host{i}" for i in range(1, hosts + 1))
    names = tuple(hosts)
    if not 1 <= len(names) <= MAX_HOSTS:
        raise DevClusterError(f"hosts must name between 1 and {MAX_HOSTS} hosts, got {len(names)}")
    for name in names:
        if not isinstance(name, str) or not _HOST_NAME.match(name):
            raise DevClusterError(
                f"host name {name!r} is invalid: use a lowercase letter, then lowercase letters, "
                "digits or '-' (at most 63)")
        if name in RESERVED_NAMES:
            raise DevClusterError(f"host name {name!r} is reserved")
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise DevClusterError(f"duplicate host names: {', '.join(duplicates)}")
    return names


def check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise DevClusterError(
            f"prefix {prefix!r} is invalid: 1-6 lowercase letters or digits, "
            "starting with a letter")
    return prefix


def subnet_of(slot: int) -> ipaddress.IPv4Network:
    if not 0 <= slot < SLOTS:
        raise DevClusterError(f"slot must be in [0, {SLOTS}), got {slot}")
    return ipaddress.IPv4Network(f"10.{128 + slot // 256}.{slot % 256}.0/24")


def plan(prefix: str, slot: int, names: Sequence[str]) -> NetPlan:
    """The names and addresses of the cluster instance in ``slot``."""
    subnet = subnet_of(slot)
    tag = f"{check_prefix(prefix)}{slot:04x}"
    addrs = list(subnet.hosts())
    hosts = tuple(HostPlan(name=name, netns=f"{tag}-{name}", veth=f"{tag}v{i}", addr=str(addrs[i]))
                  for i, name in enumerate(host_names(names), 1))
    result = NetPlan(prefix=prefix, slot=slot, subnet=subnet, bridge=f"{tag}br",
                     bridge_addr=str(addrs[0]), hosts=hosts)
    too_long = [n for n in (result.bridge, *(h.veth for h in hosts)) if len(n) > IFNAME_MAX]
    if too_long:  # unreachable with the validated prefix; kept as the invariant's guard
        raise DevClusterError(f"interface names longer than {IFNAME_MAX}: {', '.join(too_long)}")
    return result


def first_slot(pid: int, instance: int) -> int:
    """Where this process's ``instance``-th cluster starts looking for a free slot: spread by
    pid so concurrent processes rarely probe the same slots."""
    return (pid * 8 + instance) % SLOTS


def is_own_name(name: str, tag: str) -> bool:
    """Whether an interface or namespace name belongs to the instance with ``tag``."""
    rest = name[len(tag):]
    return name.startswith(tag) and (rest == "br" or rest.startswith("-")
                                     or (rest[:1] == "v" and rest[1:].isdigit()))


__all__ = ["HostPlan", "NetPlan", "check_prefix", "first_slot", "host_names", "is_own_name",
           "plan", "subnet_of"]
