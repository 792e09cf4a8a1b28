"""Where the planning answers' costs come from: the operator's value, else what trainguard
measured in the store's own runs (checkpoint saves, failure-to-training-again), else a stated
default. Each answer says which, so an assumed cost is never read as a measured one.

    >>> choose_cost(None, None, 60.0, "--save-s").source
    'assumed: no measurement in the store; give --save-s'
    >>> choose_cost(30.0, None, 60.0, "--save-s")
    Cost(seconds=30.0, source='given')
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.analytics.model import Measurement

DEFAULT_SAVE_S = 60.0
"""Assumed time one checkpoint save stops training, when neither given nor measured."""
DEFAULT_RESTART_S = 300.0
"""Assumed time from a failure to training again, when neither given nor measured."""


@dataclass(frozen=True, slots=True)
class Cost:
    """One cost of the planning model, in seconds, and where it came from."""

    seconds: float
    source: str

    def to_dict(self) -> dict[str, object]:
        return {"seconds": self.seconds, "source": self.source}


def choose_cost(given: float | None, measured: Measurement | None, default: float,
                option: str) -> Cost:
    """The operator's value, else the store's measurement, else ``default`` (said as such)."""
    if given is not None:
        return Cost(given, "given")
    if measured is not None and measured.value > 0:
        return Cost(measured.value, f"measured: {measured.source} ({measured.samples} samples)")
    return Cost(default, f"assumed: no measurement in the store; give {option}")


__all__ = ["DEFAULT_RESTART_S", "DEFAULT_SAVE_S", "Cost", "choose_cost"]
