"""Fault injection from the supervisor's side (kill, hang, XID) and for ``trainguard inject``.

The SDK fires the in-process faults (NaN, slow, CUDA error, exception, corrupt checkpoint) from
``TRAINGUARD_INJECT``; the supervisor fires the ones that need a process from outside: SIGKILL or
SIGSTOP of a rank, and an NVRM XID line appended to a node's watched kernel log. Each fires once
per attempt it applies to, when its ``step`` is reached (SDK heartbeats) or ``after`` seconds have
passed since the launch (with neither: right after the launch).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainguard.errors import ConfigError, LaunchError
from trainguard.faultspec import SUPERVISOR_KINDS, FaultKind, FaultSpec

_XID_TEXT = {
    79: "GPU has fallen off the bus.",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
        "at partition 0, subpartition 0.",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    94: "Contained: CE User Channel (0x9). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
         "(GSP_RM_CONTROL) (0x20801348 0x4).",
    13: "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
        "0x7f3a_4e200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap a row.",
}


def xid_line(node: str, xid: int, *, when: float | None = None, pci: str = "0000:3b:00",
             pid: int | None = None) -> str:
    """A kernel-log line as the NVIDIA driver writes it (rsyslog ISO-8601 prefix)."""
    t = time.time() if when is None else when
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}+00:00"
    text = _XID_TEXT.get(xid, "reported by trainguard inject")
    who = f"pid={pid if pid is not None else random.randint(1000, 99999)}, name=python"
    return f"{stamp} {node} kernel: NVRM: Xid (PCI:{pci}): {xid}, {who}, {text}\n"


def append_line(path: Path, line: str) -> None:
    """Append one line with a single write (a watcher never sees half of it)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise LaunchError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


PREDICTED_FAILURE_IN_S = "predicted_failure_in_s"
"""Key of an alert record: seconds from its onset to the failure it foretold, when known (a
replayed predictive alert: the first hard alert on its node after it, in the replayed file)."""
FORETOLD_WINDOW_S = 24 * 3600.0
"""A hard alert later than this after a predictive one is not the failure it foretold (the
report's lead-time window)."""


def _start(rec: dict[str, object]) -> float | None:
    value = rec.get("start")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def foretold_in_s(alert: dict[str, object], records: Sequence[dict[str, object]]) -> float | None:
    """For a predictive `alert`, seconds to the first hard alert of the same detector on its
    node that followed it within `FORETOLD_WINDOW_S` among `records`; None otherwise."""
    t0 = _start(alert)
    if alert.get("kind") == "hard" or t0 is None:
        return None
    later = [t for r in records if r.get("kind") == "hard" and r.get("node") == alert.get("node")
             and r.get("source") == alert.get("source")
             and (t := _start(r)) is not None and t0 < t <= t0 + FORETOLD_WINDOW_S]
    return min(later) - t0 if later else None


def alert_record(node: str, now: float, replay: Path | None = None) -> dict[str, object]:
    """A detector alert on ``node`` as ``trainguard detect --alerts-out`` writes it, dated now.

    With ``replay`` (an alerts JSON-lines file), the first alert the file holds for ``node``
    (trainguard's own first, then any detector's) is replayed: its kind, score and signals,
    and, for a predictive alert that a hard one followed, how long before that failure it came
    (`PREDICTED_FAILURE_IN_S`).
    """
    found: dict[str, object] | None = None
    candidates: list[dict[str, Any]] = []
    if replay is not None:
        try:
            lines = replay.read_text().splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read --alerts-replay {replay}: "
                              f"{exc.strerror or exc}") from exc
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("node") == node:
                candidates.append(rec)
        candidates.sort(key=lambda r: (r.get("source") != "trainguard",
                                       float(r.get("start") or 0.0)))
        found = candidates[0] if candidates else None
        if found is None:
            raise ConfigError(f"--alerts-replay {replay} has no alert for node {node}")
    base = found or {"kind": "hard", "peak_score": 1.0, "source": "trainguard inject",
                     "signals": [{"metric": "injected", "gpu": None, "deviation": 0.0}]}
    if found is not None and (lead := foretold_in_s(found, candidates)) is not None:
        base = {**base, PREDICTED_FAILURE_IN_S: lead}
    return {**base, "node": node, "start": now, "end": now,
            "source": f"replay of {base.get('source', 'detector')}" if found else
            base["source"]}


def signal_for(kind: FaultKind) -> int:
    if kind is FaultKind.KILL:
        return signal.SIGKILL
    if kind is FaultKind.HANG:
        return signal.SIGSTOP
    raise ConfigError(f"{kind.value} is not delivered as a signal")


@dataclass(slots=True)
class Firing:
    """A supervisor-side fault pending in one attempt."""

    spec: FaultSpec
    rank: int | None
    node: str
    fired: bool = False


@dataclass(slots=True)
class FaultSchedule:
    """The supervisor-side faults of one attempt and when each is due."""

    launched: float
    firings: list[Firing] = field(default_factory=list)

    @classmethod
    def for_attempt(cls, specs: Sequence[FaultSpec], attempt: int, nodes: Sequence[str],
                    nproc_per_node: int, launched: float) -> FaultSchedule:
        firings = []
        for spec in specs:
            if spec.kind not in SUPERVISOR_KINDS or not spec.applies_to(attempt, None):
                continue
            if spec.kind in (FaultKind.XID, FaultKind.ALERT):
                node = spec.node or (nodes[spec.rank // nproc_per_node]
                                     if spec.rank is not None else nodes[0])
                firings.append(Firing(spec, spec.rank, node))
                continue
            rank = spec.rank
            if rank is None and spec.node is not None:
                if spec.node not in nodes:
                    continue  # the node is not part of this attempt
                rank = nodes.index(spec.node) * nproc_per_node
            rank = 0 if rank is None else rank
            if rank >= len(nodes) * nproc_per_node:
                continue
            firings.append(Firing(spec, rank, nodes[rank // nproc_per_node]))
        return cls(launched, firings)

    def due(self, now: float, steps: Mapping[int, int | None]) -> list[Firing]:
        """Firings whose time or step has come; each is returned once."""
        ready = []
        for f in self.firings:
            if f.fired:
                continue
            spec = f.spec
            if spec.step is not None:
                if f.rank is not None:
                    reached = steps.get(f.rank)
                else:
                    known = [s for s in steps.values() if s is not None]
                    reached = max(known) if known else None
                if reached is None or reached < spec.step:
                    continue
            if spec.after_s is not None and now < self.launched + spec.after_s:
                continue
            f.fired = True
            ready.append(f)
        return ready


__all__ = ["FaultSchedule", "Firing", "append_line", "signal_for", "xid_line"]
