"""The launch backends, one line each: name, how to build it, what it can do, its help.

A new backend is a folder (``recover/<name>/``) plus one :class:`BackendEntry` in
:data:`BACKENDS`; the CLI's ``--backend`` choices, help and construction come from here and the
supervisor asks :func:`capabilities_of`, so neither changes.

    backend = create_backend("local", BackendOptions(job_name="gpt"))
    capabilities_of(backend).reads_kernel_logs   # False: this machine reads every node's log
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from trainguard.errors import ConfigError
from trainguard.recover.backend import Backend, Capabilities, DeclaresCapabilities
from trainguard.recover.local import LocalBackend

OptionValue = str | int | None


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What the user chose for the backend: the job's name and backend-specific options (CLI
    flags by their destination name; a backend reads the ones it knows)."""

    job_name: str = "job"
    """The job's name (Slurm names its jobs after it)."""
    options: Mapping[str, OptionValue] = field(default_factory=dict)
    """``slots_per_node``, ``slurm_mode``, ``partition``, ``time_limit``..., None when unset."""

    def text(self, key: str) -> str | None:
        value = self.options.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"backend option {key} must be text, got {value!r}")
        return value

    def integer(self, key: str) -> int | None:
        value = self.options.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"backend option {key} must be an integer, got {value!r}")
        return value


@dataclass(frozen=True, slots=True)
class BackendEntry:
    """One launch backend."""

    name: str
    factory: Callable[[BackendOptions], Backend]
    capabilities: Capabilities
    """What its backends can do (they also declare it themselves)."""
    help: str
    """One line for ``--backend``'s help."""
    default_nodes: Callable[[tuple[str, ...]], tuple[str, ...]] | None = None
    """The nodes when ``--nodes`` is empty (given the spares); None: --nodes is required."""


def _local(options: BackendOptions) -> Backend:
    return LocalBackend(slots_per_node=options.integer("slots_per_node"))


def _slurm(options: BackendOptions) -> Backend:
    from trainguard.recover.slurm.backend import SlurmBackend
    from trainguard.recover.slurm.commands import SlurmCommands
    from trainguard.recover.slurm.safety import job_name as safe_job_name

    mode = options.text("slurm_mode")
    chosen = mode or ("allocation" if os.environ.get("SLURM_JOB_ID") else "submit")
    return SlurmBackend(chosen, SlurmCommands(), partition=options.text("partition"),
                        job_name=safe_job_name(f"tg-{options.job_name}"),
                        time_limit=options.text("time_limit"))


def _allocation_nodes(spares: tuple[str, ...]) -> tuple[str, ...]:
    """The nodes of the surrounding Slurm allocation, minus the spares."""
    from trainguard.recover.slurm.hostlist import expand_hostlist

    nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
    if not nodelist:
        raise ConfigError("--nodes is empty and there is no allocation (SLURM_JOB_NODELIST): "
                          "name the nodes or run inside salloc/sbatch")
    return tuple(n for n in expand_hostlist(nodelist) if n not in spares)


SLURM_CAPABILITIES = Capabilities(can_signal_rank=True, has_local_pids=True,
                                  reads_kernel_logs=False)
"""The ranks' pid files are read, and their processes inspected, as this machine's (what the
slurm backend's own ``is_stopped`` does); kernel logs are read here."""

BACKENDS: tuple[BackendEntry, ...] = (
    BackendEntry("local", _local, LocalBackend.capabilities,
                 "virtual nodes on this machine"),
    BackendEntry("slurm", _slurm, SLURM_CAPABILITIES,
                 "srun steps in an allocation, or one sbatch job per attempt",
                 default_nodes=_allocation_nodes),
)
"""Every launch backend, one line each."""


def backend_names() -> tuple[str, ...]:
    return tuple(e.name for e in BACKENDS)


def find_entry(name: str) -> BackendEntry | None:
    return next((e for e in BACKENDS if e.name == name), None)


def get_entry(name: str) -> BackendEntry:
    """The entry of backend ``name``; :class:`ConfigError` naming the choices otherwise."""
    entry = find_entry(name)
    if entry is None:
        raise ConfigError(f"unknown backend {name!r}; choose one of: "
                          f"{', '.join(backend_names())}")
    return entry


def create_backend(name: str, options: BackendOptions | None = None) -> Backend:
    """A new backend ``name`` built from ``options``."""
    return get_entry(name).factory(options or BackendOptions())


def capabilities_of(backend: Backend) -> Capabilities:
    """What ``backend`` declares (``capabilities`` on its class), else what its registry entry
    declares, else the defaults (ranks on this machine, kernel logs read here)."""
    if isinstance(backend, DeclaresCapabilities):
        return backend.capabilities
    entry = find_entry(backend.name)
    return entry.capabilities if entry is not None else Capabilities()


def backends_help() -> str:
    """``--backend``'s help: each backend with its line."""
    return "Launch backend: " + "; ".join(f"{e.name} ({e.help})" for e in BACKENDS) + "."


__all__ = ["BACKENDS", "SLURM_CAPABILITIES", "BackendEntry", "BackendOptions", "backend_names",
           "backends_help", "capabilities_of", "create_backend", "find_entry", "get_entry"]
