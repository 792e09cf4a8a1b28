"""A free TCP port for a test's server: bound once and released, so the server can take it.

Only loopback (or, for a Slurm daemon reached from namespaced hosts, every address): tests
never bind anything else.
"""

from __future__ import annotations

import socket


def free_port(address: str = "127.0.0.1") -> int:
    """A port the kernel just gave out on ``address`` (free until someone else binds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])
