"""What `trainguard watch` may do about an alert: exclude the node, drain it, tell the supervisor.

Opt-in and rate-limited, because a detector bug must not be able to drain a cluster:

- :class:`ActionPolicy`: off by default, dry-run by default once on; acts only on alerts that are
  severe and confident enough; at most ``max_nodes_per_hour`` nodes per sliding hour and never
  more than ``max_pool_fraction`` of the pool excluded at once (operator exclusions included).
- :class:`RateLimiter`: the pure state machine behind those limits (injected clock).
- :class:`ActionExecutor`: decides, then (unless dry-run) records the exclusion in the store,
  drains the node through an injected ``drain(node, reason)`` (:func:`slurm_drain` on Slurm) and
  appends an alert record to the JSON-lines file a running supervisor's ``NodeWatch`` follows.

Every alert gets an :class:`ActionResult` (``done``, ``dry_run``, ``rate_limited``,
``disabled``, ``skipped`` or ``failed``) that is logged and returned; a failing step is reported,
never raised.

    >>> limiter = RateLimiter(ActionPolicy(enabled=True), pool_size=63, clock=lambda: 0.0)
    >>> [limiter.acquire(n).allowed for n in ("a", "b", "c")]
    [True, True, False]
"""

from __future__ import annotations

import enum
import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainguard.errors import ConfigError
from trainguard.store import Store

__all__ = [
    "ActionExecutor",
    "ActionPolicy",
    "ActionResult",
    "Decision",
    "DrainFn",
    "NodeAlert",
    "Outcome",
    "RateLimiter",
    "StepResult",
    "alert_line",
    "slurm_drain",
]

log = logging.getLogger(__name__)

WINDOW_S = 3600.0
"""The sliding window of ``max_nodes_per_hour``."""
SOURCE = "trainguard watch"
"""``source`` of the exclusions and alert records the executor writes."""

Severity = Literal["hard", "predictive"]
DrainFn = Callable[[str, str], None]
"""``drain(node, reason)``: take the node out of the scheduler; raises on failure."""
_SEVERITY_RANK = {"predictive": 0, "hard": 1}


@dataclass(frozen=True, slots=True)
class ActionPolicy:
    """When `trainguard watch` acts on an alert, and how much it may do.

        >>> ActionPolicy().enabled, ActionPolicy().dry_run
        (False, True)
    """

    enabled: bool = False
    """Act on alerts at all (off: every alert is ``disabled``)."""
    dry_run: bool = True
    """Decide and report (limits included) but change nothing."""
    min_severity: Severity = "hard"
    """Least severe alert acted on: ``hard`` (hardware evidence) or ``predictive``."""
    min_confidence: float = 0.8
    """Least confidence (0..1) of an alert acted on."""
    max_nodes_per_hour: int = 2
    """At most this many nodes acted on in any sliding hour (K)."""
    max_pool_fraction: float = 0.05
    """Never more than floor(fraction * pool) nodes excluded at once, operator exclusions
    included (X); a pool too small for one node means no automatic exclusion at all."""
    pool_size: int | None = None
    """Nodes in the pool; None: the number of nodes the executor is told about."""
    cooldown_s: float = 3600.0
    """A node acted on is not acted on again for this long (e.g. after an operator released it)."""

    def __post_init__(self) -> None:
        if self.min_severity not in _SEVERITY_RANK:
            raise ConfigError("actions.min_severity must be 'hard' or 'predictive'")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ConfigError("actions.min_confidence must be within [0, 1]")
        if self.max_nodes_per_hour < 0:
            raise ConfigError("actions.max_nodes_per_hour must be >= 0")
        if not 0.0 <= self.max_pool_fraction <= 1.0:
            raise ConfigError("actions.max_pool_fraction must be within [0, 1]")
        if self.pool_size is not None and self.pool_size < 1:
            raise ConfigError("actions.pool_size must be >= 1")
        if not math.isfinite(self.cooldown_s) or self.cooldown_s < 0:
            raise ConfigError("actions.cooldown_s must be >= 0")


@dataclass(frozen=True, slots=True)
class Decision:
    """The limiter's answer; ``noop`` when the node needs nothing (already excluded)."""

    allowed: bool
    reason: str
    noop: bool = False


class RateLimiter:
    """Sliding-hour and pool-fraction limits over node actions.

    State: the nodes currently excluded (:meth:`set_excluded` from the store, plus the nodes this
    limiter granted) and the times of the grants of the last hour. :meth:`acquire` checks, in
    order: already excluded (a no-op, not a new action), the node's cooldown, the hourly budget,
    the pool fraction; a grant is recorded at once, so a burst cannot race past the limits.
    """

    def __init__(self, policy: ActionPolicy, *, pool_size: int,
                 excluded: Iterable[str] = (), clock: Callable[[], float] = time.time) -> None:
        if pool_size < 1:
            raise ConfigError("actions.pool_size must be >= 1")
        self.policy = policy
        self.pool_size = pool_size
        self.max_excluded = math.floor(policy.max_pool_fraction * pool_size + 1e-9)
        self._clock = clock
        self._excluded: set[str] = set(excluded)
        self._granted: deque[float] = deque()
        self._last_grant: dict[str, float] = {}

    @property
    def excluded(self) -> frozenset[str]:
        return frozenset(self._excluded)

    def set_excluded(self, nodes: Iterable[str]) -> None:
        """Replace the set of excluded nodes (the store's view: releases free capacity)."""
        self._excluded = set(nodes)

    def granted_last_hour(self) -> int:
        self._expire(self._clock())
        return len(self._granted)

    def _expire(self, now: float) -> None:
        while self._granted and now - self._granted[0] >= WINDOW_S:
            self._granted.popleft()

    def check(self, node: str) -> Decision:
        """Whether ``node`` may be acted on now; records nothing."""
        now = self._clock()
        self._expire(now)
        p = self.policy
        if node in self._excluded:
            return Decision(False, f"{node} is already excluded", noop=True)
        last = self._last_grant.get(node)
        if last is not None and now - last < p.cooldown_s:
            return Decision(False, f"{node} was acted on {now - last:.0f} s ago "
                                   f"(cooldown {p.cooldown_s:g} s)")
        if len(self._granted) >= p.max_nodes_per_hour:
            return Decision(False, f"{len(self._granted)} node(s) acted on in the last hour "
                                   f"(max_nodes_per_hour={p.max_nodes_per_hour})")
        if len(self._excluded) + 1 > self.max_excluded:
            return Decision(False, f"{len(self._excluded)} of {self.pool_size} nodes already "
                                   f"excluded (max_pool_fraction={p.max_pool_fraction:g} allows "
                                   f"{self.max_excluded})")
        return Decision(True, "within limits")

    def state(self) -> dict[str, Any]:
        """What must survive a restart (JSON-serialisable): the grants of the last hour and each
        node's last grant, so a restarted service cannot act on K more nodes at once."""
        self._expire(self._clock())
        horizon = self._clock() - max(WINDOW_S, self.policy.cooldown_s)
        return {"granted": list(self._granted),
                "last_grant": {n: t for n, t in self._last_grant.items() if t >= horizon}}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state`; malformed entries are dropped with a warning."""
        try:
            granted = sorted(float(t) for t in state.get("granted", []))
            last = {str(n): float(t) for n, t in dict(state.get("last_grant", {})).items()}
        except (TypeError, ValueError, AttributeError):
            log.warning("actions: the saved rate-limit state is malformed; starting afresh")
            return
        self._granted = deque(granted)
        self._last_grant = last
        self._expire(self._clock())

    def acquire(self, node: str) -> Decision:
        """:meth:`check`, and on success count the action and mark the node excluded."""
        decision = self.check(node)
        if decision.allowed:
            now = self._clock()
            self._granted.append(now)
            self._last_grant[node] = now
            self._excluded.add(node)
        return decision


class Outcome(enum.Enum):
    DONE = "done"
    DRY_RUN = "dry_run"
    RATE_LIMITED = "rate_limited"
    DISABLED = "disabled"
    SKIPPED = "skipped"
    """Nothing to do: below the severity/confidence bar, or the node is already excluded."""
    FAILED = "failed"
    """At least one step failed (the others were still attempted)."""


@dataclass(frozen=True, slots=True)
class NodeAlert:
    """An alert the executor may act on."""

    node: str
    severity: Severity
    confidence: float
    summary: str
    time: float
    """Unix time the alert started."""
    evidence: tuple[str, ...] = ()
    """Lines kept with the exclusion (metric values, log lines)."""
    score: float = 0.0
    """The detector's peak score (the supervisor's alert record carries it)."""
    metrics: tuple[str, ...] = ()
    """Metrics behind the alert, most telling first."""

    def __post_init__(self) -> None:
        if not self.node:
            raise ConfigError("alert.node must not be empty")
        if self.severity not in _SEVERITY_RANK:
            raise ConfigError("alert.severity must be 'hard' or 'predictive'")


@dataclass(frozen=True, slots=True)
class StepResult:
    """One step of an action: ``exclude`` (store), ``drain`` (scheduler), ``notify`` (supervisor),
    the labels of ``trainguard_watch_actions_total``."""

    action: Literal["exclude", "drain", "notify"]
    outcome: Outcome
    detail: str = ""


@dataclass(frozen=True, slots=True)
class ActionResult:
    node: str
    outcome: Outcome
    reason: str
    steps: tuple[StepResult, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {"node": self.node, "outcome": self.outcome.value, "reason": self.reason,
                "steps": [{"action": s.action, "outcome": s.outcome.value, "detail": s.detail}
                          for s in self.steps]}


def alert_line(alert: NodeAlert) -> str:
    """The JSON line a supervisor's ``NodeWatch`` reads (the ``detect --alerts-out`` format)."""
    rec = {"node": alert.node, "start": alert.time, "end": alert.time, "kind": alert.severity,
           "peak_score": alert.score,
           "signals": [{"metric": m, "gpu": None, "deviation": 0.0} for m in alert.metrics],
           "source": SOURCE, "summary": alert.summary, "confidence": alert.confidence,
           "evidence": list(alert.evidence)}
    return json.dumps(rec, separators=(",", ":")) + "\n"


def slurm_drain(timeout_s: float = 60.0) -> DrainFn:
    """``scontrol update nodename=N state=drain reason=...`` through the Slurm adapter."""
    from trainguard.recover.slurm.commands import SlurmCommands

    commands = SlurmCommands(timeout_s=timeout_s)

    def drain(node: str, reason: str) -> None:
        commands.drain(node, reason)  # validates the name, sanitizes the reason

    return drain


class ActionExecutor:
    """Turns alerts into (limited) node actions.

        >>> ex = ActionExecutor(ActionPolicy(enabled=True), pool=[f"n{i}" for i in range(40)],
        ...                     clock=lambda: 0.0)
        >>> ex.handle(NodeAlert("n1", "hard", 0.9, "XID 79", 0.0)).outcome
        <Outcome.DRY_RUN: 'dry_run'>

    Steps, each attempted even when an earlier one failed (each protects the job on its own): the
    store exclusion (what the supervisor and ``trainguard nodes`` honour), ``drain`` when given,
    the alert line appended to ``alerts_file`` when given. A granted action counts against the
    limits even if its steps fail, so a broken drain cannot retry its way past them.
    In dry-run the limiter still runs on a simulated state, so the report shows what a live run
    would have done (the first K nodes ``dry_run``, the rest ``rate_limited``).
    """

    def __init__(self, policy: ActionPolicy, *, pool: Iterable[str] | None = None,
                 store: Store | None = None, drain: DrainFn | None = None,
                 alerts_file: Path | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self._store = store
        self._drain = drain
        self._alerts_file = alerts_file
        self._clock = clock
        known = set(pool or ())
        if store is not None:
            known |= {n.name for n in store.nodes()}
        pool_size = policy.pool_size if policy.pool_size is not None else len(known)
        if policy.enabled and pool_size < 1:
            raise ConfigError("actions.pool_size must be set when no nodes are known")
        self.limiter = RateLimiter(policy, pool_size=max(pool_size, 1), clock=clock)
        self._acted: set[str] = set()
        """Nodes this executor granted: dry-run's simulated exclusions, and live exclusions
        whose store write failed (still counted toward the pool fraction)."""
        self._unrecorded: set[str] = set()

    def state(self) -> dict[str, Any]:
        """The limiter's state plus this executor's own (dry-run's simulated exclusions)."""
        return {**self.limiter.state(), "acted": sorted(self._acted),
                "unrecorded": sorted(self._unrecorded)}

    def restore(self, state: Mapping[str, Any]) -> None:
        self.limiter.restore(state)
        for key, target in (("acted", self._acted), ("unrecorded", self._unrecorded)):
            value = state.get(key, [])
            if isinstance(value, list):
                target.update(str(n) for n in value)

    def _sync_excluded(self) -> None:
        stored: set[str] = set()
        if self._store is not None:
            try:
                stored = self._store.active_excluded_nodes()
            except Exception:  # keep the last known state; the service goes on
                log.warning("actions: cannot read exclusions from the store", exc_info=True)
                stored = set(self.limiter.excluded)
        extra = self._acted if self.policy.dry_run else self._unrecorded
        self.limiter.set_excluded(stored | extra)

    def handle(self, alert: NodeAlert) -> ActionResult:
        result = self._handle(alert)
        level = logging.WARNING if result.outcome in (Outcome.DONE, Outcome.FAILED) \
            else logging.INFO
        log.log(level, "actions: %s %s: %s%s", result.node, result.outcome.value, result.reason,
                "".join(f"; {s.action} {s.outcome.value}" + (f" ({s.detail})" if s.detail else "")
                        for s in result.steps))
        return result

    def _handle(self, alert: NodeAlert) -> ActionResult:
        p = self.policy
        if not p.enabled:
            return ActionResult(alert.node, Outcome.DISABLED, "actions are disabled")
        if _SEVERITY_RANK[alert.severity] < _SEVERITY_RANK[p.min_severity] \
                or alert.confidence < p.min_confidence:
            return ActionResult(alert.node, Outcome.SKIPPED,
                                f"{alert.severity} alert at confidence {alert.confidence:g} is "
                                f"below {p.min_severity}/{p.min_confidence:g}")
        self._sync_excluded()
        decision = self.limiter.acquire(alert.node)
        if decision.noop:
            return ActionResult(alert.node, Outcome.SKIPPED, decision.reason)
        if not decision.allowed:
            return ActionResult(alert.node, Outcome.RATE_LIMITED, decision.reason)
        self._acted.add(alert.node)
        reason = f"trainguard watch: {alert.summary}"
        if p.dry_run:
            dry: list[StepResult] = []
            if self._store is not None:
                dry.append(StepResult("exclude", Outcome.DRY_RUN, reason))
            if self._drain is not None:
                dry.append(StepResult("drain", Outcome.DRY_RUN, reason))
            if self._alerts_file is not None:
                dry.append(StepResult("notify", Outcome.DRY_RUN, str(self._alerts_file)))
            return ActionResult(alert.node, Outcome.DRY_RUN, "would act", tuple(dry))
        steps: list[StepResult] = []
        store = self._store
        if store is not None:
            steps.append(self._step("exclude", lambda: self._exclude(store, alert, reason)))
        if not steps or steps[0].outcome is Outcome.FAILED:
            self._unrecorded.add(alert.node)
        if self._drain is not None:
            drain = self._drain
            steps.append(self._step("drain", lambda: drain(alert.node, reason)))
        alerts_file = self._alerts_file
        if alerts_file is not None:
            steps.append(self._step("notify", lambda: _append_line(alerts_file, alert)))
        failed = [s for s in steps if s.outcome is Outcome.FAILED]
        return ActionResult(alert.node, Outcome.FAILED if failed else Outcome.DONE,
                            f"{len(failed)} of {len(steps)} step(s) failed" if failed
                            else "acted", tuple(steps))

    @staticmethod
    def _step(action: Literal["exclude", "drain", "notify"],
              fn: Callable[[], None]) -> StepResult:
        try:
            fn()
        # A service boundary: whatever a step (an injected drain, the database, the disk) raises
        # is reported as that step's failure; the watch loop must keep running.
        except Exception as exc:
            log.debug("actions: %s failed", action, exc_info=True)
            return StepResult(action, Outcome.FAILED, f"{type(exc).__name__}: {exc}"[:300])
        return StepResult(action, Outcome.DONE)

    def _exclude(self, store: Store, alert: NodeAlert, reason: str) -> None:
        now = self._clock()
        store.add_exclusion(alert.node, reason=reason, created=now, evidence=alert.evidence,
                            source=SOURCE)
        store.upsert_node(alert.node, state="excluded", seen=now)


def _append_line(path: Path, alert: NodeAlert) -> None:
    # One write of one whole line in append mode: a follower never sees half a record.
    with open(path, "a", encoding="utf-8") as f:
        f.write(alert_line(alert))
