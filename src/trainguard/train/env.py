"""What the supervisor tells a training process through its environment.

The supervisor (``trainguard run``) launches every rank with::

    TRAINGUARD_EVENTS          this rank's JSON-lines event file (absent: unsupervised)
    TRAINGUARD_NODE            node name as the supervisor knows it
    TRAINGUARD_RUN_DIR         the run's directory
    TRAINGUARD_ATTEMPT         0-based launch number of the job
    TRAINGUARD_LAUNCH_TIME     unix time the supervisor started this process
    TRAINGUARD_INJECT          ';'-separated fault specs (trainguard.faultspec)
    TRAINGUARD_RESUME_MAX_STEP never resume from a checkpoint above this step
    TRAINGUARD_HEARTBEAT_S     minimum seconds between step records (default 0.5)
    RANK, LOCAL_RANK, WORLD_SIZE   as torchrun sets them
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainguard.errors import ConfigError
from trainguard.faultspec import FaultSpec, split_faults

__all__ = ["DEFAULT_HEARTBEAT_S", "TrainEnv"]

DEFAULT_HEARTBEAT_S = 0.5


def _int(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {text!r}") from None
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {value}")
    return value


def _float(environ: Mapping[str, str], name: str) -> float | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class TrainEnv:
    """The supervisor's settings for this process, parsed once.

    >>> env = TrainEnv.from_environ({"RANK": "1", "TRAINGUARD_INJECT": "nan:step=3"})
    >>> env.rank, env.supervised, [str(f) for f in env.faults]
    (1, False, ['nan:step=3'])
    """

    events_path: Path | None = None
    """TRAINGUARD_EVENTS: where this rank's records go; None = unsupervised, nothing written."""
    node: str | None = None
    """TRAINGUARD_NODE."""
    run_dir: Path | None = None
    """TRAINGUARD_RUN_DIR."""
    attempt: int = 0
    """TRAINGUARD_ATTEMPT (0-based)."""
    launch_time: float | None = None
    """TRAINGUARD_LAUNCH_TIME: unix time the supervisor launched this process."""
    rank: int | None = None
    """RANK; None when not set (records then carry ``"rank": null``)."""
    local_rank: int | None = None
    """LOCAL_RANK."""
    world_size: int | None = None
    """WORLD_SIZE."""
    faults: tuple[FaultSpec, ...] = ()
    """TRAINGUARD_INJECT, every kind (the SDK fires only its own)."""
    resume_max_step: int | None = None
    """TRAINGUARD_RESUME_MAX_STEP."""
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    """TRAINGUARD_HEARTBEAT_S."""

    @property
    def supervised(self) -> bool:
        """True when running under ``trainguard run`` (an event file is given)."""
        return self.events_path is not None

    @staticmethod
    def from_environ(environ: Mapping[str, str]) -> TrainEnv:
        """Parse the variables; `ConfigError` names the variable that is malformed."""
        events = environ.get("TRAINGUARD_EVENTS", "").strip()
        run_dir = environ.get("TRAINGUARD_RUN_DIR", "").strip()
        inject = environ.get("TRAINGUARD_INJECT", "")
        try:
            faults = split_faults(inject)
        except ConfigError as exc:
            raise ConfigError(f"TRAINGUARD_INJECT: {exc}") from None
        heartbeat = _float(environ, "TRAINGUARD_HEARTBEAT_S")
        world_size = _int(environ, "WORLD_SIZE")
        if world_size == 0:
            raise ConfigError("WORLD_SIZE must be >= 1, got 0")
        return TrainEnv(
            events_path=Path(events) if events else None,
            node=environ.get("TRAINGUARD_NODE", "").strip() or None,
            run_dir=Path(run_dir) if run_dir else None,
            attempt=_int(environ, "TRAINGUARD_ATTEMPT") or 0,
            launch_time=_float(environ, "TRAINGUARD_LAUNCH_TIME"),
            rank=_int(environ, "RANK"),
            local_rank=_int(environ, "LOCAL_RANK"),
            world_size=world_size,
            faults=faults,
            resume_max_step=_int(environ, "TRAINGUARD_RESUME_MAX_STEP"),
            heartbeat_s=DEFAULT_HEARTBEAT_S if heartbeat is None else heartbeat,
        )
