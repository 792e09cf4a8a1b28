"""What the supervisor tells a training process through its environment.

The supervisor (``trainguard run``) launches every rank with::

    TRAINGUARD_EVENTS          this rank's JSON-lines event file (absent: unsupervised);
                               ``{rank}`` and ``{restart}`` in it become RANK and
                               TORCHELASTIC_RESTART_COUNT (0 when unset), so one value serves
                               every rank and restart under torchrun
    TRAINGUARD_NODE            node name as the supervisor knows it
    TRAINGUARD_RUN_DIR         the run's directory
    TRAINGUARD_ATTEMPT         0-based launch number of the job
    TRAINGUARD_LAUNCH_TIME     unix time the supervisor started this process
    TRAINGUARD_INJECT          ';'-separated fault specs (trainguard.faultspec)
    TRAINGUARD_RESUME_MAX_STEP never resume from a checkpoint above this step
    TRAINGUARD_HEARTBEAT_S     minimum seconds between step records (default 0.5)
    TRAINGUARD_TRACE           ``0`` turns tracing off; a path: this rank's collective state
                               file (default: next to the events file, ``rankR.trace``)
    TRAINGUARD_TRACE_WINDOW_S  seconds per ``trace`` record (default 5)
    TRAINGUARD_STACKS          where the rank writes its Python stacks on SIGUSR2 (default:
                               next to the events file, ``rankR.stacks.txt``)
    RANK, LOCAL_RANK, WORLD_SIZE   as torchrun sets them
    TORCHELASTIC_RESTART_COUNT     as torchrun sets it (only for ``{restart}`` above)
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainguard.errors import ConfigError
from trainguard.faultspec import FaultSpec, split_faults
from trainguard.trace.runfiles import stacks_path as stacks_path_for
from trainguard.trace.runfiles import trace_path as trace_path_for

__all__ = ["DEFAULT_HEARTBEAT_S", "TrainEnv", "process_start_time", "start_time_from_stat"]

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


def _events_path(environ: Mapping[str, str]) -> Path | None:
    text = environ.get("TRAINGUARD_EVENTS", "").strip()
    if not text:
        return None
    if "{rank}" in text:
        text = text.replace("{rank}", str(_int(environ, "RANK") or 0))
    if "{restart}" in text:
        text = text.replace("{restart}", str(_int(environ, "TORCHELASTIC_RESTART_COUNT") or 0))
    return Path(text)


def start_time_from_stat(stat: str, clk_tck: int, since_boot: float, now: float) -> float:
    """Unix time a process started, from its ``/proc/<pid>/stat`` line.

    Field 22 (``starttime``) counts clock ticks since boot; ``since_boot`` is the boot clock
    read together with the unix time ``now``. The command name (field 2) may hold spaces and
    parentheses, so fields are counted from the last ``)``. `ValueError` on a malformed line.
    """
    _, paren, rest = stat.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 20 or clk_tck <= 0:
        raise ValueError("not a /proc/<pid>/stat line")
    return now - (since_boot - int(fields[19]) / clk_tck)


def process_start_time() -> float | None:
    """Unix time this process started (Linux ``/proc``), None where that cannot be read.

    The boot clock comes from ``CLOCK_BOOTTIME``, which counts what ``starttime`` counts to the
    tick; ``/proc/stat``'s ``btime`` (whole seconds) is only the fallback, as it can be up to
    a second off.
    """
    try:
        stat = Path("/proc/self/stat").read_text()
        clk_tck = os.sysconf("SC_CLK_TCK")
        now = time.time()
        try:
            since_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        except (AttributeError, OSError):
            with open("/proc/stat") as f:
                btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
            since_boot = now - btime
        return start_time_from_stat(stat, clk_tck, since_boot, now)
    except (OSError, ValueError, StopIteration, IndexError):
        return None


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
    trace: bool = True
    """False when TRAINGUARD_TRACE is 0/off/false/no."""
    trace_path: Path | None = None
    """The collective state file (supervised runs; None: none is written)."""
    trace_window_s: float = 5.0
    """TRAINGUARD_TRACE_WINDOW_S."""
    stacks_path: Path | None = None
    """TRAINGUARD_STACKS (supervised runs)."""

    @property
    def supervised(self) -> bool:
        """True when running under ``trainguard run`` (an event file is given)."""
        return self.events_path is not None

    @staticmethod
    def from_environ(environ: Mapping[str, str]) -> TrainEnv:
        """Parse the variables; `ConfigError` names the variable that is malformed."""
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
        events = _events_path(environ)
        trace_text = environ.get("TRAINGUARD_TRACE", "").strip()
        trace = trace_text.lower() not in ("0", "off", "false", "no")
        window = _float(environ, "TRAINGUARD_TRACE_WINDOW_S")
        if window is not None and window <= 0:
            raise ConfigError(f"TRAINGUARD_TRACE_WINDOW_S must be > 0, got {window}")
        stacks_text = environ.get("TRAINGUARD_STACKS", "").strip()
        trace_path = stacks_path = None
        if trace and trace_text and trace_text.lower() not in ("1", "on", "true", "yes"):
            trace_path = Path(trace_text)
        elif trace and events is not None:
            trace_path = trace_path_for(events)
        if stacks_text:
            stacks_path = Path(stacks_text)
        elif events is not None:
            stacks_path = stacks_path_for(events)
        return TrainEnv(
            events_path=events,
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
            trace=trace,
            trace_path=trace_path,
            trace_window_s=5.0 if window is None else window,
            stacks_path=stacks_path,
        )
