"""The planning answers for a fleet's fault history, per job size, model and replay side by side.

For each job size ``N`` the report answers:

1. **spares needed**: the fewest hot spares ``s`` with which the job waits for hardware (fewer
   than ``N`` of its ``N + s`` nodes up) less than ``max_wait_fraction`` of the time; the
   model's binomial answer and the replay's (mean over placements);
2. **checkpoint interval**: Young's ``sqrt(2 C M)`` and Daly's optimum for the job's MTBF
   ``M = MTBF_node / N``, and the ETTR curve around the optimum (model and replay);
3. **expected ETTR** at the chosen interval (given, else Daly's), restart cost and spares
   (given, else the spares needed), model and replay, with the replay's spread over placements;
4. **which answer to use** (``answer_from``) and why: the replay's where the trace is bursty
   (:func:`~trainguard.planning.compare.burstiness`) or the two disagree by more than 2 pp of
   ETTR or one spare (:func:`~trainguard.planning.compare.trust`).

Faults become outages by the fleet's merging rule (:func:`trainguard.fleet.merge_outages`);
the fleet has ``window.fleet_size`` nodes, the nodes that never failed included. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainguard.errors import ConfigError
from trainguard.fleet.events import FaultEvent, FleetWindow, merge_outages
from trainguard.planning.compare import Burstiness, burstiness, trust
from trainguard.planning.model import (
    CURVE_FACTORS,
    JobPlan,
    NodeReliability,
    daly_interval,
    expected_ettr,
    job_mtbf_s,
    spares_needed,
    wait_fraction,
    young_interval,
)
from trainguard.planning.replay import ReplaySummary, replay_intervals, replay_spares_needed
from trainguard.planning.trace import Fleet, Outage, OutageTable, estimate_reliability, outage_table

FALLBACK_INTERVAL_S = 86400.0
"""Interval used when the fault history gives no finite optimum (no failures)."""

SEARCH_FACTORS = tuple(2.0 ** (k / 6.0) for k in range(-24, 25))
"""Intervals the replay's own optimum is looked for at: 1/16 to 16 times Daly's, 12% apart."""

ASSUMPTIONS = (
    "model: each node fails at one constant rate per second of up time, so outage starts form "
    "a Poisson process (rate = outages begun in the window / node-seconds up)",
    "model: nodes fail and are repaired independently of each other",
    "model: a node is down a share p = lambda R / (1 + lambda R) of the time (R: mean outage); "
    "the job waits while more than s of its N + s nodes are down, W = P(Binomial(N + s, p) > s)",
    "model: the N running nodes fail at N lambda; a failure loses the work since the last "
    "saved checkpoint and costs one restart (a failure during it restarts it); spares that "
    "fail cost nothing: ETTR = (1 - W) tau / (M e^(r/M) (e^((tau + C)/M) - 1)), Daly 2006",
    "model: repair times enter only through their mean (exact for independent nodes in "
    "steady state, whatever their distribution; long repairs that cluster in time break it)",
    "replay: a job on N + s of the fleet's nodes (seeded random placements) lives through the "
    "faults as they happened and the repairs as they took; no fault is moved or resampled",
    "both: an outage is the union of a node's overlapping or touching faults, clipped to the "
    "window; faults of zero length cause no outage and are left out; the job starts at the "
    "window's start and the window's end ends it",
)


@dataclass(frozen=True, slots=True)
class CurvePair:
    """ETTR at one checkpoint interval, model and replay (mean over placements)."""

    factor: float
    """The interval over the optimum (Daly's)."""
    interval_s: float
    model_ettr: float
    replay_ettr: float


@dataclass(frozen=True, slots=True)
class SizePlan:
    """The planning answers for a job of ``nodes`` nodes (module docstring)."""

    nodes: int
    spares: int
    """Spares both ETTRs are evaluated with: the given count, else the spares needed (the
    model's count unless the trace is bursty or the counts differ by more than one, then the
    replay's; the most the fleet allows when neither meets the target)."""
    model_spares: int | None
    """Fewest spares meeting the wait target by the model; None: none up to the fleet's room."""
    replay_spares: int | None
    room: int
    """The most spares the fleet leaves room for (fleet size - N)."""
    job_mtbf_s: float
    young_s: float
    daly_s: float
    interval_s: float
    """The interval the ETTRs are evaluated at: the given one, else Daly's."""
    model_ettr: float
    replay_ettr: float
    replay_ettr_spread: float
    """Standard deviation of the replay's ETTR over placements."""
    replay_ettr_low: float
    replay_ettr_high: float
    model_wait: float
    replay_wait: float
    replay_failures: float
    """Failures of running nodes per replay (mean over placements)."""
    curve: tuple[CurvePair, ...]
    replay_best_interval_s: float
    """The interval of :data:`SEARCH_FACTORS` with the replay's highest mean ETTR."""
    replay_best_ettr: float
    answer_from: str
    """"model" or "replay"."""
    reasons: tuple[str, ...]
    """Why the replay answers; empty when the model does."""
    notes: tuple[str, ...]
    """Caveats on this size's figures (no spare count meets the target, no failures ...)."""

    @property
    def ettr_gap_pp(self) -> float:
        """Model minus replay, percentage points."""
        return 100.0 * (self.model_ettr - self.replay_ettr)

    @property
    def answer_spares(self) -> int | None:
        return self.model_spares if self.answer_from == "model" else self.replay_spares

    @property
    def answer_ettr(self) -> float:
        return self.model_ettr if self.answer_from == "model" else self.replay_ettr

    @property
    def answer_interval_s(self) -> float:
        """The best interval: Daly's when the model answers, the replay's optimum else."""
        if self.answer_from == "replay":
            return self.replay_best_interval_s
        return self.daly_s if 0 < self.daly_s < math.inf else self.interval_s


@dataclass(frozen=True, slots=True)
class SkippedSize:
    nodes: int
    reason: str


@dataclass(frozen=True, slots=True)
class PlanningReport:
    """The planning answers for every job size that fits the fleet (module docstring)."""

    window: FleetWindow
    outages: int
    zero_length_faults: int
    reliability: NodeReliability
    burstiness: Burstiness
    save_cost_s: float
    restart_cost_s: float
    spares_given: int | None
    max_wait_fraction: float
    interval_given_s: float | None
    replays: int
    seed: int
    sizes: tuple[SizePlan, ...]
    skipped: tuple[SkippedSize, ...]
    assumptions: tuple[str, ...] = ASSUMPTIONS


def _check_inputs(job_sizes: Sequence[int], save_cost_s: float, restart_cost_s: float,
                  spares: int | None, max_wait_fraction: float, interval_s: float | None,
                  replays: int) -> None:
    if not job_sizes or any(n < 1 for n in job_sizes):
        raise ConfigError(f"job sizes must be whole numbers >= 1, got {list(job_sizes)}")
    for name, value in (("save cost", save_cost_s), ("restart cost", restart_cost_s)):
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{name} must be a finite number of seconds >= 0, got {value}")
    if spares is not None and spares < 0:
        raise ConfigError(f"spares must be >= 0, got {spares}")
    if not 0.0 < max_wait_fraction <= 1.0:
        raise ConfigError(f"max wait must be a fraction in (0, 1], got {max_wait_fraction}")
    if interval_s is not None and not (math.isfinite(interval_s) and interval_s > 0):
        raise ConfigError(f"checkpoint interval must be a finite number of seconds > 0, "
                          f"got {interval_s}")
    if replays < 1:
        raise ConfigError(f"need at least one replay placement, got {replays}")


def fleet_table(events: Sequence[FaultEvent], window: FleetWindow) -> tuple[OutageTable, int]:
    """The fleet's outages as the planner's table, and how many zero-length faults (no down
    time) it leaves out. Nodes that never failed fill the fleet to ``window.fleet_size``."""
    merged = merge_outages(events, window)
    zero = sum(o.faults for o in merged if o.end <= o.start)
    named = sorted({o.node for o in merged})
    taken = set(named)
    fill: list[str] = []
    k = 0
    while len(named) + len(fill) < window.fleet_size:
        name = f"(no fault {k})"
        k += 1
        if name not in taken:
            fill.append(name)
    fleet = Fleet((*named, *fill), window.start, window.end)
    return outage_table([Outage(o.node, o.start, o.end) for o in merged], fleet), zero


def _spares_for(nodes: int, given: int | None, room: int, model_s: int | None,
                replay_s: int | None, bursty: bool) -> tuple[int, list[str]]:
    """The spares the ETTRs are evaluated with (:attr:`SizePlan.spares`)."""
    if given is not None:
        return given, []
    agree = model_s is not None and replay_s is not None and abs(model_s - replay_s) <= 1
    pick = model_s if agree and not bursty else replay_s
    if pick is None:
        return room, [f"no spare count up to {room} meets the wait target for {nodes} nodes; "
                      f"ETTR with {room} spares"]
    return pick, []


def size_plan(table: OutageTable, rel: NodeReliability, bursts: Burstiness, *, nodes: int,
              spares: int | None, save_cost_s: float, restart_cost_s: float,
              max_wait_fraction: float, interval_s: float | None, replays: int,
              seed: int) -> SizePlan:
    """The answers for one job size (module docstring); the size must fit the fleet."""
    room = table.fleet.size - nodes
    p = rel.down_probability
    model_s = spares_needed(nodes, p, max_wait_fraction, max_spares=room)
    replay_s = replay_spares_needed(table, nodes, max_wait_fraction, count=replays, seed=seed,
                                    max_spares=room)
    used, notes = _spares_for(nodes, spares, room, model_s, replay_s, bursts.bursty)
    mtbf = job_mtbf_s(nodes, rel)
    young = young_interval(save_cost_s=save_cost_s, mtbf_s=mtbf)
    daly = daly_interval(save_cost_s=save_cost_s, mtbf_s=mtbf)
    base = daly if 0 < daly < math.inf else FALLBACK_INTERVAL_S
    if base != daly:
        notes.append(f"no finite optimum (no failures): curve around {base:g} s")
    tau = base if interval_s is None else interval_s
    k = len(CURVE_FACTORS)
    intervals = [tau, *(base * f for f in CURVE_FACTORS), *(base * f for f in SEARCH_FACTORS)]
    summaries = replay_intervals(table, JobPlan(nodes, used, tau, save_cost_s, restart_cost_s),
                                 intervals, count=replays, seed=seed)

    def model(at: float) -> float:
        return expected_ettr(JobPlan(nodes, used, at, save_cost_s, restart_cost_s), rel)

    chosen: ReplaySummary = summaries[0]
    curve = tuple(CurvePair(f, s.plan.checkpoint_interval_s, model(s.plan.checkpoint_interval_s),
                            s.mean_ettr)
                  for f, s in zip(CURVE_FACTORS, summaries[1:k + 1], strict=True))
    search = summaries[k + 1:]
    best = max(range(len(search)), key=lambda i: search[i].mean_ettr)
    if best in (0, len(search) - 1) and chosen.mean_failures > 0:
        notes.append(f"the replay's best interval is at the edge of the search "
                     f"({SEARCH_FACTORS[best]:g} x Daly's)")
    model_ettr = model(tau)
    source, reasons = trust(bursts, 100.0 * (model_ettr - chosen.mean_ettr), model_s, replay_s)
    if chosen.mean_failures == 0:
        notes.append("the replayed job met no failure")
    ettrs = [r.ettr for r in chosen.results]
    return SizePlan(nodes, used, model_s, replay_s, room, mtbf, young, daly, tau, model_ettr,
                    chosen.mean_ettr, chosen.ettr_spread, min(ettrs), max(ettrs),
                    wait_fraction(nodes, used, p), chosen.mean_wait_fraction,
                    chosen.mean_failures, curve, search[best].plan.checkpoint_interval_s,
                    search[best].mean_ettr, source, reasons, tuple(notes))


def planning_report(events: Sequence[FaultEvent], window: FleetWindow, *,
                    job_sizes: Sequence[int], save_cost_s: float, restart_cost_s: float,
                    spares: int | None = None, max_wait_fraction: float = 0.01,
                    interval_s: float | None = None, replays: int = 5,
                    seed: int = 0) -> PlanningReport:
    """The planning answers for each job size of ``job_sizes`` (module docstring).

    ``spares``: the hot spares to evaluate ETTR with (None: the spares needed for the wait
    target); ``interval_s``: the checkpoint interval (None: Daly's optimum); ``replays``: the
    placements the replay averages over. A size that cannot fit the fleet (``N``, plus the
    given spares) is skipped, with the reason in :attr:`PlanningReport.skipped`.
    """
    _check_inputs(job_sizes, save_cost_s, restart_cost_s, spares, max_wait_fraction,
                  interval_s, replays)
    table, zero = fleet_table(events, window)
    rel = estimate_reliability(table)
    bursts = burstiness(table)
    plans: list[SizePlan] = []
    skipped: list[SkippedSize] = []
    for n in sorted(set(job_sizes)):
        need = n + (spares or 0)
        if need > window.fleet_size:
            what = f"{n} nodes" + (f" + {spares} spares" if spares else "")
            skipped.append(SkippedSize(n, f"{what} need {need} nodes; the fleet has "
                                          f"{window.fleet_size}"))
            continue
        plans.append(size_plan(table, rel, bursts, nodes=n, spares=spares,
                               save_cost_s=save_cost_s, restart_cost_s=restart_cost_s,
                               max_wait_fraction=max_wait_fraction, interval_s=interval_s,
                               replays=replays, seed=seed))
    return PlanningReport(window, table.count, zero, rel, bursts, save_cost_s, restart_cost_s,
                          spares, max_wait_fraction, interval_s, replays, seed, tuple(plans),
                          tuple(skipped))


__all__ = [
    "ASSUMPTIONS",
    "FALLBACK_INTERVAL_S",
    "SEARCH_FACTORS",
    "CurvePair",
    "PlanningReport",
    "SizePlan",
    "SkippedSize",
    "fleet_table",
    "planning_report",
    "size_plan",
]
