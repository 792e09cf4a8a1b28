"""The analytic planning model: ETTR of an ``N``-node job with hot spares, from per-node figures.

Assumptions (each one is what :mod:`.compare` tests a real fault history against):

1. every node alternates independently between up and down; while up it fails at a constant
   rate ``λ`` (per second of *up* time), and an outage lasts ``R`` seconds on average;
2. so at a random instant a node is down with probability ``p = λR / (1 + λR)``;
3. the job holds ``N + s`` nodes (``s`` hot spares); it waits for hardware exactly while more
   than ``s`` of them are down: a share ``W = P(Binomial(N + s, p) > s)`` of the wall time;
4. while not waiting, the job's ``N`` running nodes fail at rate ``Λ = Nλ`` (MTBF ``M = 1/Λ``);
   each failure throws away the work since the last completed checkpoint and costs a restart
   of ``r`` seconds (a failure during the restart restarts it); training runs in segments of
   ``τ`` seconds followed by a ``C``-second checkpoint save;
5. the expected time to get one segment done is then Daly's (FGCS 2006)
   ``T(τ) = M e^{r/M} (e^{(τ + C)/M} - 1)``, so ``ETTR(τ) = (1 - W) τ / T(τ)``; to first order
   this is ``(1 - W) (τ / (τ + C)) / (1 + Λ (r + (τ + C) / 2))``, the formula of
   :mod:`trainguard.analytics.model` (lost work is half a segment on average).

The optimum of (5) is Young's ``sqrt(2 C M)`` to first order
(:func:`trainguard.analytics.model.young_daly_interval`); Daly's higher-order correction is
``sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C`` for ``C < 2M``, else ``M``.

    >>> rel = NodeReliability(failure_rate_per_s=1 / (30 * 86400.0), mean_repair_s=86400.0)
    >>> round(rel.down_probability, 4)
    0.0323
    >>> round(young_interval(save_cost_s=60.0, mtbf_s=3600.0))
    657
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainguard.analytics.failures import SECONDS_PER_DAY
from trainguard.analytics.model import young_daly_interval
from trainguard.errors import ConfigError


def _check(key: str, value: float, *, positive: bool = False, inf_ok: bool = False) -> None:
    ok = value > 0 if positive else value >= 0
    if math.isnan(value) or not ok or (math.isinf(value) and not inf_ok):
        raise ConfigError(f"{key} must be a {'' if inf_ok else 'finite '}number "
                          f"{'>' if positive else '>='} 0, got {value}")


@dataclass(frozen=True, slots=True)
class JobPlan:
    """A job to plan for: its size, hot spares, checkpoint interval and costs (seconds)."""

    nodes: int
    spares: int
    checkpoint_interval_s: float
    """Training seconds between checkpoint saves (``τ``)."""
    save_cost_s: float
    """Seconds a checkpoint save blocks training (``C``)."""
    restart_cost_s: float
    """Seconds from a failure (or from hardware back) to training again (``r``)."""

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.spares < 0:
            raise ConfigError(f"a job needs nodes >= 1 and spares >= 0, got nodes={self.nodes}, "
                              f"spares={self.spares}")
        _check("checkpoint_interval_s", self.checkpoint_interval_s, positive=True)
        _check("save_cost_s", self.save_cost_s)
        _check("restart_cost_s", self.restart_cost_s)


@dataclass(frozen=True, slots=True)
class NodeReliability:
    """Per-node figures: failure rate per second of up time (``λ``) and mean outage (``R``)."""

    failure_rate_per_s: float
    mean_repair_s: float

    def __post_init__(self) -> None:
        _check("failure_rate_per_s", self.failure_rate_per_s)
        _check("mean_repair_s", self.mean_repair_s)

    @classmethod
    def from_figures(cls, *, mtbf_days: float, mean_repair_hours: float) -> NodeReliability:
        """From a node MTBF in days (up time between failures) and a mean repair in hours."""
        _check("mtbf_days", mtbf_days, positive=True)
        return cls(1.0 / (mtbf_days * SECONDS_PER_DAY), mean_repair_hours * 3600.0)

    @property
    def mtbf_s(self) -> float:
        """Mean up time between failures of one node (inf without failures)."""
        return math.inf if self.failure_rate_per_s == 0 else 1.0 / self.failure_rate_per_s

    @property
    def down_probability(self) -> float:
        """``p = λR / (1 + λR)`` (assumption 2)."""
        x = self.failure_rate_per_s * self.mean_repair_s
        return x / (1.0 + x)


def young_interval(*, save_cost_s: float, mtbf_s: float) -> float:
    """Young's ``sqrt(2 C M)`` for a job of MTBF ``M`` (inf when ``M`` is)."""
    _check("save_cost_s", save_cost_s)
    _check("mtbf_s", mtbf_s, positive=True, inf_ok=True)
    if math.isinf(mtbf_s):
        return math.inf
    # the analytics module's form: one "node" failing 86400 / M times a day
    return young_daly_interval(nodes=1.0, failures_per_node_day=SECONDS_PER_DAY / mtbf_s,
                               write_s=save_cost_s)


def daly_interval(*, save_cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (module docstring); ``M`` itself when ``C >= 2M``."""
    first = young_interval(save_cost_s=save_cost_s, mtbf_s=mtbf_s)
    if math.isinf(first):
        return math.inf
    if save_cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = save_cost_s / (2.0 * mtbf_s)
    return max(first * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_cost_s, 0.0)


def job_mtbf_s(nodes: int, rel: NodeReliability) -> float:
    """``M = MTBF_node / N`` (assumption 4)."""
    return rel.mtbf_s / nodes


def wait_fraction(nodes: int, spares: int, down_probability: float) -> float:
    """``W = P(Binomial(N + s, p) > s)``: the share of time the job waits for hardware."""
    if nodes < 1 or spares < 0:
        raise ConfigError(f"need nodes >= 1 and spares >= 0, got {nodes}, {spares}")
    p = down_probability
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"down probability must be in [0, 1], got {p}")
    n = nodes + spares
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for k in range(spares + 1, n + 1):
        log_pmf = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp \
            + (n - k) * lq
        total += math.exp(log_pmf)
    return min(total, 1.0)


def run_efficiency(interval_s: float, *, mtbf_s: float, save_cost_s: float,
                   restart_cost_s: float) -> float:
    """``τ / T(τ)``: the useful share of the time the job is not waiting (assumption 5)."""
    _check("interval_s", interval_s, positive=True)
    _check("save_cost_s", save_cost_s)
    _check("restart_cost_s", restart_cost_s)
    _check("mtbf_s", mtbf_s, positive=True, inf_ok=True)
    if math.isinf(mtbf_s):
        return interval_s / (interval_s + save_cost_s)
    seg = (interval_s + save_cost_s) / mtbf_s
    if seg > 700.0 or restart_cost_s / mtbf_s > 700.0:
        return 0.0
    expected = mtbf_s * math.exp(restart_cost_s / mtbf_s) * math.expm1(seg)
    return interval_s / expected


def expected_ettr(plan: JobPlan, rel: NodeReliability) -> float:
    """``ETTR = (1 - W) τ / T(τ)`` for ``plan`` (assumptions 1-5)."""
    w = wait_fraction(plan.nodes, plan.spares, rel.down_probability)
    eff = run_efficiency(plan.checkpoint_interval_s, mtbf_s=job_mtbf_s(plan.nodes, rel),
                         save_cost_s=plan.save_cost_s, restart_cost_s=plan.restart_cost_s)
    return (1.0 - w) * eff


def spares_needed(nodes: int, down_probability: float, max_wait_fraction: float,
                  max_spares: int | None = None) -> int | None:
    """The smallest ``s`` with ``W(N, s, p) < max_wait_fraction``; None when no ``s`` up to
    ``max_spares`` (default ``N``) gets there."""
    if not 0.0 < max_wait_fraction <= 1.0:
        raise ConfigError(f"max wait fraction must be in (0, 1], got {max_wait_fraction}")
    limit = nodes if max_spares is None else max_spares
    for s in range(limit + 1):
        if wait_fraction(nodes, s, down_probability) < max_wait_fraction:
            return s
    return None


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """The model's ETTR at one checkpoint interval."""

    factor: float
    """The interval over Daly's optimum."""
    interval_s: float
    ettr: float


@dataclass(frozen=True, slots=True)
class PlanAnswer:
    """The model's answers for one job size."""

    nodes: int
    spares: int
    job_mtbf_s: float
    young_s: float
    daly_s: float
    wait_fraction: float
    ettr_at_daly: float
    curve: tuple[CurvePoint, ...]


CURVE_FACTORS = (0.25, 0.5, 1 / math.sqrt(2), 1.0, math.sqrt(2), 2.0, 4.0)
"""Intervals tabulated around the optimum, as multiples of it."""


def plan_answer(*, nodes: int, spares: int, rel: NodeReliability, save_cost_s: float,
                restart_cost_s: float) -> PlanAnswer:
    """Young/Daly intervals, the waiting share, and the ETTR curve around Daly's optimum."""
    m = job_mtbf_s(nodes, rel)
    young = young_interval(save_cost_s=save_cost_s, mtbf_s=m)
    daly = daly_interval(save_cost_s=save_cost_s, mtbf_s=m)
    w = wait_fraction(nodes, spares, rel.down_probability)
    base = daly if 0 < daly < math.inf else 3600.0

    def ettr(tau: float) -> float:
        return expected_ettr(JobPlan(nodes, spares, tau, save_cost_s, restart_cost_s), rel)

    curve = tuple(CurvePoint(f, base * f, ettr(base * f)) for f in CURVE_FACTORS)
    return PlanAnswer(nodes, spares, m, young, daly, w, ettr(base), curve)


__all__ = [
    "CURVE_FACTORS",
    "CurvePoint",
    "JobPlan",
    "NodeReliability",
    "PlanAnswer",
    "daly_interval",
    "expected_ettr",
    "job_mtbf_s",
    "plan_answer",
    "run_efficiency",
    "spares_needed",
    "wait_fraction",
    "young_interval",
]
