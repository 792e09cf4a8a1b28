"""Host names as the checks take them: comma-separated lists, each name an RFC 1123 host name
(``_`` allowed too, as Slurm node names and many clusters' host names use it).

A host name reaches a shell (``--agent-exec 'ssh {node}'``), Slurm's node lists and file names
under the check's work directory, so it is validated before anything starts: dot-separated
labels of ASCII letters, digits, ``-`` and ``_``, each 1-63 characters, not starting or ending
with ``-``; at most 253 characters in all. No spaces, no shell metacharacters, no empty entries,
no host named twice.

    >>> parse_hosts("node1,node2.rack3", "--nodes")
    ('node1', 'node2.rack3')
    >>> host_name_problem("node_1") is None
    True
    >>> host_name_problem("node 1")
    "'node 1' is not a valid host name (letters, digits, '-' and '_', labels separated by '.')"
"""

from __future__ import annotations

import re

from trainguard.errors import ConfigError

MAX_NAME = 253
"""The longest host name (RFC 1123 / RFC 1035)."""

_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def host_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid host name, or None when it is."""
    if not name:
        return "an empty host name"
    rule = "letters, digits, '-' and '_', labels separated by '.'"
    if len(name) > MAX_NAME:
        return f"{name[:40]!r}... is longer than {MAX_NAME} characters"
    if not all(_LABEL.fullmatch(label) for label in name.split(".")):
        return f"{name!r} is not a valid host name ({rule})"
    return None


def check_host_name(name: str, what: str) -> str:
    """``name`` unchanged when valid; ConfigError naming ``what`` (a flag or argument)."""
    problem = host_name_problem(name)
    if problem is not None:
        raise ConfigError(f"{what}: {problem}")
    return name


def parse_hosts(value: str, flag: str) -> tuple[str, ...]:
    """The hosts of a comma-separated list (spaces around the commas are allowed);
    ConfigError naming ``flag`` for an empty list, an empty entry, an invalid name or a host
    named twice."""
    if not value.strip():
        raise ConfigError(f"{flag} has no host names")
    hosts = tuple(part.strip() for part in value.split(","))
    for i, host in enumerate(hosts, start=1):
        if not host:
            raise ConfigError(f"{flag} has an empty entry (entry {i} of {value.strip()!r})")
        check_host_name(host, flag)
    seen: set[str] = set()
    for host in hosts:
        if host.lower() in seen:  # host names are case-insensitive
            raise ConfigError(f"{flag} names {host} twice")
        seen.add(host.lower())
    return hosts


__all__ = ["MAX_NAME", "check_host_name", "host_name_problem", "parse_hosts"]
