"""What every host probe shares: its parameters, its deadline, the figure catalogue, and the
small constructors of :class:`~trainguard.check.model.ProbeResult`.

The figure catalogue (:data:`FIGURES`) is the one list of the numbers probes report: the judge
validates operator floors against it, and probes build their figures from it so that a name,
its unit and its direction are written once.

A probe that finds a hard problem (a GPU with a row-remapping failure, a DCGM test that
failed) still returns ``Status.OK`` with its figures, and marks each problem with a fact named
:data:`HARD_FAIL_FACT` whose value says what is wrong. ``Status.ERROR`` stays for "the probe
could not measure" (a timeout, an NVML error); the judge turns both into FAIL findings, with
different reasons.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from trainguard.check.model import Figure, ProbeResult, Status
from trainguard.errors import ConfigError

PROBE_TIMEOUT_S = 30.0
"""The default limit of each probe on its host, in seconds: the one default of `check
--probe-timeout`, `run --check-time-limit` (pre-flight and stop-time checks), `nodes release
--verify --probe-timeout` and an agent asked without one."""

HARD_FAIL_FACT = "hard_fail"
"""The fact name by which a probe that ran marks a hard problem (its value: what is wrong)."""


@dataclass(frozen=True, slots=True)
class FigureSpec:
    """One entry of the figure catalogue."""

    unit: str
    higher_is_better: bool
    relative: bool
    """Compare this figure across hosts (throughputs); False for counts and readings."""
    about: str
    floorable: bool = True
    """Whether an operator may set a floor on it (not on a clock reading)."""


FIGURES: dict[str, FigureSpec] = {
    "gemm_gflops": FigureSpec("GFLOP/s", True, True, "float32 matmul, best of repeats"),
    "copy_gbps": FigureSpec("GB/s", True, True, "memory copy, bytes read + written"),
    "write_mbps": FigureSpec("MB/s", True, True, "checkpoint dir write with fsync"),
    "read_mbps": FigureSpec("MB/s", True, True, "checkpoint dir read-back, uncached"),
    "gpu_count": FigureSpec("GPUs", True, False, "GPUs NVML sees"),
    "gemm_tflops": FigureSpec("TFLOP/s", True, True, "bf16 GEMM, the slowest GPU"),
    "hbm_gbps": FigureSpec("GB/s", True, True, "device-to-device copy, the slowest GPU"),
    "h2d_gbps": FigureSpec("GB/s", True, True, "pinned host-to-device copy, the slowest GPU"),
    "d2h_gbps": FigureSpec("GB/s", True, True, "pinned device-to-host copy, the slowest GPU"),
    "dcgm_failed": FigureSpec("tests", False, False, "DCGM diagnostic tests that failed"),
    "clock": FigureSpec("s", True, False, "the host's wall clock (time.time())",
                        floorable=False),
}


def figure(name: str, value: float) -> Figure:
    """The figure ``name`` of the catalogue with ``value``."""
    spec = FIGURES[name]
    return Figure(name, float(value), spec.unit, spec.higher_is_better)


def is_relative(fig: Figure) -> bool:
    """Whether the judge compares this figure across hosts (unknown names: yes)."""
    spec = FIGURES.get(fig.name)
    return spec.relative if spec is not None else True


@dataclass(frozen=True, slots=True)
class ProbeParams:
    """What a host's agent passes to its probes.

        >>> ProbeParams("node3", checkpoint_dir=Path("/ckpt"), time_limit_s=20).host
        'node3'
    """

    host: str
    checkpoint_dir: Path | None = None
    """The directory the storage probe writes its temporary file in; None: no storage probe."""
    time_limit_s: float = PROBE_TIMEOUT_S
    """Each probe's limit; a probe that has not returned by then is reported as timed out."""
    expected_gpus: int | None = None
    """GPUs this host should have; fewer is a FAIL. None: not checked."""
    storage_bytes: int = 128 * 2**20
    """The storage probe's file size (bounded by a quarter of the free space)."""
    gemm_size: int = 2048
    """The cpu_gemm matrix side; fixed so hosts run the same work. 2048 makes one repeat
    tens of milliseconds, long against the scheduler's slices, so that a hog sharing the
    core shows as the fair share it leaves (about 0.5x), not as a lucky repeat."""
    copy_bytes: int = 128 * 2**20
    """The mem_bandwidth array size (bounded by an eighth of the available memory)."""
    require_ecc: bool = True
    """FAIL a GPU that supports ECC but has it off."""
    budget_fraction: float = 0.5
    """The most of ``time_limit_s`` a probe spends repeating its measurement."""
    repeat_budget_s: float = 1.0
    """Repeats past a probe's minimum stop after this long (per GPU for gpu_perf)."""

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("check.host must not be empty")
        if not 0 < self.time_limit_s < math.inf:
            raise ValueError("check.time_limit_s must be > 0 and finite")
        if self.expected_gpus is not None and self.expected_gpus < 0:
            raise ValueError("check.expected_gpus must be >= 0")
        if self.storage_bytes <= 0 or self.copy_bytes <= 0 or self.gemm_size <= 0:
            raise ValueError("check.storage_bytes, copy_bytes and gemm_size must be > 0")
        if not self.repeat_budget_s > 0:
            raise ValueError("check.repeat_budget_s must be > 0")
        if not 0 < self.budget_fraction <= 1:
            raise ValueError("check.budget_fraction must be in (0, 1]")


    def to_dict(self) -> dict[str, Any]:
        """Plain values for the agent wire (the path as a string)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["checkpoint_dir"] = None if self.checkpoint_dir is None else str(self.checkpoint_dir)
        return out

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ProbeParams:
        """The inverse of :meth:`to_dict`; ConfigError naming the key for a bad entry."""
        known = {f.name for f in fields(ProbeParams)}
        for key in d:
            if key not in known:
                raise ConfigError(f"check params: unknown key {key!r}")
        values = dict(d)
        if values.get("checkpoint_dir") is not None:
            values["checkpoint_dir"] = Path(str(values["checkpoint_dir"]))
        try:
            return ProbeParams(**values)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"check params: {exc}") from exc


class Deadline:
    """A point in time on an injectable monotonic clock.

        >>> d = Deadline(2.0, clock=lambda: 10.0)
        >>> d.remaining(), d.expired()
        (2.0, False)
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._end = clock() + seconds

    def remaining(self) -> float:
        return max(0.0, self._end - self._clock())

    def expired(self) -> bool:
        return self._clock() >= self._end


def measure_budget(params: ProbeParams) -> Deadline:
    """The deadline a probe's repeat loop stops at (the repeat budget, at most a share of its
    time limit)."""
    return Deadline(min(params.time_limit_s * params.budget_fraction, params.repeat_budget_s))


def skipped(check: str, params: ProbeParams, reason: str,
            facts: tuple[tuple[str, str], ...] = ()) -> ProbeResult:
    return ProbeResult(check, params.host, Status.SKIPPED, reason=reason, facts=facts)


def errored(check: str, params: ProbeParams, reason: str, duration_s: float = 0.0,
            facts: tuple[tuple[str, str], ...] = ()) -> ProbeResult:
    return ProbeResult(check, params.host, Status.ERROR, reason=reason, duration_s=duration_s,
                       facts=facts)


def describe(exc: BaseException) -> str:
    """An exception as one line for a probe's reason."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


__all__ = ["FIGURES", "HARD_FAIL_FACT", "PROBE_TIMEOUT_S", "Deadline", "FigureSpec",
           "ProbeParams", "describe", "errored", "figure", "is_relative", "measure_budget",
           "skipped"]
