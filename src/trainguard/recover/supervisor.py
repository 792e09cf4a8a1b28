"""The supervisor: launch, watch, classify, decide, relaunch; every step recorded.

Outline of one chain (:meth:`Supervisor.run`):
1. prepare: check the command, node list, capacity and run directory before launching anything;
   create each node's directory and watched kernel log; start following kernel logs and alerts;
2. launch an attempt: every rank gets the torch.distributed environment plus trainguard's
   (node name, SDK event file, faults to inject, rollback limit);
3. watch it: rank exits, SDK heartbeats (else output) for hangs, non-finite losses, fatal node
   evidence (kernel-log XIDs, detector alerts) which stops the attempt even while ranks run;
4. when a rank exits non-zero, give the others ``peer_exit_grace_s`` to exit on their own (a
   crash in teardown after the work is done is no failure); stop what is left (SIGTERM, SIGKILL
   after the grace period), read the failing ranks' output tails, and
   :func:`~trainguard.recover.failure.analyze` the attempt;
5. :func:`~trainguard.recover.policy.decide`: retry, exclude and retry on spares, roll back, or
   stop; record the attempt, its evidence and exclusions; back off; go to 2.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from trainguard.atomicjson import write_json_atomic
from trainguard.errors import ConfigError, LaunchError, TrainguardError
from trainguard.evidence.events import EvidenceLine, FailureEvent
from trainguard.evidence.rules import RuleSet, load_rules
from trainguard.evidence.scanner import scan_bytes
from trainguard.faultspec import SDK_KINDS, FaultKind, join_faults
from trainguard.filetail import read_tail
from trainguard.recover.backend import AttemptHandle, Backend, LaunchPlan, RankLaunch
from trainguard.recover.diagnosis import HangDiagnoser, StragglerWatch
from trainguard.recover.failure import (
    AttemptFacts,
    Failure,
    RankOutcome,
    TeardownCrash,
    Trigger,
    analyze,
    evidence_lines,
    is_node_fault,
    may_be_teardown,
    teardown_crash,
    teardown_note,
)
from trainguard.recover.inject import (
    FaultSchedule,
    alert_record,
    append_line,
    signal_for,
    xid_line,
)
from trainguard.recover.lifecycle import Lifecycle, State
from trainguard.recover.policy import ChainState, Decision, Verdict, decide, implicated_after
from trainguard.recover.records import AttemptResult, Exclusion, Recorder, RunResult
from trainguard.recover.spec import JobSpec
from trainguard.recover.watch import NodeWatch, RankWatch
from trainguard.store import Store
from trainguard.taxonomy import Action, Category, Severity
from trainguard.textsafe import terminal_safe

log = logging.getLogger(__name__)

_TAIL_BYTES = 256 << 10
_TAIL_LINES = 4000
"""A failed rank's output classified: its last lines, at most this many and ``_TAIL_BYTES``."""

_T = TypeVar("_T")


class _Interrupted(Exception):
    """Raised into a running log classification by :meth:`Supervisor.cancel`."""


@dataclass(slots=True)
class _Chain:
    """Mutable bookkeeping of one chain (the policy only ever sees frozen snapshots)."""

    nodes: tuple[str, ...]
    spares: list[str]
    attempts: list[AttemptResult] = field(default_factory=list)
    exclusions: list[Exclusion] = field(default_factory=list)
    history: list[Failure] = field(default_factory=list)
    implicated: dict[str, int] = field(default_factory=dict)
    checkpoint_steps: set[int] = field(default_factory=set)
    retries: int = 0
    rollbacks: int = 0
    resume_max_step: int | None = None


@dataclass(slots=True)
class _Outcome:
    result: AttemptResult
    failure: Failure | None
    events: list[FailureEvent]
    teardown: tuple[TeardownCrash, ...] = ()


class Supervisor:
    """Run one job to success or a decided stop.

        sup = Supervisor(spec, LocalBackend(), store=Store.open("tg.db"))
        result = sup.run()          # sup.cancel() from a signal handler stops it cleanly
    """

    def __init__(self, spec: JobSpec, backend: Backend, *, store: Store | None = None,
                 rules: RuleSet | None = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 on_status: Callable[[str], None] | None = None,
                 on_output: Callable[[int, str, str], None] | None = None,
                 overwrite: bool = False) -> None:
        self.spec = spec
        self.backend = backend
        self.store = store
        self.rules = rules if rules is not None else load_rules()
        self.clock = clock
        self.sleep = sleep
        status = on_status or (lambda msg: log.info("%s", msg))
        # Status lines quote rank output (exception text, evidence): never a raw escape sequence.
        self._status: Callable[[str], None] = lambda msg: status(terminal_safe(msg))
        self._output = on_output
        self._overwrite = overwrite
        self._cancelled = False
        self._classifying = False
        self.lifecycle = Lifecycle()
        self.run_id = uuid.uuid4().hex[:12]
        self._recorder: Recorder | None = None
        self._node_watch: NodeWatch | None = None
        self._remote_klogs = bool(getattr(backend, "reads_kernel_logs", False))

    # -- public ------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask the run to stop (safe from a signal handler): ranks are stopped, the attempt is
        recorded as cancelled.

        Called from a signal handler while the supervisor classifies log text (which can take
        long on adversarial lines), it abandons that classification at once: it raises into it,
        and :meth:`_classify` turns that into "no evidence"."""
        self._cancelled = True
        if self._classifying and threading.current_thread() is threading.main_thread():
            self._classifying = False
            raise _Interrupted

    def run(self) -> RunResult:
        spec = self.spec
        self.prepare()
        nodes, spares, skipped = self._usable_nodes()
        started = self.clock()
        recorder = Recorder(spec.run_dir, self._header(), self.store)
        self._recorder = recorder
        recorder.start(spec.name, self.backend.name, started, self._config())
        all_nodes = (*spec.nodes, *spec.spares)
        # With agents, each host's agent reads its own kernel log; here only the alerts.
        self._node_watch = NodeWatch(
            {} if self._remote_klogs else {n: spec.kernel_log_path(n) for n in all_nodes},
            self.rules, nodes=all_nodes,
            alerts_file=spec.alerts_file, store=self.store,
            stop_on_predictive=spec.stop_on_predictive, since=started)
        chain = _Chain(nodes, spares)
        for message in skipped:
            self._status(message)
        while True:
            if self._cancelled:
                self.lifecycle.to(State.CANCELLED)
                return self._finish(chain, "cancelled", "cancelled before launch")
            self.lifecycle.to(State.LAUNCHING)
            try:
                outcome = self._attempt(len(chain.attempts), chain)
            except LaunchError as exc:
                self.lifecycle.to(State.FAILED)
                return self._finish(chain, "failed", f"launch failed: {exc}")
            chain.attempts.append(outcome.result)
            failure = outcome.failure
            if failure is None:
                self.lifecycle.to(State.SUCCEEDED)
                recorder.finish_attempt(outcome.result, outcome.events, ())
                n = len(chain.attempts)
                message = f"job succeeded after {n} attempt{'s' if n > 1 else ''}"
                if outcome.teardown:
                    message = f"{teardown_note(outcome.teardown)}; {message}"
                return self._finish(chain, "succeeded", message)
            decision = self._decide(failure, chain)
            result = replace(outcome.result, decision=decision)
            chain.attempts[-1] = result
            new_exclusions = [Exclusion(node, failure.summary, result.index, failure.evidence)
                              for node in decision.excluded]
            chain.exclusions.extend(new_exclusions)
            recorder.finish_attempt(result, outcome.events, new_exclusions)
            for ex in new_exclusions:
                self._tell_scheduler(ex.node, f"trainguard: {failure.summary}")
            self._status(f"attempt {result.index}: {failure.summary}")
            self._status(f"decision: {decision.verdict.value}: {decision.reason}")
            if decision.verdict is Verdict.STOP:
                final = "cancelled" if result.status == "cancelled" else "failed"
                self.lifecycle.to(State.CANCELLED if final == "cancelled" else State.FAILED)
                return self._finish(chain, final, decision.reason)
            self._advance(chain, decision)
            self.lifecycle.to(State.BACKOFF)
            recorder.write("running", decision.reason, chain.attempts, chain.exclusions)
            if decision.backoff_s > 0:
                self._status(f"waiting {decision.backoff_s:.1f} s before attempt "
                             f"{len(chain.attempts)}")
            if not self._wait(decision.backoff_s, chain):
                self.lifecycle.to(State.CANCELLED)
                return self._finish(chain, "cancelled", "cancelled during backoff")

    def prepare(self) -> None:
        """Every check that can fail before a process starts (one clear error each)."""
        spec = self.spec
        self.backend.check(spec.command, spec.nodes)
        cap = self.backend.capacity()
        if cap is not None and spec.nproc_per_node > cap:
            raise ConfigError(
                f"--nproc-per-node {spec.nproc_per_node} is more than a {self.backend.name} node "
                f"holds ({cap}); lower it or set --slots-per-node")
        for fault in spec.faults:
            if fault.rank is not None and fault.rank >= spec.world_size:
                raise ConfigError(f"fault {fault} names rank {fault.rank}, but the job has "
                                  f"{spec.world_size} rank(s)")
        run_dir = spec.run_dir
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            probe = run_dir / f".trainguard-write-test-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise LaunchError(f"run dir {run_dir} is not writable: {exc.strerror or exc}") \
                from exc
        previous = [p for p in (run_dir / "summary.json", run_dir / "attempts") if p.exists()]
        if previous and not self._overwrite:
            raise ConfigError(f"run dir {run_dir} already holds a run ({previous[0].name}); "
                              "choose a new --run-dir or pass --overwrite")
        for p in previous:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
        if not self._remote_klogs and "{node}" not in spec.kernel_log:
            raise ConfigError("the kernel-log template must contain {node} when every node's "
                              "log is read on this machine")
        for node in (*spec.nodes, *spec.spares):
            (run_dir / "nodes" / node).mkdir(parents=True, exist_ok=True)
            if self._remote_klogs:
                continue  # the node's own agent reads it, on the node
            klog = spec.kernel_log_path(node)
            try:
                klog.parent.mkdir(parents=True, exist_ok=True)
                klog.touch(exist_ok=True)
            except OSError as exc:
                raise LaunchError(f"cannot create the watched kernel log {klog}: "
                                  f"{exc.strerror or exc}") from exc

    def _usable_nodes(self) -> tuple[tuple[str, ...], list[str], list[str]]:
        """Nodes and spares minus those the store says are excluded (until an operator releases
        them): each excluded node is replaced in place by a spare; one clear error if the job
        cannot be placed."""
        spec = self.spec
        active: dict[str, str] = {}
        if self.store is not None:
            for record in self.store.exclusions(active_only=True):
                active.setdefault(record.node, record.reason)
        for node, reason in self.backend.unavailable((*spec.nodes, *spec.spares)).items():
            active.setdefault(node, reason)
        spares = [s for s in spec.spares if s not in active]
        nodes: list[str] = []
        notes = []
        for node in spec.nodes:
            why = active.get(node)
            if why is None:
                nodes.append(node)
                continue
            sub = spares.pop(0) if spares else None
            notes.append(f"{node} is excluded ({why}); "
                         + (f"using spare {sub}" if sub else "no spare to replace it"))
            if sub is not None:
                nodes.append(sub)
        notes += [f"spare {s} is excluded ({active[s]}); not used"
                  for s in spec.spares if s in active]
        required = spec.min_nodes if spec.min_nodes is not None else len(spec.nodes)
        if len(nodes) < required:
            names = ", ".join(n for n in (*spec.nodes, *spec.spares) if n in active)
            raise ConfigError(
                f"excluded node(s) {names} leave {len(nodes)} of the {required} node(s) the job "
                f"needs; after repair: trainguard nodes release NODE (or add --spares)")
        return tuple(nodes), spares, notes

    # -- one attempt -------------------------------------------------------------------------

    def _attempt(self, index: int, chain: _Chain) -> _Outcome:
        spec = self.spec
        nodes = chain.nodes
        assert self._recorder is not None and self._node_watch is not None
        port = spec.master_port or self.backend.free_port(nodes)
        plan = replace(self._plan(index, nodes, port, chain.resume_max_step),
                       watch_nodes=tuple(chain.spares),
                       kernel_logs={n: str(spec.kernel_log_path(n))
                                    for n in (*nodes, *chain.spares)})
        self._status(f"attempt {index}: launching {len(plan.ranks)} rank(s) on "
                     f"{', '.join(nodes)}")
        t0 = self.clock()
        handle = self.backend.launch(plan)
        launched = self.clock()
        self.lifecycle.to(State.RUNNING)
        store_id = self._recorder.start_attempt(index, nodes, t0)
        watches = {rl.rank: RankWatch(rl.rank, rl.node, rl.output,
                                      Path(rl.env["TRAINGUARD_EVENTS"]), launched)
                   for rl in plan.ranks}
        self._write_state(index, plan, handle)
        schedule = FaultSchedule.for_attempt(spec.faults, index, nodes, spec.nproc_per_node,
                                             launched)
        codes: dict[int, int | None] = {r: None for r in watches}
        exited_at: dict[int, float] = {}
        node_events: dict[str, list[FailureEvent]] = {}
        fired: list[str] = []
        seen_ckpts: dict[int, int] = {r: 0 for r in watches}
        trigger: Trigger | None = None
        hang_for: float | None = None
        stragglers = StragglerWatch(index, spec.run_dir, self._status, launched)
        while trigger is None:
            now = self.clock()
            for ex in handle.poll():
                codes[ex.rank], exited_at[ex.rank] = ex.returncode, now
                w = watches[ex.rank]
                if ex.returncode != 0:
                    self._status(f"attempt {index}: rank {ex.rank} on {w.node} "
                                 f"{RankOutcome(ex.rank, w.node, ex.returncode).exit_text()}")
            self._poll_ranks(watches, chain, store_id, seen_ckpts, now)
            trigger = self._poll_nodes(nodes, chain, node_events, now, _remote_events(handle))
            for firing in schedule.due(now, {r: w.last_step for r, w in watches.items()}):
                fired.append(str(firing.spec))
                self._fire(firing.spec.kind, firing.rank, firing.node, firing.spec.xid, handle,
                           index)
            if trigger is not None:
                break
            failed = {r: c for r, c in codes.items() if c not in (None, 0)}
            if any(w.nonfinite is not None for w in watches.values()):
                trigger = Trigger.NONFINITE
            elif self._cancelled:
                trigger = Trigger.CANCEL
            elif failed:
                # A crash that may be in teardown (an abort, a rank that reported finish()):
                # the others may be finishing or failing in turn; let them exit on their own
                # for a moment, their exits say which. Otherwise there is nothing to wait for.
                waiting = all(may_be_teardown(c, watches[r].finished) for r, c in failed.items())
                deadline = min(exited_at[r] for r in failed) + spec.peer_exit_grace_s
                if waiting and now < deadline and any(c is None for c in codes.values()):
                    self.sleep(spec.poll_interval_s)
                elif _settling(handle):
                    # A host's agent just went away: these exits may be its consequence (the
                    # peers of a dead host fail first). Wait for its verdict (lost or back).
                    self.sleep(spec.poll_interval_s)
                else:
                    trigger = Trigger.EXIT
            elif all(c == 0 or self._stuck_at_exit(watches[r], c, now)
                     for r, c in codes.items()):
                stuck = sorted(r for r, c in codes.items() if c is None)
                if stuck:
                    self._status(f"attempt {index}: rank(s) {', '.join(map(str, stuck))} "
                                 f"finished training but did not exit within "
                                 f"{spec.exit_grace_s:g} s: stopping them")
                trigger = Trigger.SUCCESS
            else:
                stragglers.check(watches, now)
                hang_for = self._hang(watches, codes, now)
                if hang_for is not None:
                    trigger = Trigger.HANG
                    self._status(f"attempt {index}: no progress for {hang_for:.0f} s: hang")
                else:
                    self.sleep(spec.poll_interval_s)
        return self._end_attempt(index, chain, plan, handle, watches, codes, exited_at,
                                 node_events, trigger, hang_for, fired, t0, launched, store_id)

    def _end_attempt(self, index: int, chain: _Chain, plan: LaunchPlan, handle: AttemptHandle,
                     watches: Mapping[int, RankWatch], codes: dict[int, int | None],
                     exited_at: Mapping[int, float], node_events: dict[str, list[FailureEvent]],
                     trigger: Trigger, hang_for: float | None, fired: list[str], t0: float,
                     launched: float, store_id: int | None) -> _Outcome:
        spec = self.spec
        assert self._node_watch is not None
        failed_at = self.clock()
        stopped = {r: handle.is_stopped(r) for r in handle.running()}
        hang = None
        if trigger is Trigger.HANG:
            diagnoser = HangDiagnoser(spec.run_dir, local=bool(handle.pids()),
                                      clock=self.clock, sleep=self.sleep, status=self._status)
            hang = diagnoser.diagnose(plan, handle, stopped, codes, node_events)
        self.lifecycle.to(State.STOPPING)
        if handle.running():
            for ex in handle.stop(spec.term_timeout_s):
                codes[ex.rank] = ex.returncode
        handle.close()
        ended = self.clock()
        self.lifecycle.to(State.DECIDING)
        self._poll_ranks(watches, chain, store_id, {r: len(w.checkpoints) for r, w in
                                                    watches.items()}, ended)
        self._poll_nodes(chain.nodes, chain, node_events, ended, _remote_events(handle))
        outcomes = tuple(
            RankOutcome(r, w.node, codes[r], exited_at.get(r), stopped.get(r, False),
                        w.last_step, w.last_progress, w.finished)
            for r, w in sorted(watches.items()))
        no_events: tuple[FailureEvent, ...] = ()
        rank_events = {r: self._classify(partial(self._tail_events, w), no_events)
                       for r, w in watches.items() if codes[r] not in (None, 0) and r in exited_at}
        nonfinite = next(((r, w.nonfinite[0], w.nonfinite[1]) for r, w in sorted(
            watches.items()) if w.nonfinite is not None), None)
        facts = AttemptFacts(trigger, outcomes, rank_events,
                             {n: tuple(evs) for n, evs in node_events.items()}, nonfinite,
                             hang_for, hang)
        failure = analyze(facts)
        teardown = teardown_crash(facts) if failure is None else ()
        status = "succeeded" if failure is None else (
            "cancelled" if trigger is Trigger.CANCEL else "failed")
        first = watches[min(watches)]
        phases: dict[str, float] = {"launch": launched - t0}
        for w in watches.values():
            for name, dur in w.phases.items():
                phases[name] = max(phases.get(name, 0.0), dur)
        resume = first.resume or next((w.resume for w in watches.values() if w.resume), None)
        resumed = resume.get("step") if resume else None
        skipped = tuple(s for s in (resume.get("skipped") or []) if isinstance(s, dict)) \
            if resume else ()
        faults = tuple(fired) + tuple(f for w in watches.values() for f in w.faults)
        result = AttemptResult(
            index=index, nodes=chain.nodes, started=t0, ended=ended, status=status,
            exit_codes=dict(codes), failure=failure,
            resumed_from_step=resumed if isinstance(resumed, int) else None,
            skipped_checkpoints=skipped, startup_phases=phases, last_step=first.last_step,
            last_loss=first.last_loss, faults=faults, store_id=store_id,
            failed_at=None if failure is None else failed_at, hang_for_s=hang_for,
            teardown_crashes=teardown)
        events = [ev for evs in node_events.values() for ev in evs]
        events += [ev for evs in rank_events.values() for ev in evs]
        events += self._checkpoint_events(skipped, first)
        events += [FailureEvent(
            category=Category.UNKNOWN, action=Action.NONE, severity=Severity.INFO,
            signature="teardown_crash", summary=c.describe(), host=c.node, rank=c.rank,
            fields=(("exit", c.exit_text), ("why_done", c.why_done))) for c in teardown]
        if teardown:
            self._status(f"attempt {index}: {teardown_note(teardown)}")
        elif failure is None:
            self._status(f"attempt {index}: succeeded")
        return _Outcome(result, failure, events, teardown)

    # -- watching ----------------------------------------------------------------------------

    def _poll_ranks(self, watches: Mapping[int, RankWatch], chain: _Chain,
                    store_id: int | None, seen: dict[int, int], now: float) -> None:
        assert self._recorder is not None
        for rank, w in watches.items():
            for line in w.poll(now):
                if self._output is not None:
                    self._output(rank, w.node, terminal_safe(line))
            for rec in w.checkpoints[seen.get(rank, 0):]:
                step = rec.get("step")
                if isinstance(step, int) and rec.get("ok", True):
                    chain.checkpoint_steps.add(step)
                self._recorder.add_checkpoint(store_id, rec)
            seen[rank] = len(w.checkpoints)

    def _poll_nodes(self, nodes: tuple[str, ...], chain: _Chain,
                    node_events: dict[str, list[FailureEvent]], now: float,
                    remote: list[FailureEvent] | None = None) -> Trigger | None:
        """Kernel-log evidence and alerts (``remote``: what the agents found on their hosts)."""
        assert self._node_watch is not None
        trigger = None
        watch = self._node_watch
        no_events: list[FailureEvent] = []
        for ev in [*self._classify(lambda: watch.poll(now), no_events), *(remote or ())]:
            node = ev.host or ""
            if node in nodes:
                node_events.setdefault(node, []).append(ev)
                if is_node_fault(ev):
                    self._status(f"{node}: {ev.summary}: stopping the attempt")
                    trigger = Trigger.NODE_EVIDENCE
            elif node in chain.spares and is_node_fault(ev):
                chain.spares.remove(node)
                reason = f"spare {node} failed while idle: {ev.summary}"
                self._status(reason)
                evidence = evidence_lines([ev])
                chain.exclusions.append(Exclusion(node, reason, len(chain.attempts), evidence))
                self._tell_scheduler(node, f"trainguard: {reason}")
                if self.store is not None:
                    self.store.add_exclusion(node, reason=reason, created=now, evidence=evidence,
                                             session_id=self._recorder.session_id
                                             if self._recorder else None)
        return trigger

    def _stuck_at_exit(self, w: RankWatch, code: int | None, now: float) -> bool:
        """Reported ``finish()`` through the SDK, yet still running after the exit grace."""
        return code is None and w.finished and w.silent_for(now) > self.spec.exit_grace_s

    def _hang(self, watches: Mapping[int, RankWatch], codes: Mapping[int, int | None],
              now: float) -> float | None:
        """Seconds without progress when a running rank has passed its allowance, else None."""
        spec = self.spec
        for rank, w in watches.items():
            if codes[rank] is not None or w.finished:
                continue  # a finished rank is on its exit grace, not hung
            limit = spec.hang_timeout_s if w.progressed else spec.startup_timeout_s
            silent = w.silent_for(now)
            if silent > limit:
                return silent
        return None

    def _classify(self, scan: Callable[[], _T], empty: _T) -> _T:
        """``scan()`` (log classification), abandoned for ``empty`` when the run is cancelled
        before or during it: a signal never waits on a slow regular expression."""
        if self._cancelled:
            return empty
        try:
            try:
                self._classifying = True
                return scan()
            finally:
                self._classifying = False
        except _Interrupted:
            log.info("log classification abandoned: the run is being cancelled")
            return empty

    def _tail_events(self, w: RankWatch) -> tuple[FailureEvent, ...]:
        """Classified evidence in the last lines of a failed rank's output."""
        try:
            data, first = read_tail(w.output, _TAIL_BYTES, _TAIL_LINES)
        except OSError:
            return ()
        found = scan_bytes(data, self.rules, path=str(w.output), first_line=first,
                           host_hint=w.node)
        return tuple(replace(ev, rank=w.rank if ev.rank is None else ev.rank, host=w.node)
                     for ev in found)

    def _checkpoint_events(self, skipped: tuple[Mapping[str, Any], ...],
                           w: RankWatch) -> list[FailureEvent]:
        events = []
        for s in skipped:
            summary = f"checkpoint {s.get('path')} rejected on resume: {s.get('reason')}"
            events.append(FailureEvent(
                category=Category.CHECKPOINT, action=Action.CHECK_STORAGE,
                severity=Severity.NON_FATAL, signature="checkpoint_rejected",
                summary=summary[:300], host=w.node, rank=w.rank,
                evidence=(EvidenceLine(str(w.events_path), 0, summary[:2000]),)))
        return events

    # -- acting ------------------------------------------------------------------------------

    def _fire(self, kind: FaultKind, rank: int | None, node: str, xid: int,
              handle: AttemptHandle, index: int) -> None:
        if kind is FaultKind.XID:
            self._status(f"inject: XID {xid} into {node}'s kernel log")
            remote = getattr(handle, "append_kernel_line", None)
            if self._remote_klogs and callable(remote):
                try:
                    remote(node, xid_line(node, xid))  # the node's agent writes its own log
                except LaunchError as exc:
                    self._status(f"inject: {exc}")
            else:
                append_line(self.spec.kernel_log_path(node), xid_line(node, xid))
            return
        if kind is FaultKind.ALERT:
            assert self.spec.alerts_file is not None  # JobSpec checks it
            record = alert_record(node, self.clock(), self.spec.alerts_replay)
            self._status(f"inject: {record.get('kind')} detector alert on {node} "
                         f"({record.get('source')})")
            append_line(self.spec.alerts_file, json.dumps(record) + "\n")
            return
        assert rank is not None
        self._status(f"inject: {kind.value} rank {rank} on {node}")
        handle.signal_rank(rank, signal_for(kind))

    def _decide(self, failure: Failure, chain: _Chain) -> Decision:
        spec = self.spec
        required = spec.min_nodes if spec.min_nodes is not None else len(spec.nodes)
        state = ChainState(
            nodes=chain.nodes, spares=tuple(chain.spares), required_nodes=required,
            retries_used=chain.retries, history=tuple(chain.history),
            implicated=dict(chain.implicated), rollbacks_used=chain.rollbacks,
            checkpoint_steps=tuple(sorted(chain.checkpoint_steps)),
            resume_max_step=chain.resume_max_step)
        decision = decide(failure, state, spec.policy)
        chain.implicated = implicated_after(failure, state)
        chain.history.append(failure)
        return decision

    def _advance(self, chain: _Chain, decision: Decision) -> None:
        chain.retries += 1
        if decision.verdict is Verdict.ROLLBACK:
            chain.rollbacks += 1
        chain.resume_max_step = decision.resume_max_step
        chain.spares = [s for s in chain.spares
                        if s not in decision.next_nodes and s not in decision.excluded]
        chain.nodes = decision.next_nodes

    def _tell_scheduler(self, node: str, reason: str) -> None:
        try:
            self.backend.exclude(node, reason)
        except TrainguardError as exc:  # the job goes on without the node either way
            self._status(f"could not take {node} out of service: {exc}")

    def _wait(self, seconds: float, chain: _Chain) -> bool:
        """Back off for ``seconds`` (still following node evidence); False when cancelled."""
        deadline = self.clock() + seconds
        node_events: dict[str, list[FailureEvent]] = {}
        while True:
            if self._cancelled:
                return False
            now = self.clock()
            self._poll_nodes((), chain, node_events, now)
            if now >= deadline:
                return True
            self.sleep(min(self.spec.poll_interval_s, deadline - now))

    def _finish(self, chain: _Chain, status: str, message: str) -> RunResult:
        assert self._recorder is not None
        result = RunResult(status, terminal_safe(message), tuple(chain.attempts),
                           tuple(chain.exclusions),
                           self.spec.run_dir, self._recorder.session_id)
        if self.store is not None and self._recorder.session_id is not None \
                and not self.backend.persistent_nodes:
            # Virtual nodes do not outlive the session: neither do its exclusions (they stay in
            # the history, released).
            self.store.release_session_exclusions(self._recorder.session_id,
                                                  released=self.clock())
        self._recorder.finish(result, self.clock())
        write_json_atomic(self.spec.run_dir / "state.json",
                          {"status": status, "supervisor_pid": os.getpid()})
        return result

    # -- plumbing ----------------------------------------------------------------------------

    def _plan(self, index: int, nodes: tuple[str, ...], port: int,
              resume_max_step: int | None) -> LaunchPlan:
        spec = self.spec
        nproc = spec.nproc_per_node
        world = len(nodes) * nproc
        addr = self.backend.master_addr(nodes)
        sdk_faults = [f for f in spec.faults if f.kind in SDK_KINDS and f.applies_to(index, None)]
        attempt_dir = spec.run_dir / "attempts" / str(index)
        launch_time = repr(self.clock())
        ranks = []
        for node_rank, node in enumerate(nodes):
            for local in range(nproc):
                rank = node_rank * nproc + local
                out_dir = attempt_dir / node
                env = {
                    "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(node_rank),
                    "NODE_RANK": str(node_rank), "ROLE_RANK": str(rank),
                    "ROLE_WORLD_SIZE": str(world), "GROUP_WORLD_SIZE": str(len(nodes)),
                    "ROLE_NAME": "default", "MASTER_ADDR": addr, "MASTER_PORT": str(port),
                    "TORCHELASTIC_RESTART_COUNT": str(index),
                    "TORCHELASTIC_MAX_RESTARTS": str(spec.policy.max_retries),
                    "TORCHELASTIC_RUN_ID": self.run_id,
                    "TRAINGUARD_NODE": node, "TRAINGUARD_RUN_DIR": str(spec.run_dir),
                    "TRAINGUARD_ATTEMPT": str(index),
                    "TRAINGUARD_EVENTS": str(out_dir / f"rank{rank}.events.jsonl"),
                    "TRAINGUARD_LAUNCH_TIME": launch_time,
                }
                if "PYTHONUNBUFFERED" not in os.environ:
                    env["PYTHONUNBUFFERED"] = "1"  # output is progress: don't sit in a buffer
                if "OMP_NUM_THREADS" not in os.environ and nproc > 1:
                    env["OMP_NUM_THREADS"] = "1"  # as torchrun does
                if sdk_faults:
                    env["TRAINGUARD_INJECT"] = join_faults(sdk_faults)
                if resume_max_step is not None:
                    env["TRAINGUARD_RESUME_MAX_STEP"] = str(resume_max_step)
                ranks.append(RankLaunch(rank, local, node, node_rank, env,
                                        out_dir / f"rank{rank}.log"))
        return LaunchPlan(index, spec.command, nodes, tuple(ranks), Path.cwd())

    def _header(self) -> dict[str, Any]:
        spec = self.spec
        return {"name": spec.name, "backend": self.backend.name, "run_id": self.run_id,
                "command": list(spec.command), "nodes": list(spec.nodes),
                "spares": list(spec.spares), "nproc_per_node": spec.nproc_per_node,
                "run_dir": str(spec.run_dir)}

    def _config(self) -> dict[str, Any]:
        spec, pol = self.spec, self.spec.policy
        return {**self._header(), "hang_timeout_s": spec.hang_timeout_s,
                "min_nodes": spec.min_nodes, "max_retries": pol.max_retries,
                "faults": [str(f) for f in spec.faults]}

    def _write_state(self, index: int, plan: LaunchPlan, handle: AttemptHandle) -> None:
        pids = handle.pids()
        control = getattr(self.backend, "control", None)
        extra: dict[str, Any] = {}
        if callable(control):
            # ``trainguard inject`` reaches remote ranks through the controller; the secret is
            # in a file only this user can read.
            path = self.spec.run_dir / "control.json"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(control(), f)
            extra["control"] = path.name
        write_json_atomic(self.spec.run_dir / "state.json", {
            **extra, "status": "running", "supervisor_pid": os.getpid(), "attempt": index,
            "nodes": list(plan.nodes),
            "kernel_logs": {n: str(self.spec.kernel_log_path(n))
                            for n in (*self.spec.nodes, *self.spec.spares)},
            "ranks": [{"rank": rl.rank, "node": rl.node, "pid": pids.get(rl.rank),
                       "output": str(rl.output)} for rl in plan.ranks],
        })


def _remote_events(handle: AttemptHandle) -> list[FailureEvent]:
    """Node evidence an agent-run attempt collected on its hosts (none for local ranks)."""
    take = getattr(handle, "node_events", None)
    return list(take()) if callable(take) else []


def _settling(handle: AttemptHandle) -> bool:
    settling = getattr(handle, "settling", None)
    return bool(settling()) if callable(settling) else False


def run_job(spec: JobSpec, backend: Backend, **kwargs: Any) -> RunResult:
    """Supervise ``spec`` on ``backend`` to the end (see :class:`Supervisor`)."""
    return Supervisor(spec, backend, **kwargs).run()


__all__ = ["Supervisor", "run_job"]
