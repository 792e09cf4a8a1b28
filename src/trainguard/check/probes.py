"""The host probes and how an agent runs them: the registry, the time limit, the clock.

    >>> results = run_probes(["cpu_gemm"], ProbeParams("node1", time_limit_s=20))
    >>> results[0].check, results[0].status.value
    ('cpu_gemm', 'ok')

Each probe is a function ``ProbeParams -> ProbeResult`` that never raises on purpose: what it
cannot do is SKIPPED with the reason, what goes wrong is ERROR. :func:`run_probes` adds the
outer guard: each probe runs in a worker thread, and when it has not returned within
``time_limit_s`` the result is ERROR "timed out after N s" and the next probe starts (the
worker cannot be killed; it is a daemon thread, and the probes check their own budget between
repeats so that they stop soon after). An exception that escapes a probe becomes ERROR too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from trainguard.check.model import ProbeResult, Status
from trainguard.check.probe_base import ProbeParams, describe, errored, figure
from trainguard.check.probes_cpu import cpu_gemm, mem_bandwidth
from trainguard.check.probes_dcgm import dcgm
from trainguard.check.probes_gpu import gpu_health
from trainguard.check.probes_gpu_perf import gpu_perf
from trainguard.check.probes_storage import storage
from trainguard.errors import ConfigError

log = logging.getLogger(__name__)
Probe = Callable[[ProbeParams], ProbeResult]


def clock(params: ProbeParams) -> ProbeResult:
    """The host's wall clock. The controller's offset measurement uses the agent's reply times
    over several samples (:mod:`trainguard.check.clocksync`), not this figure."""
    return ProbeResult("clock", params.host, Status.OK, figures=(figure("clock", time.time()),))


def clock_offset(t_send: float, t_host: float, t_recv: float) -> tuple[float, float]:
    """The host clock's offset from the controller's, NTP-style, and its uncertainty (seconds).

    The controller sent the request at ``t_send`` and had the reply at ``t_recv`` (its clock);
    the host read ``t_host`` somewhere in between, so the offset is ``t_host`` minus the
    midpoint, give or take half the round trip.

        >>> clock_offset(100.0, 105.5, 101.0)
        (5.0, 0.5)
    """
    if t_recv < t_send:
        raise ValueError(f"clock_offset: reply time {t_recv} is before send time {t_send}")
    return t_host - (t_send + t_recv) / 2.0, (t_recv - t_send) / 2.0


PROBES: dict[str, Probe] = {
    "cpu_gemm": cpu_gemm,
    "mem_bandwidth": mem_bandwidth,
    "storage": storage,
    "gpu": lambda params: gpu_health(params),
    "gpu_perf": lambda params: gpu_perf(params),
    "dcgm": lambda params: dcgm(params),
    "clock": clock,
}
"""Every probe by name (the name is also its results' ``check``)."""

DEFAULT_PROBES = ("cpu_gemm", "mem_bandwidth", "storage", "gpu", "gpu_perf", "dcgm")


def default_probes(params: ProbeParams) -> tuple[str, ...]:
    """The default set; storage only where a checkpoint dir is given."""
    return tuple(n for n in DEFAULT_PROBES if n != "storage" or params.checkpoint_dir is not None)


def check_names(names: Sequence[str], registry: Mapping[str, Probe] = PROBES) -> None:
    """ConfigError naming the first unknown probe name."""
    for name in names:
        if name not in registry:
            raise ConfigError(f"unknown check {name!r}; known: {', '.join(sorted(registry))}")


def run_one(name: str, probe: Probe, params: ProbeParams) -> ProbeResult:
    """``probe(params)`` in a worker thread, given up on after ``params.time_limit_s``."""
    box: list[ProbeResult] = []
    started = time.monotonic()

    def work() -> None:
        try:
            box.append(probe(params))
        except Exception as exc:  # a probe's bug must not take the agent down
            log.warning("probe %s failed on %s", name, params.host, exc_info=True)
            box.append(errored(name, params, describe(exc), time.monotonic() - started))

    worker = threading.Thread(target=work, name=f"probe-{name}", daemon=True)
    worker.start()
    worker.join(params.time_limit_s)
    if not box:
        return errored(name, params, f"timed out after {params.time_limit_s:g} s",
                       time.monotonic() - started)
    return box[0]


def run_probes(names: Sequence[str], params: ProbeParams,
               registry: Mapping[str, Probe] = PROBES) -> list[ProbeResult]:
    """Run the named probes one after another, each under ``params.time_limit_s``.

    Unknown names are a ConfigError before anything runs."""
    check_names(names, registry)
    return [run_one(name, registry[name], params) for name in names]


__all__ = ["DEFAULT_PROBES", "PROBES", "Probe", "check_names", "clock", "clock_offset",
           "default_probes", "run_one", "run_probes"]
