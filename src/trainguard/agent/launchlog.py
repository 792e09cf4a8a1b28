"""What a failed agent launcher said, quoted where the controller reports it.

A launcher (``ssh {node}``, a namespace entry, the agent itself) that ends before its agent
connects has written its reason (``ssh: connect to host ... Connection refused``, a Python
error) to the agent's log in the run directory, which nobody reads unprompted. These functions
take the last lines of that log and put them, with the log's path, into the controller's
one-line error (:func:`no_agent_error`), one node's part at a time (:func:`ended_text`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainguard.textsafe import terminal_safe

TAIL_BYTES = 8192
"""How much of the end of a launcher's log is read."""
LINE_CHARS = 300
"""A quoted line longer than this is cut."""
NODES_QUOTED = 3
"""Launchers quoted in one error; the others are counted."""


def last_lines(path: Path, count: int = 2) -> tuple[str, ...]:
    """The last ``count`` non-blank lines of ``path`` (from its last :data:`TAIL_BYTES`),
    stripped, cut to :data:`LINE_CHARS`, without control characters; () when unreadable."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read(TAIL_BYTES)
    except OSError:
        return ()
    lines = [ln.strip() for ln in data.decode(errors="replace").splitlines()]
    kept = [terminal_safe(ln)[:LINE_CHARS] for ln in lines if ln]
    return tuple(kept[-count:]) if count > 0 else ()


def ended_text(node: str, status: int, said: Sequence[str], log: Path | None) -> str:
    """One node's launcher that ended before its agent connected: its status, what it said
    last (quoted, `` | `` between lines), where its log is.

    >>> ended_text("h1", 255, ("ssh: Connection refused",), Path("agent-h1.log"))
    'h1: launcher exited with status 255: "ssh: Connection refused" (log: agent-h1.log)'
    """
    text = f"{node}: launcher exited with status {status}"
    if said:
        quoted = " | ".join(said).replace('"', "'")
        text += f': "{quoted}"'
    elif log is not None:
        text += " and wrote nothing"
    if log is not None:
        text += f" (log: {log})"
    return text


def launcher_ended(node: str, status: int, log: Path | None) -> str:
    """:func:`ended_text` with what the launcher's ``log`` (if any) ends with."""
    return ended_text(node, status, last_lines(log) if log is not None else (), log)


def launchers_ended(parts: Sequence[str], limit: int = NODES_QUOTED) -> str:
    """Several :func:`ended_text` texts joined, the first ``limit`` in full.

    >>> launchers_ended(["a: x", "b: y", "c: z"], limit=2)
    'a: x; b: y; and 1 more node'
    """
    shown = "; ".join(parts[:limit])
    more = len(parts) - limit
    return f"{shown}; and {more} more node{'s' if more > 1 else ''}" if more > 0 else shown


def no_agent_error(nodes: Sequence[str], exited: Mapping[str, int],
                   logs: Mapping[str, Path | None], errors: Sequence[str],
                   connect_timeout_s: float) -> str:
    """The error of a launch from which no agent connected: what the agents reported, else
    each ended launcher's status and last words with its log, else the wait and where the
    logs are.

    >>> no_agent_error(("h1",), {}, {"h1": None}, (), 60).split(";")[0]
    'no agent connected to the controller: none within 60 s'
    """
    if errors:
        detail = "; ".join(errors[-3:])
    elif exited:
        detail = launchers_ended([launcher_ended(n, exited[n], logs.get(n))
                                  for n in nodes if n in exited])
    else:
        dirs = sorted({str(p.parent) for p in logs.values() if p is not None})
        where = f" (agent logs: {', '.join(dirs)})" if dirs else ""
        detail = f"none within {connect_timeout_s:g} s{where}"
    return (f"no agent connected to the controller: {detail}; check the controller address "
            "and how agents are started")


__all__ = ["LINE_CHARS", "NODES_QUOTED", "TAIL_BYTES", "ended_text", "last_lines",
           "launcher_ended", "launchers_ended", "no_agent_error"]
