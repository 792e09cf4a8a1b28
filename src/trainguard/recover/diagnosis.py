"""What the supervisor works out about a running attempt beyond exits: live stragglers and,
when it hangs, where the ranks stand.

- :class:`StragglerWatch`: every few seconds, the ranks the others persistently wait for (from
  the SDK's trace windows), said once when declared and once when recovered;
- :func:`stuck_at_exit`: when a rank that reported ``finish()`` has overstayed its exit
  grace (when silence means a hang: :mod:`trainguard.recover.liveness`);
- :class:`HangDiagnoser`: localizes a hang while the ranks are still there (collective state
  files, process states, Python stacks), written to ``attempts/<i>/hang.json``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainguard.atomicjson import write_json_atomic
from trainguard.evidence.events import FailureEvent
from trainguard.recover.backend import AttemptHandle, CollectsRankState, LaunchPlan
from trainguard.recover.spec import JobSpec
from trainguard.recover.watch import RankWatch
from trainguard.trace.collect import (
    STACK_SIGNAL,
    catches,
    process_state,
    read_states,
    request_stacks,
)
from trainguard.trace.hang import HangDiagnosis, RankPlace, localize_hang
from trainguard.trace.model import RankState
from trainguard.trace.runfiles import hang_path, stacks_path, trace_path

log = logging.getLogger(__name__)

STRAGGLER_EVERY_S = 5.0


def gpu_of(env: Mapping[str, str], local_rank: int) -> str | None:
    """The GPU a rank uses: its entry of CUDA_VISIBLE_DEVICES (the launch's or ours), else its
    LOCAL_RANK (the usual one-GPU-per-rank convention)."""
    visible = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if ids:
        return ids[local_rank] if local_rank < len(ids) else None
    return str(local_rank)


def stuck_at_exit(spec: JobSpec, w: RankWatch, code: int | None, now: float) -> bool:
    """Reported ``finish()`` through the SDK, yet still running after the exit grace."""
    return code is None and w.finished and w.silent_for(now) > spec.exit_grace_s


class StragglerWatch:
    """Live straggler detection for one attempt; ``attempts/<i>/stragglers.json``."""

    def __init__(self, index: int, run_dir: Path, status: Callable[[str], None],
                 start: float) -> None:
        self.index = index
        self.path = run_dir / "attempts" / str(index) / "stragglers.json"
        self._status = status
        self.next_at = start + STRAGGLER_EVERY_S
        self.reported: set[int] = set()

    def check(self, watches: Mapping[int, RankWatch], now: float) -> None:
        if now < self.next_at or len(watches) < 2:
            return
        self.next_at = now + STRAGGLER_EVERY_S
        windows = {r: w.windows for r, w in watches.items() if w.windows}
        if len(windows) < 2:
            return
        from trainguard.trace.straggler import detect_stragglers

        report = detect_stragglers(windows, None, {r: w.node for r, w in watches.items()})
        ongoing = {s.rank: s for s in report.stragglers if s.status == "ongoing"}
        changed = False
        for rank, st in ongoing.items():
            if rank not in self.reported:
                self.reported.add(rank)
                changed = True
                self._status(f"attempt {self.index}: straggler: {st.describe()}")
        for rank in sorted(self.reported - set(ongoing)):
            self.reported.discard(rank)
            changed = True
            self._status(f"attempt {self.index}: rank {rank} is no longer a straggler")
        if changed:
            try:
                write_json_atomic(self.path, {"attempt": self.index, "evaluated_at": now,
                                              **report.to_dict()})
            except OSError as exc:
                log.warning("could not write %s: %s", self.path, exc)


class HangDiagnoser:
    """Localizes a hang of one attempt (see :func:`trainguard.trace.hang.localize_hang`).

    ``local``: the ranks run on this machine (process states and py-spy can be used)."""

    def __init__(self, run_dir: Path, *, local: bool, clock: Callable[[], float],
                 sleep: Callable[[float], None], status: Callable[[str], None]) -> None:
        self.run_dir = run_dir
        self.local = local
        self.clock = clock
        self.sleep = sleep
        self._status = status

    def diagnose(self, plan: LaunchPlan, handle: AttemptHandle, stopped: Mapping[int, bool],
                 codes: Mapping[int, int | None],
                 node_events: Mapping[str, list[FailureEvent]]) -> HangDiagnosis:
        local = self.local
        t0 = self.clock()
        if isinstance(handle, CollectsRankState):
            remote = self._remote(plan, handle.collect(3.0), stopped, codes, handle.running())
            return self._conclude(plan, t0, *remote, node_events)
        running = handle.running()
        pids = handle.pids()
        places: dict[int, RankPlace] = {}
        candidates: dict[int, tuple[int | None, Path]] = {}
        for rl in plan.ranks:
            events = Path(rl.env["TRAINGUARD_EVENTS"])
            pid = pids.get(rl.rank)
            if rl.rank not in running:
                proc = "finished" if codes.get(rl.rank) == 0 else "exited"
            elif stopped.get(rl.rank):
                proc = "stopped"
            else:
                proc = process_state(pid) if local else "running"
            if proc == "running":
                candidates[rl.rank] = (pid, stacks_path(events))
            places[rl.rank] = RankPlace(rl.rank, rl.node, rl.local_rank,
                                        gpu_of(rl.env, rl.local_rank), pid if local else None,
                                        proc)
        states, notes = read_states({rl.rank: trace_path(Path(rl.env["TRAINGUARD_EVENTS"]))
                                     for rl in plan.ranks})
        # Only ranks that run the SDK's tracer dump stacks on the signal (a script without it
        # would be killed by SIGUSR2); locally the handler is checked in /proc as well.
        signalable = {r for r, t in candidates.items() if states.get(r) is not None
                      and (not local or catches(t[0], STACK_SIGNAL))}
        stacks = request_stacks(candidates, handle.signal_rank, timeout_s=3.0,
                                sleep=self.sleep, clock=self.clock, use_py_spy=local,
                                signalable=signalable)
        places = {r: replace(p, stack=stacks.get(r)) for r, p in places.items()}
        return self._conclude(plan, t0, places, states, notes, stacks, node_events)

    def _remote(self, plan: LaunchPlan, found: Mapping[int, Mapping[str, Any]],
                stopped: Mapping[int, bool], codes: Mapping[int, int | None],
                running: frozenset[int]) -> tuple[dict[int, RankPlace],
                                                  dict[int, RankState | None], list[str],
                                                  dict[int, str]]:
        """Places, collective states and stacks from what each host's agent collected: the
        state files it sent are kept next to the rank's mirrored events in the run dir."""
        places: dict[int, RankPlace] = {}
        stacks: dict[int, str] = {}
        paths: dict[int, Path] = {}
        for rl in plan.ranks:
            info = found.get(rl.rank, {})
            code = codes.get(rl.rank)
            if rl.rank not in running and (code is not None or not info.get("proc")):
                proc = "finished" if code == 0 else "exited"
            elif stopped.get(rl.rank):
                proc = "stopped"
            else:
                proc = str(info.get("proc") or "unknown")
            trace = info.get("trace")
            path = trace_path(Path(rl.env["TRAINGUARD_EVENTS"]))
            if isinstance(trace, bytes):
                try:
                    path.write_bytes(trace)
                except OSError as exc:
                    log.warning("could not keep rank %d's state file: %s", rl.rank, exc)
            paths[rl.rank] = path
            stack = info.get("stack")
            if isinstance(stack, str):
                stacks[rl.rank] = stack
            pid = info.get("pid")
            places[rl.rank] = RankPlace(rl.rank, rl.node, rl.local_rank,
                                        gpu_of(rl.env, rl.local_rank),
                                        pid if isinstance(pid, int) else None, proc,
                                        stacks.get(rl.rank))
        states, notes = read_states(paths)
        return places, states, notes, stacks

    def _conclude(self, plan: LaunchPlan, t0: float, places: Mapping[int, RankPlace],
                  states: Mapping[int, RankState | None], notes: list[str],
                  stacks: Mapping[int, str],
                  node_events: Mapping[str, list[FailureEvent]]) -> HangDiagnosis:
        index = plan.attempt
        evidence = {n: [ev.summary for ev in evs] for n, evs in node_events.items() if evs}
        diagnosis = localize_hang(states, places, evidence, [rl.rank for rl in plan.ranks],
                                  notes)
        self._status(f"attempt {index}: hang localized in {self.clock() - t0:.1f} s: "
                     f"{diagnosis.summary}")
        path = hang_path(self.run_dir, index)
        try:
            write_json_atomic(path, {"attempt": index, "diagnosed_at": self.clock(),
                                     **diagnosis.to_dict(),
                                     "stacks": {str(r): t for r, t in sorted(stacks.items())}})
        except OSError as exc:
            log.warning("could not write %s: %s", path, exc)
        return diagnosis


__all__ = ["STRAGGLER_EVERY_S", "HangDiagnoser", "StragglerWatch", "gpu_of", "stuck_at_exit"]
