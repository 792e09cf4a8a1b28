"""One launched attempt: watched until something ends it, stopped, and its outcome analyzed.

The chain driver (:mod:`trainguard.recover.supervisor`) calls, one lifecycle state each:

1. :meth:`Attempt.watch` (RUNNING): rank exits, SDK events and output, node evidence, fault
   drills, each poll; returns the :class:`~trainguard.recover.failure.Trigger` that ends it:
   a non-finite loss, a cancel, a rank's failed exit (after ``peer_exit_grace_s`` when it may be
   a crash in teardown, and after a host's verdict while an agent is settling), every rank done,
   or a hang; a hang is localized while the ranks are still there;
2. :meth:`Attempt.stop` (STOPPING): what is left is stopped (SIGTERM, SIGKILL after the grace);
3. :meth:`Attempt.outcome` (DECIDING): the last output and evidence read, the failing ranks'
   output tails classified, :func:`~trainguard.recover.failure.analyze` run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from trainguard.errors import LaunchError
from trainguard.evidence.events import FailureEvent
from trainguard.evidence.rules import RuleSet
from trainguard.recover.attemptevents import (
    Scan,
    checkpoint_events,
    failed_launch,
    remote_events,
    tail_events,
)
from trainguard.recover.backend import (
    AttemptHandle,
    Capabilities,
    LaunchPlan,
    Settles,
)
from trainguard.recover.cancel import CancelToken
from trainguard.recover.chain import Chain, NodeEvidence
from trainguard.recover.diagnosis import HangDiagnoser, StragglerWatch, stuck_at_exit
from trainguard.recover.drills import AttemptDrills
from trainguard.recover.echo import RankEcho, after_what
from trainguard.recover.failure import (
    AttemptFacts,
    Failure,
    RankOutcome,
    TeardownCrash,
    Trigger,
    analyze,
    may_be_teardown,
    teardown_crash,
    teardown_note,
)
from trainguard.recover.hangcause import own_code
from trainguard.recover.hangwatch import HangWatch
from trainguard.recover.injected import attempt_injections
from trainguard.recover.records import AttemptResult, Recorder, begun_of, host_clocks
from trainguard.recover.spec import JobSpec
from trainguard.recover.watch import RankWatch
from trainguard.taxonomy import Action, Category, Severity
from trainguard.textsafe import terminal_safe
from trainguard.trace.hang import HangDiagnosis


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """What every attempt of a chain shares."""

    spec: JobSpec
    capabilities: Capabilities
    rules: RuleSet
    scan: Scan
    token: CancelToken
    recorder: Recorder
    evidence: NodeEvidence
    clock: Callable[[], float]
    sleep: Callable[[float], None]
    status: Callable[[str], None]
    output: Callable[[int, str, str], None] | None = None
    fold_hold_s: float | None = 5.0
    """Echo: how long a traceback of a healthy attempt is held before it is shown (None: echo
    every line as it comes, consequential tracebacks included); see
    :mod:`trainguard.recover.echo`."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """An attempt as it ended, before the policy's decision."""

    result: AttemptResult
    failure: Failure | None
    events: list[FailureEvent]
    teardown: tuple[TeardownCrash, ...] = ()


@dataclass(slots=True)
class _Progress:
    """What the poll loop has seen so far."""

    codes: dict[int, int | None]
    exited_at: dict[int, float] = field(default_factory=dict)
    node_events: dict[str, list[FailureEvent]] = field(default_factory=dict)
    fired: list[str] = field(default_factory=list)
    seen_ckpts: dict[int, int] = field(default_factory=dict)
    trigger: Trigger | None = None
    hang_for: float | None = None
    failed_at: float = 0.0
    stopped: dict[int, bool] = field(default_factory=dict)
    ended: float = 0.0


class Attempt:
    """One launched attempt (see the module docstring)."""

    def __init__(self, ctx: AttemptContext, chain: Chain, plan: LaunchPlan,
                 handle: AttemptHandle, drills: AttemptDrills, *, started: float,
                 launched: float, store_id: int | None,
                 on_pids: Callable[[Mapping[int, int]], None] | None = None,
                 on_poll: Callable[[], None] | None = None) -> None:
        """``on_pids``: told the ranks' pids whenever more become known (agents report them
        once they started the ranks; ``state.json`` lists them). ``on_poll``: called once per
        poll (the snapshot coordinator pulls new copies)."""
        self.ctx = ctx
        self.chain = chain
        self.plan = plan
        self.handle = handle
        self.index = plan.attempt
        self._drills = drills
        self.started, self.launched, self.store_id = started, launched, store_id
        self.watches = {rl.rank: RankWatch(rl.rank, rl.node, rl.output,
                                           Path(rl.env["TRAINGUARD_EVENTS"]), launched)
                        for rl in plan.ranks}
        self._p = _Progress(codes={r: None for r in self.watches},
                            seen_ckpts={r: 0 for r in self.watches})
        self._stragglers = StragglerWatch(self.index, ctx.spec.run_dir, ctx.status, launched)
        self._hang: HangDiagnosis | None = None
        self._on_pids = on_pids
        self._on_poll = on_poll
        self._echo = None if ctx.output is None or ctx.fold_hold_s is None \
            else RankEcho(ctx.output, hold_s=ctx.fold_hold_s)
        self._pids_known = -1
        self._liveness = HangWatch(ctx.spec, ctx.capabilities, handle, launched)

    # -- RUNNING ------------------------------------------------------------------------------

    def watch(self) -> Trigger:
        """Poll until something ends the attempt; a hang is localized before returning."""
        p = self._p
        while p.trigger is None:
            p.trigger = self._poll_once(self.ctx.clock())
        p.failed_at = self.ctx.clock()
        p.stopped = {r: self.handle.is_stopped(r) or self._liveness.stopped(r)
                     for r in self.handle.running()}
        return p.trigger

    def _poll_once(self, now: float) -> Trigger | None:
        p, handle, index = self._p, self.handle, self.index
        for ex in handle.poll():
            p.codes[ex.rank], p.exited_at[ex.rank] = ex.returncode, now
            w = self.watches[ex.rank]
            if ex.returncode != 0:
                self.ctx.status(f"attempt {index}: rank {ex.rank} on {w.node} "
                                f"{RankOutcome(ex.rank, w.node, ex.returncode).exit_text()}")
        pids = handle.pids()
        if len(pids) != self._pids_known and self._on_pids is not None:
            self._pids_known = len(pids)
            self._on_pids(pids)
        self._poll_ranks(p.seen_ckpts, now)
        if self._on_poll is not None:
            self._on_poll()
        if self._echo is not None:
            trouble = p.trigger is not None or any(c not in (None, 0) for c in p.codes.values())
            self._echo.release(now, trouble=trouble)
        trigger = self.ctx.evidence.poll(self.chain.nodes, self.chain, p.node_events, now,
                                         remote_events(handle))
        p.fired += self._drills(now, {r: w.last_step for r, w in self.watches.items()}, handle)
        return trigger if trigger is not None else self._judge(now)

    def _judge(self, now: float) -> Trigger | None:
        """The trigger the ranks' state calls for now, or None (after one poll interval)."""
        p, spec, watches = self._p, self.ctx.spec, self.watches
        failed = {r: c for r, c in p.codes.items() if c not in (None, 0)}
        if any(w.nonfinite is not None for w in watches.values()):
            return Trigger.NONFINITE
        if self.ctx.token.cancelled:
            return Trigger.CANCEL
        if failed:
            # A crash that may be in teardown (an abort, a rank that reported finish()): the
            # others may be finishing or failing in turn; let them exit on their own for a
            # moment, their exits say which. Otherwise there is nothing to wait for.
            waiting = all(may_be_teardown(c, watches[r].finished) for r, c in failed.items())
            deadline = min(p.exited_at[r] for r in failed) + spec.peer_exit_grace_s
            if waiting and now < deadline and any(c is None for c in p.codes.values()):
                return self._wait()
            if isinstance(self.handle, Settles) and self.handle.settling():
                # A host's agent just went away: these exits may be its consequence (the peers
                # of a dead host fail first). Wait for its verdict (lost or back).
                return self._wait()
            return Trigger.EXIT
        if all(c == 0 or stuck_at_exit(spec, watches[r], c, now) for r, c in p.codes.items()):
            stuck = sorted(r for r, c in p.codes.items() if c is None)
            if stuck:
                self.ctx.status(f"attempt {self.index}: rank(s) {', '.join(map(str, stuck))} "
                                f"finished training but did not exit within "
                                f"{spec.exit_grace_s:g} s: stopping them")
            return Trigger.SUCCESS
        self._stragglers.check(watches, now)
        verdict = self._liveness.check(now, watches, p.codes)
        if verdict is not None:
            p.hang_for = verdict.silent_s
            self.ctx.status(f"attempt {self.index}: no progress for {p.hang_for:.0f} s: hang: "
                            f"{verdict.reason}")
            return Trigger.HANG
        return self._wait()

    def _wait(self) -> Trigger | None:
        """No trigger yet: one poll interval before the next look."""
        self.ctx.sleep(self.ctx.spec.poll_interval_s)
        return None

    def _poll_ranks(self, seen: dict[int, int], now: float) -> None:
        output = self.ctx.output
        for rank, w in self.watches.items():
            for line in w.poll(now):
                if self._echo is not None:
                    self._echo.feed(rank, w.node, terminal_safe(line), now)
                elif output is not None:
                    output(rank, w.node, terminal_safe(line))
            for rec in w.checkpoints[seen.get(rank, 0):]:
                step = rec.get("step")
                if isinstance(step, int) and rec.get("ok", True):
                    self.chain.checkpoint_steps.add(step)
                self.ctx.recorder.add_checkpoint(self.store_id, rec)
            seen[rank] = len(w.checkpoints)

    def diagnose_hang(self) -> None:
        """Where the ranks stand (``attempts/<i>/hang.json``), before they are stopped."""
        ctx, p = self.ctx, self._p
        local = ctx.capabilities.has_local_pids and bool(self.handle.pids())
        diagnoser = HangDiagnoser(ctx.spec.run_dir, local=local, clock=ctx.clock,
                                  sleep=ctx.sleep, status=ctx.status)
        self._hang = diagnoser.diagnose(self.plan, self.handle, p.stopped, p.codes,
                                        p.node_events)

    # -- STOPPING -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the ranks still running (SIGTERM, SIGKILL after the grace); release the
        attempt."""
        self._stop_ranks()
        self.handle.close()
        self._p.ended = self.ctx.clock()

    def abandon(self) -> None:
        """:meth:`stop` for a launch found broken: a handle that fails again while stopping
        (its agents never came) is still closed; what it could not stop is reported."""
        for step in (self._stop_ranks, self.handle.close):
            try:
                step()
            except LaunchError as exc:
                self.ctx.status(f"attempt {self.index}: while stopping: {exc}")
        self._p.ended = self.ctx.clock()

    def launch_failed(self, why: str) -> AttemptResult:
        """The record of this attempt once its launch turned out broken (after
        :meth:`abandon`): failed, by :func:`~trainguard.recover.failure.launch_failure`."""
        p = self._p
        return failed_launch(self.index, self.chain.nodes, self.started, p.ended, why,
                             self.store_id, exit_codes=p.codes,
                             launch_s=self.launched - self.started,
                             host_clocks=host_clocks(self.handle))

    def _stop_ranks(self) -> None:
        if self.handle.running():
            for ex in self.handle.stop(self.ctx.spec.term_timeout_s):
                self._p.codes[ex.rank] = ex.returncode

    # -- DECIDING -----------------------------------------------------------------------------

    def outcome(self) -> Outcome:
        """The last output and evidence read, the failure (if any) analyzed and recorded."""
        ctx, p, watches, chain = self.ctx, self._p, self.watches, self.chain
        ended, trigger = p.ended, p.trigger
        assert trigger is not None, "outcome() before watch()"
        self._poll_ranks({r: len(w.checkpoints) for r, w in watches.items()}, ended)
        ctx.evidence.poll(chain.nodes, chain, p.node_events, ended, remote_events(self.handle),
                          ended=True)
        for drill in self._drills.unfired():
            ctx.status(f"attempt {self.index}: --inject {drill} did not fire: the attempt "
                       "ended first")
        no_events: tuple[FailureEvent, ...] = ()
        rank_events = {r: ctx.token.classify(partial(tail_events, w, ctx.rules, ctx.scan),
                                             no_events)
                       for r, w in watches.items()
                       if p.codes[r] not in (None, 0) and r in p.exited_at}
        facts = self._facts(trigger, rank_events)
        failure = analyze(facts)
        self._settle_echo(failure)
        teardown = teardown_crash(facts) if failure is None else ()
        result = self._result(trigger, failure, teardown)
        first = watches[min(watches)]
        events = [ev for evs in p.node_events.values() for ev in evs]
        events += [ev for evs in rank_events.values() for ev in evs]
        events += checkpoint_events(result.skipped_checkpoints, first)
        events += [FailureEvent(
            category=Category.UNKNOWN, action=Action.NONE, severity=Severity.INFO,
            signature="teardown_crash", summary=c.describe(), host=c.node, rank=c.rank,
            fields=(("exit", c.exit_text), ("why_done", c.why_done))) for c in teardown]
        if teardown:
            ctx.status(f"attempt {self.index}: {teardown_note(teardown)}")
        elif failure is None:
            ctx.status(f"attempt {self.index}: succeeded")
        return Outcome(result, failure, events, teardown)

    def _settle_echo(self, failure: Failure | None) -> None:
        """The held tracebacks: the culprit's shown in full, the consequences counted."""
        if self._echo is None:
            return
        here = Path.cwd()
        logs = {r: str(w.output.relative_to(here) if w.output.is_relative_to(here)
                       else w.output) for r, w in self.watches.items()}
        if failure is None:
            self._echo.settle(culprits=None, logs=logs, why="")
        else:
            culprits = () if failure.culprit_rank is None else (failure.culprit_rank,)
            self._echo.settle(culprits=culprits, logs=logs, why=after_what(failure))

    def _facts(self, trigger: Trigger,
               rank_events: Mapping[int, tuple[FailureEvent, ...]]) -> AttemptFacts:
        p = self._p
        outcomes = tuple(
            # A rank without the SDK has no progress of its own (the job's output is shared):
            # nothing about it to single it out by.
            RankOutcome(r, w.node, p.codes[r], p.exited_at.get(r), p.stopped.get(r, False),
                        w.last_step, w.last_progress if w.sdk else None, w.finished)
            for r, w in sorted(self.watches.items()))
        nonfinite = next(((r, w.nonfinite[0], w.nonfinite[1]) for r, w in sorted(
            self.watches.items()) if w.nonfinite is not None), None)
        backend = next((w.backend for _, w in sorted(self.watches.items()) if w.backend), None)
        return AttemptFacts(trigger, outcomes, rank_events,
                            {n: tuple(evs) for n, evs in p.node_events.items()}, nonfinite,
                            p.hang_for, self._hang, attempt_injections(
                                self._drills.injected, self.ctx.spec.run_dir, self.index,
                                {r: (w.node, w.faults) for r, w in self.watches.items()}),
                            backend, own_code(self._hang, self.plan.command, self.plan.workdir))

    def _result(self, trigger: Trigger, failure: Failure | None,
                teardown: tuple[TeardownCrash, ...]) -> AttemptResult:
        p, watches = self._p, self.watches
        status = "succeeded" if failure is None else (
            "cancelled" if trigger is Trigger.CANCEL else "failed")
        first = watches[min(watches)]
        phases: dict[str, float] = {"launch": self.launched - self.started}
        for w in watches.values():
            for name, dur in w.phases.items():
                phases[name] = max(phases.get(name, 0.0), dur)
        resume = first.resume or next((w.resume for w in watches.values() if w.resume), None)
        resumed = resume.get("step") if resume else None
        skipped = tuple(s for s in (resume.get("skipped") or []) if isinstance(s, dict)) \
            if resume else ()
        faults = tuple(p.fired) + tuple(f for w in watches.values() for f in w.faults)
        return AttemptResult(
            index=self.index, nodes=self.chain.nodes, started=self.started, ended=p.ended,
            status=status, exit_codes=dict(p.codes), failure=failure,
            resumed_from_step=resumed if isinstance(resumed, int) else None,
            skipped_checkpoints=skipped, startup_phases=phases, last_step=first.last_step,
            last_loss=first.last_loss, faults=faults, store_id=self.store_id,
            failed_at=None if failure is None else p.failed_at, hang_for_s=p.hang_for,
            teardown_crashes=teardown, host_clocks=host_clocks(self.handle),
            resume_source=str(resume["source"]) if resume and resume.get("source") else None,
            begun=begun_of([w.begun for w in watches.values()]))


__all__ = ["Attempt", "AttemptContext", "Outcome"]
