"""Trace-driven replay: a simulated ``N``-node job with hot spares lived through a real outage
sequence.

The job holds ``N + s`` nodes of the fleet (a *placement*): ``N`` run it, the healthy rest are
its spare pool. Going through the outages of those nodes in time order:

- a running node goes down: the job loses the work since its last completed checkpoint (a
  save cut short is lost too), swaps in a healthy spare and pays the restart cost; with no
  healthy spare it waits until ``N`` of its nodes are up again, then restarts;
- a spare goes down: it leaves the pool; a repaired node rejoins it;
- a failure during a restart starts the restart over;
- training runs ``checkpoint_interval_s``, then saves for ``save_cost_s``, and again.

The job starts running at the window's start (no start-up cost). At the window's end, the
training done since the last checkpoint counts as useful (the window ended, nothing failed).
Each placement costs O(outages of its nodes); the checkpoint cycles are counted, not simulated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from trainguard.errors import ConfigError
from trainguard.planning.model import JobPlan
from trainguard.planning.trace import OutageTable


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """One placement's replay."""

    useful_s: float
    waiting_s: float
    """Wall time with fewer than ``N`` of the job's nodes up."""
    wall_s: float
    failures: int
    """Failures of running nodes the job hit."""

    @property
    def ettr(self) -> float:
        return self.useful_s / self.wall_s

    @property
    def wait_fraction(self) -> float:
        return self.waiting_s / self.wall_s


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """Replays of one plan over several placements."""

    plan: JobPlan
    results: tuple[ReplayResult, ...]

    @property
    def mean_ettr(self) -> float:
        return float(np.mean([r.ettr for r in self.results]))

    @property
    def ettr_spread(self) -> float:
        """Standard deviation of ETTR over the placements."""
        return float(np.std([r.ettr for r in self.results]))

    @property
    def mean_wait_fraction(self) -> float:
        return float(np.mean([r.wait_fraction for r in self.results]))

    @property
    def mean_failures(self) -> float:
        return float(np.mean([r.failures for r in self.results]))


def placements(fleet_size: int, count: int, seed: int) -> list[npt.NDArray[np.int64]]:
    """``count`` deterministic orderings of the fleet's node indices; a placement of ``N + s``
    nodes is the first ``N + s`` of one (so adding a spare adds a node, keeping the rest)."""
    if count < 1:
        raise ConfigError(f"need at least one placement, got {count}")
    return [np.random.default_rng([seed, k]).permutation(fleet_size).astype(np.int64)
            for k in range(count)]


def _events(table: OutageTable, members: npt.NDArray[np.int64]
            ) -> tuple[list[float], list[int], list[int]]:
    """Times, nodes and kinds (0 up, 1 down) of the members' outages; ups first at a tie."""
    mask = np.zeros(table.fleet.size, dtype=bool)
    mask[members] = True
    sel = mask[table.node]
    nodes = table.node[sel]
    times = np.concatenate([table.start[sel], table.end[sel]])
    kinds = np.concatenate([np.ones(nodes.size, dtype=np.int64),
                            np.zeros(nodes.size, dtype=np.int64)])
    order = np.lexsort((kinds, times))
    both = np.concatenate([nodes, nodes])
    return times[order].tolist(), both[order].tolist(), kinds[order].tolist()


@dataclass(frozen=True, slots=True)
class _Stretches:
    """What a replay is made of, whatever the checkpoint interval: the training stretches
    (seconds from the end of a restart to the next failure, or to the window's end) and the
    time spent waiting. The interval only decides how much of each stretch was saved."""

    cut: npt.NDArray[np.float64]
    """Stretches a failure ended (their unsaved work is lost)."""
    last: float
    """The stretch running at the window's end (0 when none)."""
    waiting_s: float
    wall_s: float
    failures: int

    def useful_s(self, interval_s: float, save_cost_s: float) -> float:
        seg = interval_s + save_cost_s
        done = float(np.sum(np.floor(self.cut / seg))) * interval_s
        k = math.floor(self.last / seg)
        return done + k * interval_s + min(self.last - k * seg, interval_s)


def _stretches(table: OutageTable, nodes: int, restart: float,
               members: npt.NDArray[np.int64]) -> _Stretches:
    """Live ``nodes`` running nodes and the rest of ``members`` as spares through their
    outages (module docstring)."""
    n = nodes
    t0, t_end = table.fleet.start_s, table.fleet.end_s
    times, ids, kinds = _events(table, members)
    healthy = {int(m) for m in members}
    i = 0
    while i < len(times) and times[i] <= t0:  # down at the window's start
        if kinds[i] == 1:
            healthy.discard(ids[i])
        else:
            healthy.add(ids[i])
        i += 1
    waiting = 0.0
    cut: list[float] = []
    active: set[int] = set()
    spare: set[int] = set()

    def start() -> None:
        active.clear()
        active.update(list(healthy)[:n])
        spare.clear()
        spare.update(healthy - active)

    running = len(healthy) >= n
    up_at = t0 - restart  # training from t0
    wait_since = t0
    if running:
        start()
    for t, x, kind in zip(times[i:], ids[i:], kinds[i:], strict=True):
        if kind == 0:
            healthy.add(x)
            if running:
                spare.add(x)
            elif len(healthy) >= n:
                running, up_at = True, t
                waiting += t - wait_since
                start()
            continue
        healthy.discard(x)
        if not running:
            continue
        if x not in active:
            spare.discard(x)
            continue
        cut.append(t - up_at - restart)
        active.discard(x)
        if spare:
            active.add(spare.pop())
            up_at = t
        else:
            running, wait_since = False, t
    last = 0.0
    if running:
        last = max(t_end - up_at - restart, 0.0)
    else:
        waiting += t_end - wait_since
    stretches = np.asarray(cut, dtype=np.float64)
    return _Stretches(np.maximum(stretches, 0.0), last, waiting, t_end - t0, len(cut))


def _check_members(plan: JobPlan, members: npt.NDArray[np.int64]) -> None:
    if members.size != plan.nodes + plan.spares:
        raise ConfigError(f"a placement needs {plan.nodes + plan.spares} nodes, got "
                          f"{members.size}")


def replay_once(table: OutageTable, plan: JobPlan, members: npt.NDArray[np.int64]
                ) -> ReplayResult:
    """Replay ``plan`` on the ``N + s`` fleet nodes ``members`` (module docstring)."""
    _check_members(plan, members)
    st = _stretches(table, plan.nodes, plan.restart_cost_s, members)
    return ReplayResult(st.useful_s(plan.checkpoint_interval_s, plan.save_cost_s),
                        st.waiting_s, st.wall_s, st.failures)


def _orders(table: OutageTable, plan: JobPlan, count: int, seed: int,
            orders: Sequence[npt.NDArray[np.int64]] | None) -> list[npt.NDArray[np.int64]]:
    need = plan.nodes + plan.spares
    if need > table.fleet.size:
        raise ConfigError(f"a job of {plan.nodes} nodes + {plan.spares} spares needs {need} "
                          f"nodes, the fleet has {table.fleet.size}")
    perms = placements(table.fleet.size, count, seed) if orders is None else orders
    return [p[:need] for p in perms]


def replay(table: OutageTable, plan: JobPlan, *, count: int = 5, seed: int = 0,
           orders: Sequence[npt.NDArray[np.int64]] | None = None) -> ReplaySummary:
    """Replay ``plan`` over ``count`` placements (or the given ``orders``, see
    :func:`placements`)."""
    return ReplaySummary(plan, tuple(replay_once(table, plan, m)
                                     for m in _orders(table, plan, count, seed, orders)))


def replay_intervals(table: OutageTable, plan: JobPlan, intervals: Sequence[float], *,
                     count: int = 5, seed: int = 0,
                     orders: Sequence[npt.NDArray[np.int64]] | None = None
                     ) -> tuple[ReplaySummary, ...]:
    """:func:`replay` of ``plan`` with each checkpoint interval of ``intervals``, for the
    cost of one: the failures, waits and restarts do not depend on the interval."""
    plans = [replace(plan, checkpoint_interval_s=tau) for tau in intervals]
    lived = [_stretches(table, plan.nodes, plan.restart_cost_s, m)
             for m in _orders(table, plan, count, seed, orders)]
    return tuple(ReplaySummary(p, tuple(
        ReplayResult(st.useful_s(p.checkpoint_interval_s, p.save_cost_s), st.waiting_s,
                     st.wall_s, st.failures) for st in lived)) for p in plans)


def down_beyond_fraction(table: OutageTable, members: npt.NDArray[np.int64],
                         spares: int) -> float:
    """The share of the window with more than ``spares`` of ``members`` down: the replay's
    waiting share, computed without replaying the job (O(E log E) in numpy)."""
    mask = np.zeros(table.fleet.size, dtype=bool)
    mask[members] = True
    sel = mask[table.node]
    k = int(np.count_nonzero(sel))
    if k == 0:
        return 0.0
    times = np.concatenate([table.start[sel], table.end[sel]])
    delta = np.concatenate([np.ones(k, dtype=np.int64), -np.ones(k, dtype=np.int64)])
    order = np.lexsort((delta, times))
    times, delta = times[order], delta[order]
    down = np.cumsum(delta)
    lengths = np.diff(np.append(times, table.fleet.end_s))
    return float(np.sum(lengths[down > spares])) / table.fleet.span_s


def replay_spares_needed(table: OutageTable, nodes: int, max_wait_fraction: float, *,
                         count: int = 5, seed: int = 0, max_spares: int | None = None
                         ) -> int | None:
    """The smallest ``s`` whose mean waiting share over the placements is below
    ``max_wait_fraction``; None when none up to ``max_spares`` (default: what the fleet
    allows) gets there."""
    if not 0.0 < max_wait_fraction <= 1.0:
        raise ConfigError(f"max wait fraction must be in (0, 1], got {max_wait_fraction}")
    limit = table.fleet.size - nodes if max_spares is None else \
        min(max_spares, table.fleet.size - nodes)
    perms = placements(table.fleet.size, count, seed)
    for s in range(limit + 1):
        fractions = [down_beyond_fraction(table, p[:nodes + s], s) for p in perms]
        if float(np.mean(fractions)) < max_wait_fraction:
            return s
    return None


__all__ = [
    "ReplayResult",
    "ReplaySummary",
    "down_beyond_fraction",
    "placements",
    "replay",
    "replay_intervals",
    "replay_once",
    "replay_spares_needed",
]
