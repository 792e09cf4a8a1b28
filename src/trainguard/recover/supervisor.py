"""The supervisor: launch, watch, classify, decide, relaunch; every step recorded.

The chain is driven by the lifecycle table (:mod:`trainguard.recover.lifecycle`), one handler
per state (:meth:`Supervisor.run`):

1. PREPARING: check the command, node list, capacity and run directory before launching
   anything (:mod:`~trainguard.recover.preflight`); start following kernel logs and alerts;
2. LAUNCHING: every rank gets the torch.distributed environment plus trainguard's
   (:mod:`~trainguard.recover.launchplan`); the backend starts them;
3. RUNNING: rank exits, SDK heartbeats (else output) for hangs, non-finite losses, fatal node
   evidence, fault drills (:mod:`~trainguard.recover.attempt`, :mod:`~trainguard.recover.drills`);
4. STOPPING: what is left is stopped (SIGTERM, SIGKILL after the grace period);
5. DECIDING: the failing ranks' output tails read and the attempt analyzed; the policy
   (:func:`~trainguard.recover.policy.decide`) retries, excludes and retries on spares, rolls
   back, or stops; the attempt, its evidence and exclusions recorded;
6. BACKOFF: wait (still following node evidence), then LAUNCHING again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from trainguard.errors import LaunchError, SnapshotError
from trainguard.evidence.events import FailureEvent
from trainguard.evidence.rules import RuleSet, load_rules
from trainguard.evidence.scanner import scan_bytes
from trainguard.recover.attempt import Attempt, AttemptContext, Outcome
from trainguard.recover.attemptevents import failed_launch, tail_events
from trainguard.recover.backend import Backend, HasControl
from trainguard.recover.cancel import CancelToken
from trainguard.recover.chain import Chain, NodeEvidence, Scheduler, advance, decide_next
from trainguard.recover.drills import Drills
from trainguard.recover.failure import Failure, Trigger, teardown_note
from trainguard.recover.hostchecks import (
    HostCheckConfig,
    HostChecks,
    TooFewGoodHosts,
    require_agents,
)
from trainguard.recover.lifecycle import Lifecycle, State
from trainguard.recover.narrate import attempts_text, decision_line, failed_line, stop_message
from trainguard.recover.policy import Decision, Verdict
from trainguard.recover.preflight import check_job, usable_nodes
from trainguard.recover.records import (
    AttemptResult,
    Exclusion,
    Recorder,
    RunResult,
    run_config,
    run_header,
    write_final_state,
    write_running_state,
)
from trainguard.recover.registry import capabilities_of
from trainguard.recover.restore import (
    FIRST,
    RestoreChoice,
    SnapshotCoordinator,
    best_step,
    plan_attempt,
    remove_local_snapshots,
    start_coordinator,
)
from trainguard.recover.spec import JobSpec
from trainguard.recover.watch import NodeWatch, RankWatch
from trainguard.store import Store
from trainguard.textsafe import terminal_safe

log = logging.getLogger(__name__)


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
                 overwrite: bool = False, echo_all: bool = False,
                 host_checks: HostCheckConfig | None = None) -> None:
        """``on_output(rank, node, line)``: the ranks' output to echo; tracebacks that follow a
        failure are folded to one line per rank unless ``echo_all``
        (:mod:`trainguard.recover.echo`)."""
        self.spec = spec
        self.backend = backend
        self.capabilities = capabilities_of(backend)
        self.store = store
        self.rules = rules if rules is not None else load_rules()
        self.clock = clock
        self.sleep = sleep
        status = on_status or (lambda msg: log.info("%s", msg))
        # Status lines quote rank output (exception text, evidence): never a raw escape sequence.
        self._status: Callable[[str], None] = lambda msg: status(terminal_safe(msg))
        self._output = on_output
        self._fold_hold_s = None if echo_all else 5.0
        self._check_config = host_checks or HostCheckConfig()
        self._checks: HostChecks | None = None
        self._overwrite = overwrite
        self._token = CancelToken()
        self._scan = scan_bytes
        self.lifecycle = Lifecycle()
        self.run_id = uuid.uuid4().hex[:12]
        self.drills = Drills(spec, self.capabilities, clock=clock, status=self._status)
        self._scheduler = Scheduler(backend, self._status)
        self._handlers: Mapping[State, Callable[[], None]] = {
            State.PREPARING: self._on_preparing, State.LAUNCHING: self._on_launching,
            State.RUNNING: self._on_running, State.STOPPING: self._on_stopping,
            State.DECIDING: self._on_deciding, State.BACKOFF: self._on_backoff}
        self._ctx: AttemptContext | None = None
        self._chain: Chain | None = None
        self._attempt: Attempt | None = None
        self._decision: Decision | None = None
        self._result: RunResult | None = None
        self._snap: SnapshotCoordinator | None = None
        self._choice: RestoreChoice = FIRST

    # -- public ------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask the run to stop (safe from a signal handler): ranks are stopped, the attempt is
        recorded as cancelled; a log classification running now is abandoned at once."""
        self._token.cancel()

    def run(self) -> RunResult:
        """Drive the chain through the lifecycle table until a final state; the run's memory
        snapshots are removed at the end, whatever the end."""
        try:
            while not self.lifecycle.done:
                self._handlers[self.lifecycle.state]()
        finally:
            if self._snap is not None:
                self._snap.close()
        assert self._result is not None
        return self._result

    def sweep_snapshots(self) -> None:
        """Remove what is left of the run's snapshot directories on this machine, once the
        backend is closed (its warm standbys' lease keeper may have raced the removal at the
        end of :meth:`run`). Only where the nodes' memory is this machine's."""
        if self.capabilities.has_local_pids:
            remove_local_snapshots(self.spec, self.run_id)

    @property
    def handlers(self) -> Mapping[State, Callable[[], None]]:
        """The handler of each non-final lifecycle state."""
        return self._handlers

    def prepare(self) -> None:
        """Every check that can fail before a process starts (one clear error each)."""
        check_job(self.spec, self.backend, self.capabilities, overwrite=self._overwrite)
        require_agents(self._check_config, self.backend)

    # -- one handler per state ---------------------------------------------------------------

    def _on_preparing(self) -> None:
        spec = self.spec
        self.prepare()
        nodes, spares, skipped = usable_nodes(spec, self.backend, self.store)
        started = self.clock()
        header = run_header(spec, self.backend.name, self.run_id)
        recorder = Recorder(spec.run_dir, header, self.store)
        recorder.start(spec.name, self.backend.name, started, run_config(spec, header))
        all_nodes = (*spec.nodes, *spec.spares)
        # With agents, each host's agent reads its own kernel log; here only the alerts.
        remote_klogs = self.capabilities.reads_kernel_logs
        node_watch = NodeWatch(
            {} if remote_klogs else {n: spec.kernel_log_path(n) for n in all_nodes},
            self.rules, nodes=all_nodes, alerts_file=spec.alerts_file, store=self.store,
            stop_on_predictive=spec.stop_on_predictive, since=started)
        evidence = NodeEvidence(node_watch, self._token, self._scheduler,
                                self._status, self.store, recorder.session_id)
        self._ctx = AttemptContext(spec, self.capabilities, self.rules, self._scan, self._token,
                                   recorder, evidence, self.clock, self.sleep, self._status,
                                   self._output, self._fold_hold_s)
        self._chain = Chain(nodes, spares)
        self._snap = start_coordinator(spec, self.backend, self.run_id, clock=self.clock,
                                       status=self._status)
        for message in skipped:
            self._status(message)
        self._checks = HostChecks(
            self._check_config, self.backend, spec.run_dir, self._scheduler, self._status,
            required=spec.min_nodes if spec.min_nodes is not None else len(spec.nodes),
            store=self.store, session_id=recorder.session_id, clock=self.clock)
        try:
            self._checks.preflight(self._chain)
        except TooFewGoodHosts as exc:
            self.lifecycle.to(State.FAILED)
            self._finish("failed", f"not launched: {exc}")
            return
        self._launch_unless_cancelled()

    def _on_launching(self) -> None:
        ctx, chain = self._context()
        spec, index, snap = self.spec, len(chain.attempts), self._snap
        try:
            self._choice, plan = plan_attempt(spec, self.backend, chain, snap, self.run_id,
                                              self.clock())
        except (LaunchError, SnapshotError) as exc:  # nothing announced, nothing started
            self.lifecycle.to(State.FAILED)
            self._finish("failed", f"launch failed: {exc}")
            return
        self._status(f"attempt {index}: launching {len(plan.ranks)} rank(s) on "
                     f"{', '.join(chain.nodes)}")
        t0 = self.clock()
        try:
            handle = self.backend.launch(plan)
        except (LaunchError, SnapshotError) as exc:  # announced: recorded as a failed attempt
            self.lifecycle.to(State.FAILED)
            store_id = ctx.recorder.start_attempt(index, chain.nodes, t0)
            self._launch_failed(failed_launch(index, chain.nodes, t0, self.clock(), str(exc),
                                              store_id))
            return
        launched = self.clock()
        self.lifecycle.to(State.RUNNING)
        store_id = ctx.recorder.start_attempt(index, chain.nodes, t0)
        control = self.backend.control() if isinstance(self.backend, HasControl) else None
        self._attempt = Attempt(ctx, chain, plan, handle,
                                self.drills.for_attempt(index, chain.nodes, launched),
                                started=t0, launched=launched, store_id=store_id,
                                on_pids=lambda pids: write_running_state(spec, plan, pids,
                                                                         control),
                                on_poll=None if snap is None else snap.poll)

    def _on_running(self) -> None:
        attempt = self._current()
        try:
            trigger = attempt.watch()
        except LaunchError as exc:  # e.g. no agent ever connected: nobody is to blame
            self._abandon(attempt, exc)
            return
        if trigger is Trigger.HANG:
            attempt.diagnose_hang()
        self.lifecycle.to(State.STOPPING)

    def _on_stopping(self) -> None:
        self._current().stop()
        self.lifecycle.to(State.DECIDING)

    def _on_deciding(self) -> None:
        ctx, chain = self._context()
        attempt = self._current()
        outcome = attempt.outcome()
        self._attempt = None
        proved = None if self._snap is None else self._snap.reached_before(len(chain.attempts))
        best = best_step(chain.attempts, proved)
        result = replace(outcome.result, restore=self._choice.record(outcome.result, best))
        outcome = replace(outcome, result=result)
        if self._snap is not None:
            self._snap.after(attempt.plan, result, self._choice)
        chain.attempts.append(result)
        if outcome.failure is None:
            self._succeed(outcome)
            return
        decision = self._record_decision(outcome, outcome.failure, chain)
        if decision.verdict is Verdict.STOP:
            final = "cancelled" if chain.attempts[-1].status == "cancelled" else "failed"
            self.lifecycle.to(State.CANCELLED if final == "cancelled" else State.FAILED)
            self._finish(final, stop_message(decision, outcome.failure))
            return
        advance(chain, decision)
        if self._snap is not None:
            self._snap.lose(decision.excluded)
        try:
            self._host_checks().after_failure(outcome.failure, chain)
        except TooFewGoodHosts as exc:
            self.lifecycle.to(State.FAILED)
            self._finish("failed", f"stopped: {exc}")
            return
        self.lifecycle.to(State.BACKOFF)
        ctx.recorder.write("running", decision.reason, chain.attempts, chain.exclusions)
        if decision.backoff_s > 0:
            self._status(f"waiting {decision.backoff_s:.1f} s before attempt "
                         f"{len(chain.attempts)}")
        self._decision = decision

    def _on_backoff(self) -> None:
        backoff_s = self._decision.backoff_s if self._decision is not None else 0.0
        if not self._wait(backoff_s):
            self.lifecycle.to(State.CANCELLED)
            self._finish("cancelled", "cancelled during backoff")
            return
        self._launch_unless_cancelled()

    # -- steps -------------------------------------------------------------------------------

    def _launch_unless_cancelled(self) -> None:
        if self._token.cancelled:
            self.lifecycle.to(State.CANCELLED)
            self._finish("cancelled", "cancelled before launch")
        else:
            self.lifecycle.to(State.LAUNCHING)

    def _abandon(self, attempt: Attempt, exc: LaunchError) -> None:
        """The launch turned out broken while running: stop what runs, end the chain failed."""
        self.lifecycle.to(State.STOPPING)
        attempt.abandon()
        self._attempt = None
        self.lifecycle.to(State.DECIDING)
        self.lifecycle.to(State.FAILED)
        self._launch_failed(attempt.launch_failed(str(exc)))

    def _launch_failed(self, result: AttemptResult) -> None:
        """End the chain with ``result``, an attempt whose launch failed: it counts as an
        attempt everywhere (the terminal announced it, ``summary.json`` and the store list
        it); its error is said once, in the final line."""
        ctx, chain = self._context()
        chain.attempts.append(result)
        ctx.recorder.finish_attempt(result, (), ())
        assert result.failure is not None
        self._finish("failed", result.failure.summary)

    def _succeed(self, outcome: Outcome) -> None:
        ctx, chain = self._context()
        self.lifecycle.to(State.SUCCEEDED)
        ctx.recorder.finish_attempt(outcome.result, outcome.events, ())
        n = len(chain.attempts)
        message = f"job succeeded after {attempts_text(n)}"
        if outcome.teardown:
            message = f"{teardown_note(outcome.teardown)}; {message}"
        self._finish("succeeded", message)

    def _record_decision(self, outcome: Outcome, failure: Failure, chain: Chain) -> Decision:
        """The policy's decision, recorded with the exclusions it makes."""
        ctx, _ = self._context()
        decision = decide_next(self.spec, failure, chain)
        result = replace(outcome.result, decision=decision)
        chain.attempts[-1] = result
        new_exclusions = [Exclusion(node, failure.summary, result.index, failure.evidence)
                          for node in decision.excluded]
        chain.exclusions.extend(new_exclusions)
        ctx.recorder.finish_attempt(result, outcome.events, new_exclusions)
        for ex in new_exclusions:
            self._scheduler.exclude(ex.node, f"trainguard: {failure.summary}")
        self._status(failed_line(result.index, failure))
        self._status(decision_line(decision))
        return decision

    def _wait(self, seconds: float) -> bool:
        """Back off for ``seconds`` (still following node evidence); False when cancelled."""
        ctx, chain = self._context()
        deadline = self.clock() + seconds
        node_events: dict[str, list[FailureEvent]] = {}
        while True:
            if self._token.cancelled:
                return False
            now = self.clock()
            ctx.evidence.poll((), chain, node_events, now)
            if now >= deadline:
                return True
            self.sleep(min(self.spec.poll_interval_s, deadline - now))

    def _finish(self, status: str, message: str) -> None:
        ctx, chain = self._context()
        session_id = ctx.recorder.session_id
        result = RunResult(status, terminal_safe(message), tuple(chain.attempts),
                           tuple(chain.exclusions), self.spec.run_dir, session_id)
        if self.store is not None and session_id is not None \
                and not self.backend.persistent_nodes:
            # Virtual nodes do not outlive the session: neither do its exclusions (they stay in
            # the history, released).
            self.store.release_session_exclusions(session_id, released=self.clock())
        try:
            ctx.recorder.finish(result, self.clock())
        finally:  # state.json never stays "running" after the chain ended
            write_final_state(self.spec.run_dir, status)
        self._result = result

    def _context(self) -> tuple[AttemptContext, Chain]:
        assert self._ctx is not None and self._chain is not None, "used before PREPARING"
        return self._ctx, self._chain

    def _host_checks(self) -> HostChecks:
        assert self._checks is not None, "used before PREPARING"
        return self._checks

    def _current(self) -> Attempt:
        assert self._attempt is not None, "no attempt launched"
        return self._attempt

    def _tail_events(self, w: RankWatch) -> tuple[FailureEvent, ...]:
        """Classified evidence in the last lines of a failed rank's output."""
        return tail_events(w, self.rules, self._scan)


def run_job(spec: JobSpec, backend: Backend, **kwargs: Any) -> RunResult:
    """Supervise ``spec`` on ``backend`` to the end (see :class:`Supervisor`)."""
    return Supervisor(spec, backend, **kwargs).run()


__all__ = ["Supervisor", "run_job"]
