"""The ETTR model: expected effective training time ratio as a function of the checkpoint interval,
and the interval that maximizes it.

Sources: the ETTR definition and the failure-rate-per-node-day parametrization follow Meta's
"Revisiting Reliability in Large-Scale Machine Learning Research Clusters" (Kokolis et al., 2024,
arXiv:2410.21680); the optimum checkpoint interval is Young's first-order result ("A first order
approximation to the optimum checkpoint interval", CACM 1974), refined by Daly (FGCS 2006).

The model, for a job on ``N`` nodes:

1. failures arrive at rate ``λ = N * failures_per_node_day / 86400`` per second (independent
   nodes, exponential failures);
2. training runs in cycles of ``τ`` seconds of training and ``w`` seconds of blocking checkpoint
   write: a share ``τ / (τ + w)`` of the running time trains;
3. each failure costs the restart ``R`` (detection + teardown + relaunch + checkpoint load, up to
   the first step) plus, on average, half a cycle of lost work ``(τ + w) / 2``; per second of
   running that is ``λ (R + (τ + w) / 2)`` seconds of waste;
4. hence ``ETTR(τ) ≈ (τ / (τ + w)) * 1 / (1 + λ (R + (τ + w) / 2))``.

Maximizing (4): ``d/dτ log ETTR = 0`` gives ``w / (τ (τ + w)) = (λ/2) / (1 + λR + λ(τ + w)/2)``,
which for ``w << τ << 1/λ`` reduces to Young/Daly's ``τ* = sqrt(2 w / λ)``.
:func:`optimal_checkpoint_interval` solves (4) numerically instead (a log grid, then golden-section
search on ``log τ``; ``log ETTR`` is concave in ``log τ``, so the maximum is unique).

    >>> tau, ettr = optimal_checkpoint_interval(nodes=64, failures_per_node_day=0.01,
    ...                                         write_s=30.0, restart_s=600.0)
    >>> round(tau), round(ettr, 3)
    (2853, 0.975)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainguard.analytics.exposure import (
    DEFAULT_POLICY,
    ExposurePolicy,
    Support,
    interval_support,
    rate_support,
)
from trainguard.analytics.failures import SECONDS_PER_DAY, FailureStats
from trainguard.analytics.runs import RunView, median, stall_s
from trainguard.errors import ConfigError
from trainguard.store import RUNNING


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """The ETTR model's parameters (module docstring, steps 1-3)."""

    nodes: float
    """Nodes the job runs on."""
    failures_per_node_day: float
    """Job-interrupting failures per node per day."""
    write_s: float
    """Seconds a checkpoint save blocks training."""
    restart_s: float
    """Seconds from a failure to training again, lost work excluded."""

    def __post_init__(self) -> None:
        checks = (("nodes", self.nodes, 0.0, False), ("failures_per_node_day",
                  self.failures_per_node_day, 0.0, True), ("write_s", self.write_s, 0.0, True),
                  ("restart_s", self.restart_s, 0.0, True))
        for key, value, low, inclusive in checks:
            ok = value >= low if inclusive else value > low
            if not math.isfinite(value) or not ok:
                raise ConfigError(f"{key} must be {'>=' if inclusive else '>'} {low:g}, "
                                  f"got {value}")

    @property
    def failure_rate_per_s(self) -> float:
        """``λ`` (step 1)."""
        return self.nodes * self.failures_per_node_day / SECONDS_PER_DAY


def expected_ettr(interval_s: float, *, nodes: float, failures_per_node_day: float,
                  write_s: float, restart_s: float) -> float:
    """``ETTR(τ)`` of the module docstring, step 4, for ``τ = interval_s`` (> 0)."""
    return _ettr(interval_s, ModelInputs(nodes, failures_per_node_day, write_s, restart_s))


def _ettr(tau: float, m: ModelInputs) -> float:
    if not tau > 0:
        raise ConfigError(f"checkpoint interval must be > 0, got {tau}")
    lam, cycle = m.failure_rate_per_s, tau + m.write_s
    if math.isinf(tau):
        return 1.0 if lam == 0 else 0.0
    return (tau / cycle) / (1.0 + lam * (m.restart_s + cycle / 2.0))


def stop_check_break_even(*, check_s: float, restart_s: float, interval_s: float,
                          write_s: float, detect_s: float) -> float:
    """The share of ambiguous failures (hangs, collective timeouts, lost hosts) that must be
    caused by a host the stop-time check finds for the check to pay for itself.

    Without the check, a relaunch onto the faulty host fails again: another detection
    (``detect_s``, e.g. the hang timeout), restart, and on average half a checkpoint cycle of
    lost work. With it, every ambiguous failure costs ``check_s``. So the check pays when
    ``p * (detect_s + restart_s + (interval_s + write_s) / 2) > check_s``; the result is that
    ``p`` (above 1: never pays).

        >>> round(stop_check_break_even(check_s=30, restart_s=60, interval_s=1800,
        ...                             write_s=20, detect_s=600), 3)
        0.019
    """
    for key, value in (("check_s", check_s), ("restart_s", restart_s),
                       ("interval_s", interval_s), ("write_s", write_s),
                       ("detect_s", detect_s)):
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{key} must be a finite number >= 0, got {value}")
    repeat = detect_s + restart_s + (interval_s + write_s) / 2.0
    return math.inf if repeat == 0 else check_s / repeat


def young_daly_interval(*, nodes: float, failures_per_node_day: float, write_s: float) -> float:
    """Young/Daly's first-order optimum ``sqrt(2 w / λ)`` (inf without failures)."""
    lam = ModelInputs(nodes, failures_per_node_day, write_s, 0.0).failure_rate_per_s
    return math.inf if lam == 0 else math.sqrt(2.0 * write_s / lam)


def optimal_checkpoint_interval(nodes: float, failures_per_node_day: float, write_s: float,
                                restart_s: float) -> tuple[float, float]:
    """The interval maximizing ``ETTR(τ)`` and that ETTR.

    Without failures the best is never to checkpoint: ``(inf, 1.0)``. With free checkpoints
    (``write_s == 0``) ETTR grows as ``τ`` shrinks: ``(0.0, 1 / (1 + λR))``, the supremum.
    """
    m = ModelInputs(nodes, failures_per_node_day, write_s, restart_s)
    lam = m.failure_rate_per_s
    if lam == 0:
        return math.inf, 1.0
    if write_s == 0:
        return 0.0, 1.0 / (1.0 + lam * restart_s)

    def g(u: float) -> float:
        return math.log(_ettr(math.exp(u), m))

    # 1. a log grid around the approximate root sqrt(2 w (1 + λR) / λ), 4 decades each way
    guess = math.sqrt(2.0 * write_s * (1.0 + lam * restart_s) / lam)
    grid = np.linspace(math.log(guess) - 4 * math.log(10), math.log(guess) + 4 * math.log(10),
                       321)
    values = [g(float(u)) for u in grid]
    best = int(np.argmax(values))
    lo, hi = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, len(grid) - 1)])
    # 2. golden-section search on log τ within the grid cell around the best point
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo + (1 - inv_phi) * (hi - lo), lo + inv_phi * (hi - lo)
    ga, gb = g(a), g(b)
    while hi - lo > 1e-10:
        if ga >= gb:
            hi, b, gb = b, a, ga
            a = lo + (1 - inv_phi) * (hi - lo)
            ga = g(a)
        else:
            lo, a, ga = a, b, gb
            b = lo + inv_phi * (hi - lo)
            gb = g(b)
    tau = math.exp((lo + hi) / 2.0)
    return tau, _ettr(tau, m)


@dataclass(frozen=True, slots=True)
class IntervalRow:
    """The model's ETTR at one checkpoint interval."""

    label: str
    interval_s: float
    ettr: float


@dataclass(frozen=True, slots=True)
class CheckpointAdvice:
    """The optimum interval, Young/Daly's estimate, and ETTR at intervals around them.

        >>> a = advise(ModelInputs(nodes=64, failures_per_node_day=0.01, write_s=30.0,
        ...                        restart_s=600.0))
        >>> [r.label for r in a.rows][:3]
        ['optimum / 4', 'optimum / 2', 'Young/Daly']
    """

    inputs: ModelInputs
    optimal_interval_s: float
    optimal_ettr: float
    young_daly_s: float
    young_daly_ettr: float | None
    """None when Young/Daly's interval is infinite (no failures)."""
    rows: tuple[IntervalRow, ...]
    """By interval, the optimum and Young/Daly included."""

    def to_dict(self) -> dict[str, object]:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None
        return {"inputs": {"nodes": self.inputs.nodes,
                           "failures_per_node_day": self.inputs.failures_per_node_day,
                           "write_s": self.inputs.write_s, "restart_s": self.inputs.restart_s},
                "optimal_interval_s": num(self.optimal_interval_s),
                "optimal_ettr": self.optimal_ettr, "young_daly_s": num(self.young_daly_s),
                "young_daly_ettr": self.young_daly_ettr,
                "table": [{"label": r.label, "interval_s": r.interval_s, "ettr": r.ettr}
                          for r in self.rows]}


FALLBACK_INTERVALS_S = (300.0, 900.0, 1800.0, 3600.0, 7200.0)
"""Intervals tabulated when the optimum is 0 or infinite."""


def advise(inputs: ModelInputs, current_interval_s: float | None = None) -> CheckpointAdvice:
    """Solve the model for ``inputs`` and tabulate ETTR at the optimum / 4, / 2, x 2, x 4, at
    Young/Daly's interval and at ``current_interval_s`` (the interval in use) when given."""
    m = inputs
    tau, best = optimal_checkpoint_interval(m.nodes, m.failures_per_node_day, m.write_s,
                                            m.restart_s)
    yd = young_daly_interval(nodes=m.nodes, failures_per_node_day=m.failures_per_node_day,
                             write_s=m.write_s)
    rows: list[IntervalRow] = []
    if 0 < tau < math.inf:
        rows.append(IntervalRow("optimum", tau, best))
        for factor, label in ((0.25, "optimum / 4"), (0.5, "optimum / 2"), (2.0, "optimum x 2"),
                              (4.0, "optimum x 4")):
            rows.append(IntervalRow(label, tau * factor, _ettr(tau * factor, m)))
    else:
        rows += [IntervalRow(f"{x / 60:g} min", x, _ettr(x, m)) for x in FALLBACK_INTERVALS_S]
    yd_ettr = _ettr(yd, m) if 0 < yd < math.inf else None
    if yd_ettr is not None:
        rows.append(IntervalRow("Young/Daly", yd, yd_ettr))
    if current_interval_s is not None and current_interval_s > 0:
        rows.append(IntervalRow("current", current_interval_s, _ettr(current_interval_s, m)))
    rows.sort(key=lambda r: r.interval_s)
    return CheckpointAdvice(m, tau, best, yd, yd_ettr, tuple(rows))


# -- measuring the inputs ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measurement:
    """A model input estimated from the store."""

    value: float
    samples: int
    """How many observations it rests on."""
    source: str
    """What was measured, in words."""

    def to_dict(self) -> dict[str, object]:
        return {"value": self.value, "samples": self.samples, "source": self.source}


@dataclass(frozen=True, slots=True)
class MeasuredInputs:
    """Model inputs measured from the store; None where the store holds no data for one."""

    nodes: Measurement | None
    failures_per_node_day: Measurement | None
    write_s: Measurement | None
    restart_s: Measurement | None
    interval_s: Measurement | None = None
    """The checkpoint interval the runs used (training seconds between saves)."""
    failures: int = 0
    """Failures observed (the exposure behind ``failures_per_node_day``)."""
    node_s: float = 0.0
    """Node-seconds observed."""
    training_s: float = 0.0
    """Wall seconds of the finished attempts."""

    def rate_support(self, policy: ExposurePolicy = DEFAULT_POLICY) -> Support:
        """Whether the measured failure rate rests on enough exposure (:mod:`.exposure`)."""
        return rate_support(self.failures, self.node_s, self.training_s, policy)

    def interval_support(self, interval_s: float,
                         policy: ExposurePolicy = DEFAULT_POLICY) -> Support:
        """Whether an interval derived from the measured failure rate rests on enough data."""
        return interval_support(self.failures, self.node_s, self.training_s, interval_s, policy)

    def to_dict(self) -> dict[str, object]:
        doc: dict[str, object] = {k: None if v is None else v.to_dict() for k, v in (
            ("nodes", self.nodes), ("failures_per_node_day", self.failures_per_node_day),
            ("write_s", self.write_s), ("restart_s", self.restart_s),
            ("interval_s", self.interval_s))}
        doc["rate_support"] = self.rate_support().to_dict()
        return doc


def measured_inputs(runs: Sequence[RunView], failure_stats: FailureStats) -> MeasuredInputs:
    """Estimate the model's inputs:

    1. nodes: median node count of the finished attempts;
    2. failures per node-day: ``failure_stats.per_node_day``, only when there was at least one
       failure (zero failures over a short history says little: give the rate explicitly);
    3. write: median stall (``blocking_s``, else ``save_s``) of the good checkpoints;
    4. restart: median of the known times to resume (:mod:`.failures`, definition 4);
    5. interval: median over consecutive good checkpoints of one attempt of
       ``created[i+1] - created[i] - stall[i+1]``.
    """
    attempts = [a for r in runs for a in r.attempts if a.ended is not None and a.status != RUNNING]
    sizes = [float(len(a.nodes)) for a in attempts if a.nodes]
    ckpts = [c for r in runs for c in r.checkpoints if c.ok]
    stalls = [stall_s(c) for c in ckpts if c.blocking_s is not None or c.save_s is not None]
    gaps: list[float] = []
    for r in runs:
        for a in r.attempts:
            saved = [c for c in r.checkpoints_of(a) if c.ok]
            gaps += [max(0.0, b.created - p.created - stall_s(b))
                     for p, b in itertools.pairwise(saved)]
    fs = failure_stats
    return MeasuredInputs(
        nodes=_measure(sizes, "median nodes per attempt"),
        failures_per_node_day=None if not fs.failures or fs.per_node_day is None else Measurement(
            fs.per_node_day, fs.failures,
            f"{fs.failures} failure(s) over {fs.node_days:.3g} node-days"),
        write_s=_measure(stalls, "median checkpoint stall (blocking_s, else save_s)"),
        restart_s=_measure(list(fs.resume_s), "median failure -> first step of the relaunch"),
        interval_s=_measure(gaps, "median training time between checkpoints"),
        failures=fs.failures, node_s=fs.node_s, training_s=fs.training_s,
    )


def _measure(values: Sequence[float], source: str) -> Measurement | None:
    value = median(values)
    return None if value is None else Measurement(value, len(values), source)


__all__ = [
    "FALLBACK_INTERVALS_S",
    "CheckpointAdvice",
    "IntervalRow",
    "MeasuredInputs",
    "Measurement",
    "ModelInputs",
    "advise",
    "expected_ettr",
    "measured_inputs",
    "optimal_checkpoint_interval",
    "stop_check_break_even",
    "young_daly_interval",
]
