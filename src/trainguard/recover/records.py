"""What a supervised run leaves behind: ``summary.json`` in the run directory and the store's
session, attempts, events, exclusions and checkpoints; ``state.json`` (what runs now, for
``trainguard inject``) and ``control.json`` (how to reach an agent run's controller).

``summary.json`` is rewritten atomically after every attempt, so a reader (or a crashed
supervisor's operator) always finds a complete document.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from trainguard.atomicjson import write_json_atomic
from trainguard.evidence.events import FailureEvent
from trainguard.fdlimit import reserve_fds, with_reserve
from trainguard.recover.failure import Failure, TeardownCrash
from trainguard.recover.launchplan import LaunchPlan
from trainguard.recover.policy import Decision
from trainguard.recover.spec import JobSpec
from trainguard.store import Store

SUMMARY_FORMAT = "trainguard-run/1"


@dataclass(frozen=True, slots=True)
class Exclusion:
    node: str
    reason: str
    attempt: int
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "reason": self.reason, "attempt": self.attempt,
                "evidence": list(self.evidence)}


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """One launch of the job and how it ended."""

    index: int
    nodes: tuple[str, ...]
    started: float
    ended: float
    status: str
    """``succeeded``, ``failed`` or ``cancelled``."""
    exit_codes: Mapping[int, int | None]
    """Per rank; negative: killed by that signal; None: never exited by itself."""
    failure: Failure | None = None
    decision: Decision | None = None
    resumed_from_step: int | None = None
    skipped_checkpoints: tuple[Mapping[str, Any], ...] = ()
    """Checkpoints the job's resume rejected (corrupt, incomplete), as the SDK reported them."""
    startup_phases: Mapping[str, float] = field(default_factory=dict)
    last_step: int | None = None
    last_loss: float | None = None
    faults: tuple[str, ...] = ()
    """Faults injected into this attempt (tests, demos)."""
    store_id: int | None = None
    failed_at: float | None = None
    """When the supervisor saw the failure (before stopping the other ranks)."""
    hang_for_s: float | None = None
    """For a hang: seconds without progress when it was declared."""
    teardown_crashes: tuple[TeardownCrash, ...] = ()
    """Ranks that crashed after the work was done (the attempt still succeeded)."""
    host_clocks: Mapping[str, Mapping[str, float | int]] = field(default_factory=dict)
    """Each agent host's clock minus the controller's (``offset_s``, ``uncertainty_s``,
    ``samples``): :mod:`trainguard.agent.clock`; empty without agents."""
    resume_source: str | None = None
    """Where the SDK says the ranks' state came from (``memory``, ``buddy``, ``disk``)."""
    restore: Mapping[str, Any] | None = None
    """What this attempt restored: ``source`` (memory, buddy, mixed, disk, none), ``step``,
    ``steps_lost`` (the best step reached before minus ``step``), ``per_rank``, ``why``
    (:class:`trainguard.recover.restore.RestoreChoice`)."""
    begun: str | None = None
    """How the ranks' processes began, as the SDK reported: ``warm`` (all in pre-warmed
    standbys), ``cold``, ``mixed``; None where no rank said."""

    @property
    def excluded_nodes(self) -> tuple[str, ...]:
        return self.decision.excluded if self.decision is not None else ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "nodes": list(self.nodes),
            "started": self.started,
            "ended": self.ended,
            "duration_s": round(self.ended - self.started, 3),
            "failed_at": self.failed_at,
            "status": self.status,
            "exit_codes": {str(r): c for r, c in sorted(self.exit_codes.items())},
            "failure_category": self.failure.category.value if self.failure else None,
            "failure": self.failure.to_dict() if self.failure else None,
            "decision": self.decision.verdict.value if self.decision else None,
            "reason": self.decision.reason if self.decision else None,
            "excluded_nodes": list(self.excluded_nodes),
            "backoff_s": self.decision.backoff_s if self.decision else None,
            "resumed_from_step": self.resumed_from_step,
            "skipped_checkpoints": [dict(s) for s in self.skipped_checkpoints],
            "startup_phases": {k: round(v, 3) for k, v in self.startup_phases.items()},
            "last_step": self.last_step,
            "last_loss": self.last_loss,
            "faults": list(self.faults),
            "teardown_crashes": [c.to_dict() for c in self.teardown_crashes],
            "host_clocks": {n: dict(v) for n, v in sorted(self.host_clocks.items())},
            "restore": dict(self.restore) if self.restore is not None else None,
            "begun": self.begun,
        }


@dataclass(frozen=True, slots=True)
class RunResult:
    """The whole supervised run: every attempt, every exclusion, the final status."""

    status: str
    """``succeeded``, ``failed`` or ``cancelled``."""
    message: str
    attempts: tuple[AttemptResult, ...]
    exclusions: tuple[Exclusion, ...]
    run_dir: Path
    session_id: int | None = None

    @property
    def exit_code(self) -> int:
        return {"succeeded": 0, "cancelled": 130}.get(self.status, 1)


@runtime_checkable
class MeasuresClocks(Protocol):
    """An attempt handle that measures its hosts' clocks against the controller's."""

    def clock_offsets(self) -> Mapping[str, Mapping[str, float | int]]:
        ...


def begun_of(kinds: Sequence[str | None]) -> str | None:
    """The attempt's start from its ranks' (``warm``/``cold``; None: not reported): one kind
    when all that reported agree, else ``mixed``; None when none reported."""
    said = {k for k in kinds if k is not None}
    return None if not said else said.pop() if len(said) == 1 else "mixed"


def host_clocks(handle: object) -> dict[str, dict[str, float | int]]:
    """What ``handle`` measured of its hosts' clocks, for :attr:`AttemptResult.host_clocks`."""
    if not isinstance(handle, MeasuresClocks):
        return {}
    return {node: dict(off) for node, off in handle.clock_offsets().items()}


class Recorder:
    """Writes the run's records as it goes: ``summary.json`` and, when given, the store."""

    def __init__(self, run_dir: Path, header: Mapping[str, Any], store: Store | None) -> None:
        self.run_dir = run_dir
        self.summary_path = run_dir / "summary.json"
        self._header = dict(header)
        self._store = store
        self.session_id: int | None = None

    def start(self, name: str, backend: str, started: float,
              config: Mapping[str, Any]) -> None:
        if self._store is not None:
            self.session_id = self._store.create_session(name, backend=backend, started=started,
                                                         config=config)
        reserve_fds()  # the run's own records are written even when descriptors run out
        self.write("running", "", (), ())

    def start_attempt(self, index: int, nodes: Sequence[str], started: float) -> int | None:
        if self._store is None or self.session_id is None:
            return None
        return self._store.create_attempt(self.session_id, index=index, nodes=nodes,
                                          started=started, automatic=True)

    def finish_attempt(self, result: AttemptResult, events: Sequence[FailureEvent],
                       exclusions: Sequence[Exclusion]) -> None:
        store = self._store
        if store is None or result.store_id is None:
            return
        failure = result.failure
        store.finish_attempt(
            result.store_id, ended=result.ended, status=result.status,
            failure_category=failure.category.value if failure else None,
            decision=result.decision.verdict.value if result.decision else None,
            excluded_nodes=result.excluded_nodes,
            exit_codes={str(r): c for r, c in result.exit_codes.items()},
            startup_phases=result.startup_phases,
            evidence=failure.evidence if failure else (),
            detail={"failure": failure.to_dict() if failure else None,
                    "decision": result.decision.to_dict() if result.decision else None,
                    "skipped_checkpoints": [dict(s) for s in result.skipped_checkpoints],
                    "faults": list(result.faults), "last_step": result.last_step,
                    "last_loss": result.last_loss, "failed_at": result.failed_at,
                    "hang_for_s": result.hang_for_s,
                    "teardown_crashes": [c.to_dict() for c in result.teardown_crashes],
                    "restore": dict(result.restore) if result.restore is not None else None,
                    "begun": result.begun},
            resumed_from_step=result.resumed_from_step)
        store.add_events(events, session_id=self.session_id, attempt_id=result.store_id)
        for ex in exclusions:
            store.add_exclusion(ex.node, reason=ex.reason, created=result.ended,
                                evidence=ex.evidence, session_id=self.session_id,
                                attempt_id=result.store_id)

    def add_checkpoint(self, attempt_id: int | None, rec: Mapping[str, Any]) -> None:
        if self._store is None:
            return
        step, path = rec.get("step"), rec.get("path")
        if not isinstance(step, int) or not isinstance(path, str):
            return
        size, save_s, blocking_s = rec.get("size_bytes"), rec.get("save_s"), rec.get("blocking_s")
        self._store.add_checkpoint(
            session_id=self.session_id, attempt_id=attempt_id, step=step, path=path,
            created=float(rec.get("t", 0.0)),
            size_bytes=size if isinstance(size, int) else None,
            save_s=float(save_s) if isinstance(save_s, (int, float)) else None,
            blocking_s=float(blocking_s) if isinstance(blocking_s, (int, float)) else None,
            ok=bool(rec.get("ok", True)))

    def write(self, status: str, message: str, attempts: Sequence[AttemptResult],
              exclusions: Sequence[Exclusion], current: Mapping[str, Any] | None = None) -> None:
        doc = {
            "format": SUMMARY_FORMAT,
            **self._header,
            "session_id": self.session_id,
            "status": status,
            "message": message,
            "attempts": [a.to_dict() for a in attempts],
            "exclusions": [e.to_dict() for e in exclusions],
        }
        if current is not None:
            doc["current_attempt"] = dict(current)
        with_reserve(lambda: write_json_atomic(self.summary_path, doc))

    def finish(self, result: RunResult, ended: float) -> None:
        if self._store is not None and self.session_id is not None:
            self._store.finish_session(self.session_id, status=result.status, ended=ended)
        self.write(result.status, result.message, result.attempts, result.exclusions)


def run_header(spec: JobSpec, backend: str, run_id: str) -> dict[str, Any]:
    """The run's identity, at the top of ``summary.json``."""
    return {"name": spec.name, "backend": backend, "run_id": run_id,
            "command": list(spec.command), "nodes": list(spec.nodes),
            "spares": list(spec.spares), "nproc_per_node": spec.nproc_per_node,
            "run_dir": str(spec.run_dir)}


def run_config(spec: JobSpec, header: Mapping[str, Any]) -> dict[str, Any]:
    """The session's configuration, as the store keeps it."""
    pol = spec.policy
    return {**header, "hang_timeout_s": spec.hang_timeout_s,
            "min_nodes": spec.min_nodes, "max_retries": pol.max_retries,
            "faults": [str(f) for f in spec.faults]}


def write_running_state(spec: JobSpec, plan: LaunchPlan, pids: Mapping[int, int],
                        control: Mapping[str, object] | None = None) -> None:
    """``state.json`` while attempt ``plan.attempt`` runs: its ranks, pids, kernel logs.

    ``control``: how ``trainguard inject`` reaches remote ranks through the controller; its
    secret goes to ``control.json``, a file only this user can read."""
    extra: dict[str, Any] = {}
    if control is not None:
        path = spec.run_dir / "control.json"
        fd = with_reserve(lambda: os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        with os.fdopen(fd, "w") as f:
            json.dump(dict(control), f)
        extra["control"] = path.name
    state = spec.run_dir / "state.json"
    with_reserve(lambda: write_json_atomic(state, {
        **extra, "status": "running", "supervisor_pid": os.getpid(), "attempt": plan.attempt,
        "nodes": list(plan.nodes),
        "kernel_logs": {n: str(spec.kernel_log_path(n)) for n in (*spec.nodes, *spec.spares)},
        # Listed once every rank's pid is known (agents report them after starting the ranks;
        # a pid is the rank's process id on its own node).
        "ranks": [{"rank": rl.rank, "node": rl.node, "pid": pids.get(rl.rank),
                   "output": str(rl.output)} for rl in plan.ranks]
        if all(rl.rank in pids for rl in plan.ranks) else [],
    }))


def write_final_state(run_dir: Path, status: str) -> None:
    """``state.json`` once the chain has ended."""
    with_reserve(lambda: write_json_atomic(run_dir / "state.json",
                                           {"status": status, "supervisor_pid": os.getpid()}))


__all__ = ["SUMMARY_FORMAT", "AttemptResult", "Exclusion", "MeasuresClocks", "Recorder",
           "RunResult", "begun_of", "host_clocks", "run_config", "run_header", "write_final_state",
           "write_running_state"]
