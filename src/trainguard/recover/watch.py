"""What the supervisor watches while an attempt runs.

- :class:`RankWatch`: one rank's output and SDK event file: progress (heartbeats, else output;
  see :mod:`trainguard.recover.liveness` for how it is judged),
  steps, loss, startup phases, checkpoints, resumes, non-finite losses;
- :class:`NodeWatch`: every node's kernel log (job nodes and spares, from the session's start) and
  the detector's alerts (a JSON-lines file and/or the store), as :class:`FailureEvent`\\ s.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard.evidence.events import STORED_CHARS, EvidenceLine, FailureEvent, TimeKind
from trainguard.evidence.rules import RuleSet
from trainguard.evidence.scanner import scan_bytes
from trainguard.filetail import FileTail, parse_json_lines
from trainguard.recover.inject import PREDICTED_FAILURE_IN_S
from trainguard.taxonomy import Action, Category, Severity
from trainguard.trace.model import TraceWindow, window_from_record

if TYPE_CHECKING:
    from trainguard.store import Store

log = logging.getLogger(__name__)

_STORE_ALERT_POLL_S = 2.0
_KEEP_WINDOWS = 240  # 20 minutes of 5-s trace windows per rank
_HISTORY_BYTES = 8 << 20
HISTORY_S = 600.0
"""Kernel-log lines logged this long before the session starts still count (a GPU that fell off
the bus five minutes before launch is still gone); older history is ignored."""


class RankWatch:
    """Progress and SDK reports of one rank."""

    def __init__(self, rank: int, node: str, output: Path, events: Path, launched: float) -> None:
        self.rank = rank
        self.node = node
        self.output = output
        self.events_path = events
        self._out = FileTail(output)
        self._events = FileTail(events)
        self.launched = launched
        self.last_progress = launched
        self.progressed = False
        """Any progress at all since launch (startup allowance ends)."""
        self.sdk = False
        """The rank reports through the SDK: only its events count as its own progress."""
        self.last_output: float | None = None
        """When anything (an output line, an SDK event) last came from it: a rank without
        the SDK is judged with the whole job (:mod:`trainguard.recover.liveness`)."""
        self.last_step: int | None = None
        self.last_loss: float | None = None
        self.phases: dict[str, float] = {}
        self.begun: str | None = None
        """``warm`` or ``cold``: how the SDK says the rank's process began (None: not said)."""
        self.backend: str | None = None
        """The torch.distributed backend the SDK saw at the first step (``nccl``, ``gloo``)."""
        self.nonfinite: tuple[int, str] | None = None
        self.checkpoints: list[dict[str, Any]] = []
        self.resume: dict[str, Any] | None = None
        self.faults: list[str] = []
        self.finished = False
        self.windows: list[TraceWindow] = []
        """The rank's latest ``trace`` windows (bounded), for live straggler detection."""

    def poll(self, now: float) -> list[str]:
        """Read what is new; returns the new output lines (for echoing)."""
        data, _ = self._out.read()
        lines = data.decode("utf-8", "replace").splitlines() if data else []
        if lines:
            self.last_output = now
            if not self.sdk:
                self._progress(now)
        raw, _ = self._events.read()
        if raw:
            self.last_output = now
            for rec in parse_json_lines(raw, str(self.events_path)):
                self._event(rec, now)
        return lines

    def _progress(self, now: float) -> None:
        self.last_progress = now
        self.progressed = True

    def _event(self, rec: Mapping[str, Any], now: float) -> None:
        self.sdk = True
        self._progress(now)
        kind = rec.get("kind")
        if kind == "step":
            step = rec.get("step")
            if isinstance(step, int):
                self.last_step = step
            loss = rec.get("loss")
            if isinstance(loss, (int, float)) and math.isfinite(loss):
                self.last_loss = float(loss)
        elif kind == "phase":
            name, start, end = rec.get("name"), rec.get("start"), rec.get("end")
            if isinstance(name, str) and isinstance(start, (int, float)) \
                    and isinstance(end, (int, float)):
                self.phases[name] = self.phases.get(name, 0.0) + max(0.0, end - start)
            begun = rec.get("begun")
            if begun in ("warm", "cold"):  # sent with the imports phase only
                self.begun = str(begun)
            backend = rec.get("backend")
            if isinstance(backend, str) and backend:  # sent with the first_step phase
                self.backend = backend[:40]
        elif kind == "nonfinite":
            step = rec.get("step")
            if self.nonfinite is None and isinstance(step, int):
                self.nonfinite = (step, str(rec.get("loss", "nan")))
        elif kind == "checkpoint":
            self.checkpoints.append(dict(rec))
        elif kind == "resume":
            self.resume = dict(rec)
        elif kind == "fault":
            self.faults.append(str(rec.get("fault")))
        elif kind == "finish":
            self.finished = True
        elif kind == "trace":
            try:
                self.windows.append(window_from_record(rec))
            except ValueError as exc:
                log.warning("%s: malformed trace record: %s", self.events_path, exc)
            del self.windows[:-_KEEP_WINDOWS]

    def silent_for(self, now: float) -> float:
        return now - self.last_progress


class NodeWatch:
    """Kernel logs and detector alerts for a set of nodes, followed from construction on."""

    def __init__(self, kernel_logs: Mapping[str, Path], rules: RuleSet, *,
                 alerts_file: Path | None = None, store: Store | None = None,
                 stop_on_predictive: bool = False, since: float = 0.0,
                 history_s: float = HISTORY_S, nodes: Iterable[str] | None = None) -> None:
        """``nodes``: whose alerts count (default: the nodes of ``kernel_logs``; with agents the
        kernel logs are read on each host and only alerts are followed here)."""
        self._rules = rules
        self._nodes = frozenset(kernel_logs if nodes is None else nodes)
        self._tails = {node: FileTail(path, from_end=True) for node, path in kernel_logs.items()}
        self._pending = [ev for node, path in kernel_logs.items()
                         for ev in self._history(node, path, since - history_s)]
        self._alerts = FileTail(alerts_file, from_end=True) if alerts_file else None
        self._alerts_path = alerts_file
        self._store = store
        self._since = since
        self._seen_alerts: set[int] = set()
        self._next_store_poll = 0.0
        self._stop_on_predictive = stop_on_predictive

    @property
    def nodes(self) -> frozenset[str]:
        return self._nodes

    def _history(self, node: str, path: Path, cutoff: float) -> list[FailureEvent]:
        """Events already in a kernel log that are recent enough to matter: timestamped ones
        at/after ``cutoff``; untimestamped ones if the file was written since ``cutoff``."""
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                start = max(0, st.st_size - _HISTORY_BYTES)
                f.seek(start)
                data = f.read(_HISTORY_BYTES)
        except OSError:
            return []
        if start:
            data = data[data.find(b"\n") + 1:]
        recent_file = st.st_mtime >= cutoff
        found = scan_bytes(data, self._rules, path=str(path), host_hint=node,
                           first_line=1 if not start else 0)
        keep = []
        for ev in found:
            if ev.time_kind is TimeKind.ABSOLUTE and ev.time is not None:
                if ev.time < cutoff:
                    continue
            elif not recent_file:
                continue
            keep.append(replace(ev, host=node))
        return keep

    def poll(self, now: float) -> list[FailureEvent]:
        events, self._pending = self._pending, []
        for node, tail in self._tails.items():
            data, first = tail.read()
            if data:
                found = scan_bytes(data, self._rules, path=str(tail.path), first_line=first,
                                   host_hint=node)
                # The watched file *is* that node's kernel log, whatever host a line names.
                events.extend(replace(ev, host=node) for ev in found)
        if self._alerts is not None:
            data, first = self._alerts.read()
            if data:
                for i, rec in enumerate(parse_json_lines(data, str(self._alerts_path))):
                    ev = self._alert_event(rec, f"{self._alerts_path}", first + i)
                    if ev is not None:
                        events.append(ev)
        if self._store is not None and now >= self._next_store_poll:
            self._next_store_poll = now + _STORE_ALERT_POLL_S
            for alert in self._store.alerts(since=self._since):
                if alert.id in self._seen_alerts:
                    continue
                self._seen_alerts.add(alert.id)
                ev = self._alert_event({"node": alert.node, "start": alert.start,
                                        "kind": alert.kind, "peak_score": alert.peak_score,
                                        "signals": list(alert.signals),
                                        "source": alert.source}, "store", alert.id)
                if ev is not None:
                    events.append(ev)
        return events

    def _alert_event(self, rec: Mapping[str, Any], where: str, line: int) -> FailureEvent | None:
        node = rec.get("node")
        if not isinstance(node, str) or node not in self._nodes:
            return None
        if rec.get("status") == "resolved":  # an alert ending (trainguard watch's webhook)
            return None
        kind = str(rec.get("kind", "predictive"))
        fatal = kind == "hard" or self._stop_on_predictive
        start = rec.get("start")
        summary = alert_summary(kind, rec.get("signals"))
        fields = [("alert_kind", kind), ("source", str(rec.get("source", where)))]
        foretold = rec.get(PREDICTED_FAILURE_IN_S)
        if isinstance(foretold, (int, float)) and math.isfinite(foretold) and foretold > 0:
            fields.append((PREDICTED_FAILURE_IN_S, repr(float(foretold))))
        return FailureEvent(
            category=Category.GPU_HARDWARE, action=Action.EXCLUDE_NODE,
            severity=Severity.FATAL if fatal else Severity.NON_FATAL,
            signature="detector_alert", summary=summary[:300],
            time=float(start) if isinstance(start, (int, float)) else None,
            time_kind=TimeKind.ABSOLUTE if isinstance(start, (int, float)) else TimeKind.NONE,
            host=node, confidence=0.8 if kind == "hard" else 0.5,
            fields=tuple(fields),
            evidence=(EvidenceLine(where, line, summary[:STORED_CHARS]),))


def alert_summary(kind: str, signals: object, most: int = 3) -> str:
    """``detector <kind> alert (m1, m2, m3)``: the first `most` distinct metrics of the alert's
    signals, in order. One metric on several GPUs (``ecc_sbe`` on gpu0 and gpu1) is named once.

        >>> alert_summary("predictive", [{"metric": "ecc_sbe", "gpu": "0"},
        ...                              {"metric": "ecc_sbe", "gpu": "1"}, {"metric": "temp"}])
        'detector predictive alert (ecc_sbe, temp)'
    """
    names: list[str] = []
    for s in signals if isinstance(signals, list | tuple) else ():
        metric = s.get("metric") if isinstance(s, Mapping) else None
        if metric is not None and str(metric) not in names:
            names.append(str(metric))
    top = ", ".join(names[:most])
    return f"detector {kind} alert" + (f" ({top})" if top else "")


__all__ = ["NodeWatch", "RankWatch", "alert_summary"]
