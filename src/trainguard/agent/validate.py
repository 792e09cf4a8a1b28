"""What an agent sends, checked before the controller acts on it.

An agent is authenticated, but it runs on a host that may be compromised or simply buggy: no
field it sends may crash the controller or reach its records unchecked. :func:`check_message`
checks the fields the controller reads from each message type it handles and raises
:class:`~trainguard.agent.wire.WireError` (the message is then dropped with one log line); a
field it does not know is left alone, so an agent may send more than this controller reads.
:func:`rank_entries` does the same for a hang-collection reply's per-rank map.

    >>> check_message({"t": "exit", "rank": 1, "code": 0})
    >>> rank_entries({"0": {"proc": "running"}, "x": {}})
    Traceback (most recent call last):
    ...
    trainguard.agent.wire.WireError: reply: rank key 'x' is not a rank number
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from trainguard.agent.wire import WireError
from trainguard.trace.collect import PROCESS_STATES

_MAX_RANK = 1 << 24
_MAX_TEXT = 4096


def _int(value: object, what: str, low: int = -(1 << 62), high: int = 1 << 62) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise WireError(f"{what} must be an integer in [{low}, {high}]")
    return value


def _rank(value: object, what: str) -> int:
    return _int(value, what, 0, _MAX_RANK)


def _opt(msg: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str,
         limit: int | None = None) -> None:
    if key not in msg or msg[key] is None:
        return
    value = msg[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise WireError(f"{what}: field {key!r} has the wrong type")
    if limit is not None and isinstance(value, (str, bytes, list, dict)) and len(value) > limit:
        raise WireError(f"{what}: field {key!r} is longer than {limit}")


def _data(msg: Mapping[str, Any]) -> None:
    _rank(msg.get("rank"), f"{msg['t']}: rank")
    if not isinstance(msg.get("data"), bytes):
        raise WireError(f"{msg['t']}: data must be bytes")


def _exit(msg: Mapping[str, Any]) -> None:
    _rank(msg.get("rank"), "exit: rank")
    _int(msg.get("code"), "exit: code", -(1 << 16), 1 << 16)


def _procs(msg: Mapping[str, Any]) -> None:
    stopped = msg.get("stopped")
    if stopped is not None:
        if not isinstance(stopped, list) or len(stopped) > _MAX_RANK:
            raise WireError("procs: stopped must be a list of ranks")
        for rank in stopped:
            _rank(rank, "procs: stopped rank")


def _procstat(msg: Mapping[str, Any]) -> None:
    ranks = msg.get("ranks")
    if not isinstance(ranks, list) or len(ranks) > _MAX_RANK:
        raise WireError("procstat: ranks must be a list of [rank, state, cpu_s]")
    for entry in ranks:
        if not isinstance(entry, list) or len(entry) != 3:
            raise WireError("procstat: an entry must be [rank, state, cpu_s]")
        rank, state, cpu = entry
        _rank(rank, "procstat: rank")
        if state not in PROCESS_STATES:
            raise WireError(f"procstat: unknown process state {str(state)[:20]!r}")
        if not isinstance(cpu, (int, float)) or isinstance(cpu, bool) \
                or not math.isfinite(cpu) or cpu < 0:
            raise WireError("procstat: cpu_s must be a finite number >= 0")


def _klog(msg: Mapping[str, Any]) -> None:
    if not isinstance(msg.get("event"), dict):
        raise WireError("klog: event must be a map")


def _started(msg: Mapping[str, Any]) -> None:
    pids = msg.get("pids")
    if not isinstance(pids, dict):
        raise WireError("started: pids must be a map")
    for key, pid in pids.items():
        rank_key(key, "started")
        _int(pid, "started: pid", 1, 1 << 31)


def _reply(msg: Mapping[str, Any]) -> None:
    _int(msg.get("req"), "reply: req", 0)
    if "ranks" in msg:
        rank_entries(msg["ranks"])
    _opt(msg, "error", str, "reply", _MAX_TEXT)
    if "copy" in msg:
        shard_copy(msg["copy"], "reply")


_COPY_KINDS = ("own", "replica", "fetched")
_MAX_COPIES = 4096


def shard_copy(entry: object, what: str) -> Mapping[str, Any]:
    """One snapshot copy an agent reports (``snapinv``, a ``snapfetch`` reply)."""
    if not isinstance(entry, dict):
        raise WireError(f"{what}: a copy must be a map")
    _rank(entry.get("rank"), f"{what}: rank")
    _int(entry.get("step"), f"{what}: step", 0)
    _int(entry.get("attempt"), f"{what}: attempt", 0)
    _int(entry.get("payload_bytes", 0), f"{what}: payload_bytes", 0)
    for key, limit in (("digest", 64), ("path", _MAX_TEXT)):
        value = entry.get(key)
        if not isinstance(value, str) or not value or len(value) > limit:
            raise WireError(f"{what}: {key} must be a string of at most {limit} characters")
    if entry.get("kind") not in _COPY_KINDS:
        raise WireError(f"{what}: kind must be one of {', '.join(_COPY_KINDS)}")
    return entry


def _snapinv(msg: Mapping[str, Any]) -> None:
    copies = msg.get("copies")
    if not isinstance(copies, list) or len(copies) > _MAX_COPIES:
        raise WireError(f"snapinv: copies must be a list of at most {_MAX_COPIES}")
    for entry in copies:
        shard_copy(entry, "snapinv")


def _snapserve(msg: Mapping[str, Any]) -> None:
    addr = msg.get("addr")
    if not isinstance(addr, str) or not addr or len(addr) > 256:
        raise WireError("snapserve: addr must be a string of at most 256 characters")
    _int(msg.get("port"), "snapserve: port", 1, 65535)


def _error(msg: Mapping[str, Any]) -> None:
    _opt(msg, "what", str, "error", 256)
    _opt(msg, "text", str, "error", 64 << 10)


_CHECKS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "out": _data, "sdk": _data, "exit": _exit, "procs": _procs, "procstat": _procstat,
    "klog": _klog,
    "started": _started, "reply": _reply, "error": _error,
    "snapinv": _snapinv, "snapserve": _snapserve,
}


def check_message(msg: Mapping[str, Any]) -> None:
    """:class:`WireError` when a field the controller reads from ``msg`` is malformed; a
    message type it does not check passes (its reader checks it)."""
    check = _CHECKS.get(str(msg.get("t")))
    if check is not None:
        check(msg)


def rank_key(key: object, what: str) -> int:
    """A rank as a map key (a decimal string, as msgpack keys are strings)."""
    if isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 9:
        return _rank(int(key), f"{what}: rank key")
    raise WireError(f"{what}: rank key {str(key)[:24]!r} is not a rank number")


def rank_entries(ranks: object) -> dict[int, dict[str, Any]]:
    """A hang-collection reply's ``ranks`` map, by rank: each entry a map whose ``pid``,
    ``proc``, ``trace`` and ``stack`` have their types; :class:`WireError` otherwise."""
    if not isinstance(ranks, dict):
        raise WireError("reply: ranks must be a map")
    out: dict[int, dict[str, Any]] = {}
    for key, info in ranks.items():
        rank = rank_key(key, "reply")
        if not isinstance(info, dict):
            raise WireError(f"reply: rank {rank}'s entry must be a map")
        if info.get("pid") is not None:
            _int(info["pid"], f"reply: rank {rank}'s pid", 1, 1 << 31)
        _opt(info, "proc", str, f"reply: rank {rank}", 64)
        _opt(info, "trace", bytes, f"reply: rank {rank}")
        _opt(info, "stack", str, f"reply: rank {rank}")
        out[rank] = info
    return out


__all__ = ["check_message", "rank_entries", "rank_key", "shard_copy"]
