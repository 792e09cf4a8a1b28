"""When a measured rate, or a checkpoint interval derived from it, rests on enough data to show.

A failure rate per node-day from 2 failures in 72 node-seconds reads "2400 per node-day", and the
checkpoint interval the ETTR model derives from it is a fraction of a second: numbers that say
more about how short the history is than about the cluster. :func:`rate_support` and
:func:`interval_support` are the one policy the report and ``trainguard advise`` both apply: a
figure without support is shown as "too little data (...)" in the terminal and the HTML, while
the JSON keeps the raw figure next to the exposure and a ``supported`` flag.

Defaults (:class:`ExposurePolicy`) and why:

1. a rate per node-day needs at least 24 node-hours (one node-day) of exposure: below its own
   unit the rate is an extrapolation beyond what was observed; at one node-day and above, the
   count itself bounds the rate;
2. an interval derived from the failure rate (the MTBF) needs that rate to be supported, at least
   3 observed failures (with ``k`` Poisson failures the rate's relative error is about
   ``1/sqrt(k)``: 58 % at 3, 100 % at 1; the optimum interval goes as ``1/sqrt(rate)``, so its
   error is half that) and an observed training time of at least 5 times the interval (an
   interval longer than a fifth of the history was never exercised by it).

    >>> rate_support(failures=2, node_s=72.0).supported
    False
    >>> rate_support(failures=2, node_s=8 * 86400.0).supported
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.durations import format_duration
from trainguard.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ExposurePolicy:
    """How much data a measured rate or a derived interval needs (see the module docstring)."""

    min_node_s: float = 86400.0
    """Node-seconds of exposure a failure rate per node-day needs (default one node-day)."""
    min_failures: int = 3
    """Observed failures an interval derived from the failure rate needs."""
    min_intervals: float = 5.0
    """Observed training time, in multiples of the derived interval, that it needs."""

    def __post_init__(self) -> None:
        if not self.min_node_s >= 0:
            raise ConfigError(f"exposure.min_node_s must be >= 0, got {self.min_node_s}")
        if self.min_failures < 0:
            raise ConfigError(f"exposure.min_failures must be >= 0, got {self.min_failures}")
        if not self.min_intervals >= 0:
            raise ConfigError(f"exposure.min_intervals must be >= 0, got {self.min_intervals}")


DEFAULT_POLICY = ExposurePolicy()


@dataclass(frozen=True, slots=True)
class Support:
    """Whether a figure rests on enough data, and the data it rests on."""

    supported: bool
    failures: int
    node_s: float
    """Node-seconds of exposure (attempt wall time x nodes, summed)."""
    training_s: float
    """Wall seconds of the attempts (the job-level exposure)."""
    caveat: str | None
    """``too little data (...)`` when not supported, else None."""

    def to_dict(self) -> dict[str, object]:
        return {"supported": self.supported, "failures": self.failures,
                "exposure_node_s": self.node_s, "exposure_s": self.training_s,
                "caveat": self.caveat}


def rate_support(failures: int, node_s: float, training_s: float = 0.0,
                 policy: ExposurePolicy = DEFAULT_POLICY) -> Support:
    """Rule 1: a failure rate per node-day needs ``policy.min_node_s`` of node exposure."""
    if node_s >= policy.min_node_s and node_s > 0:
        return Support(True, failures, node_s, training_s, None)
    return Support(False, failures, node_s, training_s,
                   f"too little data ({format_duration(node_s)} of node time; a rate per "
                   f"node-day needs >= {format_duration(policy.min_node_s)})")


def interval_support(failures: int, node_s: float, training_s: float, interval_s: float,
                     policy: ExposurePolicy = DEFAULT_POLICY) -> Support:
    """Rule 2: an interval derived from the measured failure rate needs that rate supported, at
    least ``policy.min_failures`` failures and ``policy.min_intervals`` intervals of training."""
    rate = rate_support(failures, node_s, training_s, policy)
    if not rate.supported:
        return rate
    needed = policy.min_intervals * interval_s
    if failures >= policy.min_failures and training_s >= needed:
        return rate
    return Support(False, failures, node_s, training_s,
                   f"too little data ({failures} failure(s) in {format_duration(training_s)} "
                   f"of training; the interval needs >= {policy.min_failures} failures and "
                   f">= {policy.min_intervals:g} x the interval of training)")


__all__ = ["DEFAULT_POLICY", "ExposurePolicy", "Support", "interval_support", "rate_support"]
