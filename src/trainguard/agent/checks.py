"""The host checks an agent runs for ``trainguard check`` (:mod:`trainguard.check`).

Three commands, each answered with one ``reply`` carrying the request's ``req``:

- ``check``: run the named probes on this host (``params``: checkpoint dir, time limit,
  expected GPUs) and return their results, with the host's clock read at the reply (the
  controller computes the offset from its own send and receive times);
- ``link_serve``: open a one-session link-probe server on the address this agent reaches the
  controller from, and return that address and port;
- ``link_probe``: measure the link to another host's server (throughput both ways, latency).

Everything heavy runs in a worker thread; the agent's loop keeps streaming meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainguard.agent.wire import WireError

CHECK_COMMANDS = frozenset({"check", "link_serve", "link_probe"})

_MAX_NAMES = 32


def _number(msg: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = msg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise WireError(f"{key} must be a number in [{low:g}, {high:g}]")
    return float(value)


def _text(msg: Mapping[str, Any], key: str, limit: int = 4096) -> str:
    value = msg.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise WireError(f"{key} must be a non-empty string of at most {limit} characters")
    return value


def run_check(msg: Mapping[str, Any], node: str) -> dict[str, Any]:
    """The ``check`` command: this host's probe results, with the host's clock read when the
    command arrived (``t_host_recv``) and at the reply (``t_host``), after holding the reply
    ``hold_s`` (at most 0.1 s; :mod:`trainguard.check.clocksync`)."""
    t_host_recv = time.time()
    from trainguard.check.probe_base import PROBE_TIMEOUT_S, ProbeParams
    from trainguard.check.probes import default_probes, run_probes

    raw = msg.get("params") if isinstance(msg.get("params"), Mapping) else {}
    assert isinstance(raw, Mapping)
    ckpt = raw.get("checkpoint_dir")
    expected = raw.get("expected_gpus")
    params = ProbeParams(
        node, checkpoint_dir=Path(ckpt) if isinstance(ckpt, str) and ckpt else None,
        time_limit_s=_number(raw, "time_limit_s", PROBE_TIMEOUT_S, 0.1, 3600.0),
        expected_gpus=int(expected) if isinstance(expected, int) and expected >= 0 else None)
    names = msg.get("probes")
    if names is None:
        chosen = default_probes(params)
    elif isinstance(names, list) and len(names) <= _MAX_NAMES \
            and all(isinstance(n, str) for n in names):
        chosen = tuple(names)
    else:
        raise WireError("probes must be a list of names")
    results = run_probes(chosen, params)
    hold_s = _number(msg, "hold_s", 0.0, 0.0, 0.1)
    if hold_s:
        time.sleep(hold_s)
    return {"results": [r.to_dict() for r in results], "t_host_recv": t_host_recv,
            "t_host": time.time(), "machine": machine_id()}


def machine_id() -> str:
    """The running kernel's boot id: hosts that report the same one share a machine (virtual
    hosts, containers), so their measurements would compete with each other."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64]
    except OSError:
        return ""


class LinkServers:
    """The link-probe servers this agent has open (one per pending measurement)."""

    def __init__(self) -> None:
        self._open: list[Any] = []

    def serve(self, msg: Mapping[str, Any], local_addr: str,
              secret: bytes | None = None) -> dict[str, Any]:
        """``secret``: the run's, mixed into the session key (strangers holding only the
        token are refused)."""
        from trainguard.check.linkprobe import LinkServer

        self._open = [s for s in self._open if s.wait(0) is None]  # drop the finished
        token = _text(msg, "token", 256)
        timeout_s = _number(msg, "timeout_s", 30.0, 0.1, 600.0)
        server = LinkServer(local_addr, token, timeout_s=timeout_s, secret=secret)
        server.start()
        self._open.append(server)
        return {"addr": local_addr, "port": server.port}

    def close(self) -> None:
        for server in self._open:
            server.close()
        self._open = []


def probe_link(msg: Mapping[str, Any], node: str,
               secret: bytes | None = None) -> dict[str, Any]:
    """The ``link_probe`` command: this host's side of a link measurement (``secret``: the
    run's, as for :meth:`LinkServers.serve`)."""
    from trainguard.check.linkprobe import DEFAULT_NBYTES, measure

    port = msg.get("port")
    if not isinstance(port, int) or not 0 < port < 65536:
        raise WireError("port must be an integer in 1..65535")
    nbytes = msg.get("nbytes")
    result = measure(_text(msg, "addr", 256), port, _text(msg, "token", 256), host=node,
                     peer=_text(msg, "peer", 256),
                     nbytes=nbytes if isinstance(nbytes, int) and 0 < nbytes <= 1 << 30
                     else DEFAULT_NBYTES,
                     timeout_s=_number(msg, "timeout_s", 10.0, 0.1, 600.0), secret=secret)
    return {"result": result.to_dict()}


__all__ = ["CHECK_COMMANDS", "LinkServers", "machine_id", "probe_link", "run_check"]
