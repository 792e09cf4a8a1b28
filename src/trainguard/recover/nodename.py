"""What a node name may be: it becomes a directory name, a Slurm argv element, a hostname.

A node name from ``--nodes`` / ``--spares`` (or a Slurm allocation) names the run dir's
``nodes/<node>/`` and ``attempts/<k>/<node>/`` folders, goes to ``srun --nodelist`` and
``scontrol``, and is the rendezvous host. So it must be a hostname-like name:

- ASCII letters, digits, ``-``, ``_`` and ``.``, starting with a letter or digit (never an
  option-looking ``-x``, a hidden ``.x``, or ``..``);
- at most :data:`NODE_NAME_MAX` (64) characters: Linux's ``HOST_NAME_MAX``, the limit of the
  name a node's ``gethostname()`` reports, which is what Slurm matches a ``NodeName`` against
  and what the kubelet registers as the node name by default (RFC 1123 allows 63 per DNS
  label; Kubernetes accepts up to 253 for a whole DNS-subdomain node name, but such a node's
  own hostname is still at most 64). Longer names cannot be a node's hostname and would come
  close to the 255-byte file-name limit.

    >>> validate_node_name("gpu-017.cluster")
    'gpu-017.cluster'
"""

from __future__ import annotations

import re

from trainguard.errors import ConfigError

NODE_NAME_MAX = 64
NODE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)


def node_name_problem(name: str, max_len: int = NODE_NAME_MAX) -> str | None:
    """Why ``name`` is not a valid node name, or None when it is."""
    if not name:
        return "a node name cannot be empty"
    if len(name) > max_len:
        return f"a node name has at most {max_len} characters ({len(name)} given)"
    if NODE_NAME_RE.fullmatch(name) is None:
        return "use letters, digits, '.', '_' and '-', starting with a letter or digit"
    return None


def validate_node_name(name: str, option: str = "--nodes/--spares") -> str:
    """``name`` unchanged, or :class:`ConfigError` (one line, naming ``option``)."""
    problem = node_name_problem(name)
    if problem is not None:
        shown = name if len(name) <= 80 else f"{name[:40]}...{name[-20:]}"
        raise ConfigError(f"invalid node name {shown!r} in {option}: {problem}")
    return name


__all__ = ["NODE_NAME_MAX", "NODE_NAME_RE", "node_name_problem", "validate_node_name"]
