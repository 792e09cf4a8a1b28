"""Host checks in a supervised run: pre-flight before the first launch, and stop-time checks of
the suspects after a failure whose culprit is ambiguous.

- **Pre-flight** (``run --preflight``): the nodes and spares are checked together (so each is
  compared with the others); a node judged slow or failed is replaced by a spare that passed,
  a spare that did not pass is dropped. Too few good hosts: the run stops before launching,
  naming them.
- **Stop-time** (``run --stop-checks``, on with ``--preflight``): after a hang, a collective
  timeout, a network error or a lost host, no single rank is to blame; the next attempt's
  nodes and the spares are checked before the relaunch, and what fails is excluded like a node
  with hardware evidence.

The checks run through the backend's agents (:mod:`trainguard.check`); the selection is a pure
function (:func:`replace_flagged`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from trainguard.check.checker import CheckOptions, CheckReport
from trainguard.check.summary import summary_line
from trainguard.errors import ConfigError, TrainguardError
from trainguard.recover.chain import Chain, Scheduler
from trainguard.recover.failure import Failure, FailureKind
from trainguard.recover.records import Exclusion
from trainguard.store import Store
from trainguard.taxonomy import Category

AMBIGUOUS_CATEGORIES = frozenset({Category.NCCL_TIMEOUT_HANG, Category.COLLECTIVE_HANG,
                                  Category.NETWORK_IB, Category.SCHEDULER_NODE_FAILURE})
"""Failures that name no rank's own fault: the host or link behind them is found by checking."""


class TooFewGoodHosts(TrainguardError):
    """A check left fewer good hosts than the job needs."""


@runtime_checkable
class ChecksHosts(Protocol):
    """A backend that can run host checks (agents on the hosts)."""

    def check_hosts(self, hosts: Sequence[str], options: CheckOptions, work_dir: Path,
                    status: Callable[[str], None]) -> CheckReport: ...


@dataclass(frozen=True, slots=True)
class Placement:
    """Nodes and spares after a check."""

    nodes: tuple[str, ...]
    spares: tuple[str, ...]
    excluded: tuple[str, ...]
    """Flagged hosts (nodes and spares) taken out of service."""
    replaced: tuple[tuple[str, str], ...]
    """(flagged node, the spare in its place)."""


def replace_flagged(nodes: Sequence[str], spares: Sequence[str], flagged: Sequence[str],
                    required: int) -> Placement:
    """Each flagged node replaced in place by the first good spare; flagged spares dropped.
    :class:`TooFewGoodHosts` when fewer than ``required`` good nodes remain."""
    bad = set(flagged)
    good_spares = [s for s in spares if s not in bad]
    out: list[str] = []
    replaced: list[tuple[str, str]] = []
    for node in nodes:
        if node not in bad:
            out.append(node)
        elif good_spares:
            sub = good_spares.pop(0)
            out.append(sub)
            replaced.append((node, sub))
    excluded = tuple(h for h in (*nodes, *spares) if h in bad)
    if len(out) < required:
        raise TooFewGoodHosts(f"host check: {', '.join(excluded)} failed and too few good spares "
                          f"remain: the job needs {required} node(s), {len(out)} passed")
    return Placement(tuple(out), tuple(good_spares), excluded, tuple(replaced))


def is_ambiguous(failure: Failure) -> bool:
    """Whether a failure calls for a stop-time check: a hang, a collective timeout, a network
    error or a lost host, with no hardware evidence already naming the culprit, and not a
    fault trainguard injected itself."""
    if failure.node_fault or failure.injected:
        return False
    return failure.kind in (FailureKind.HANG, FailureKind.NODE) \
        or failure.category in AMBIGUOUS_CATEGORIES


def check_reason(report: CheckReport, host: str) -> str:
    """Why ``host`` was flagged, for its exclusion."""
    reasons = [f.reason for f in report.problems() if host in f.hosts]
    return "; ".join(reasons)[:500] or "host check failed"


def require_agents(config: HostCheckConfig, backend: object) -> None:
    """ConfigError (before anything starts) when checks are asked of a backend without
    agents."""
    if (config.preflight or config.stop_time) and not isinstance(backend, ChecksHosts):
        raise ConfigError("--preflight and --stop-checks need agents on the hosts (drop "
                          "--no-agents)")


def run_check(backend: object, hosts: Sequence[str], options: CheckOptions, work_dir: Path,
              status: Callable[[str], None]) -> CheckReport:
    """``hosts`` checked through ``backend``'s agents; ConfigError when it has none."""
    if not isinstance(backend, ChecksHosts):
        raise ConfigError("host checks need agents on the hosts (drop --no-agents)")
    return backend.check_hosts(hosts, options, work_dir, status)


@dataclass(frozen=True, slots=True)
class HostCheckConfig:
    """When a supervised run checks its hosts, and how."""

    preflight: bool = False
    stop_time: bool = False
    options: CheckOptions = field(default_factory=CheckOptions)


class HostChecks:
    """A run's pre-flight and stop-time checks (see the module docstring)."""

    def __init__(self, config: HostCheckConfig, backend: object, run_dir: Path,
                 scheduler: Scheduler, status: Callable[[str], None], *, required: int,
                 store: Store | None = None, session_id: int | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._backend = backend
        self._run_dir = run_dir
        self._scheduler = scheduler
        self._status = status
        self._required = required
        self._store = store
        self._session_id = session_id
        self._clock = clock
        self.spent_s = 0.0
        """Seconds spent checking (badput of its own kind in the report)."""

    def preflight(self, chain: Chain) -> None:
        """Check the nodes and spares before the first launch; :class:`TooFewGoodHosts` when
        too few pass."""
        if self.config.preflight:
            self._check(chain, "preflight", f"pre-flight check of {len(chain.nodes)} node(s) "
                        f"and {len(chain.spares)} spare(s)")

    def after_failure(self, failure: Failure, chain: Chain) -> None:
        """After an ambiguous failure, check the next attempt's nodes and the spares."""
        if self.config.stop_time and is_ambiguous(failure):
            self._check(chain, "stop", "stop-time check of the suspects (the failure names no "
                        "single culprit)")

    def _check(self, chain: Chain, context: str, what: str) -> None:
        hosts = (*chain.nodes, *chain.spares)
        self._status(f"{what}: {', '.join(hosts)}")
        started = self._clock()
        try:
            report = run_check(self._backend, hosts, self.config.options,
                               self._run_dir / "checks" / f"{context}-{len(chain.attempts)}",
                               lambda m: self._status(f"check: {m}"))
        finally:
            self.spent_s += self._clock() - started
        if self._store is not None:
            try:
                self._store.add_host_checks(report, context=context,
                                            session_id=self._session_id)
            except TrainguardError as exc:
                self._status(f"check results not recorded: {exc}")
        flagged = report.flagged()
        if not flagged:
            self._status(f"check: all {len(hosts)} host(s) passed "
                         f"({report.duration_s:.1f} s)")
            return
        try:
            placement = replace_flagged(chain.nodes, chain.spares, flagged, self._required)
        except TooFewGoodHosts as exc:
            # what they failed, the probe and the floor: otherwise only the hosts' names
            raise TooFewGoodHosts(f"{exc}; {summary_line(report)}") from None
        for host in placement.excluded:
            reason = f"{context} check: {check_reason(report, host)}"
            self._status(f"{host}: excluded: {reason}")
            chain.exclusions.append(Exclusion(host, reason, len(chain.attempts)))
            self._scheduler.exclude(host, f"trainguard: {reason}")
            if self._store is not None:
                self._store.add_exclusion(host, reason=reason, created=self._clock(),
                                          session_id=self._session_id)
        for node, sub in placement.replaced:
            self._status(f"{node} replaced by spare {sub}")
        chain.nodes = placement.nodes
        chain.spares = list(placement.spares)


__all__ = [
    "AMBIGUOUS_CATEGORIES",
    "ChecksHosts",
    "HostCheckConfig",
    "HostChecks",
    "Placement",
    "TooFewGoodHosts",
    "check_reason",
    "is_ambiguous",
    "replace_flagged",
    "require_agents",
    "run_check",
]
