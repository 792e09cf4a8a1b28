"""What one attempt runs where: the :class:`LaunchPlan` and every rank's environment.

The supervisor decides the plan; a backend (:mod:`trainguard.recover.backend`) decides how to
start it. :func:`build_plan` is pure: everything it needs (the master address, the launch time,
the process environment it completes) comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainguard.faultspec import SDK_KINDS, join_faults
from trainguard.recover.spec import JobSpec
from trainguard.snapshot.layout import HostDirs


@dataclass(frozen=True, slots=True)
class RankLaunch:
    """One process of an attempt."""

    rank: int
    local_rank: int
    node: str
    node_rank: int
    env: Mapping[str, str]
    """Variables added to the backend's base environment (torch.distributed + trainguard)."""
    output: Path
    """Where the rank's stdout and stderr go (appended)."""


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """Everything a backend needs to start one attempt."""

    attempt: int
    command: tuple[str, ...]
    nodes: tuple[str, ...]
    ranks: tuple[RankLaunch, ...]
    workdir: Path
    """Working directory of every rank."""
    watch_nodes: tuple[str, ...] = ()
    """Idle spares: no ranks, but their kernel logs are followed (backends with agents)."""
    kernel_logs: Mapping[str, str] = field(default_factory=dict)
    """Each node's kernel log (the ``--kernel-log`` template expanded), for backends whose
    agents read it on the node itself."""
    host_dirs: Mapping[str, str] = field(default_factory=dict)
    """Node -> the run's snapshot directory on that host (:class:`HostDirs.host`), for the
    nodes and the spares; empty when the memory tier and warm standbys are both off."""


@dataclass(frozen=True, slots=True)
class MemoryTier:
    """What the ranks of one attempt are told about the memory tier (design doc, "Environment
    given to each rank")."""

    root: Path
    """The snapshot root on every host."""
    every: str = "auto"
    """``TRAINGUARD_SNAPSHOT_EVERY``: ``auto`` or K; ``off``: no snapshot directory given."""
    warm: bool = True
    """Give each rank its host's ``warm/`` directory (standby interpreters)."""
    restore: Mapping[int, str] = field(default_factory=dict)
    """Rank -> ``TRAINGUARD_RESTORE`` JSON, when the coordinator chose a memory restore."""


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What one attempt's plan depends on beyond the job spec."""

    index: int
    nodes: tuple[str, ...]
    spares: tuple[str, ...]
    master_addr: str
    master_port: int
    run_id: str
    launch_time: float
    resume_max_step: int | None = None
    workdir: Path = field(default_factory=Path.cwd)
    memory: MemoryTier | None = None
    """The memory tier's variables; None: neither snapshots nor warm standbys."""


def rank_env(spec: JobSpec, inputs: PlanInputs, rank: int, local: int, node_rank: int,
             node: str, base_env: Mapping[str, str]) -> dict[str, str]:
    """The torch.distributed (torchrun's names) and trainguard variables of one rank.

    ``base_env``: the environment the ranks inherit; a variable set there is not overridden."""
    nproc = spec.nproc_per_node
    world = len(inputs.nodes) * nproc
    index = inputs.index
    env = {
        "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": str(node_rank),
        "NODE_RANK": str(node_rank), "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world), "GROUP_WORLD_SIZE": str(len(inputs.nodes)),
        "ROLE_NAME": "default", "MASTER_ADDR": inputs.master_addr,
        "MASTER_PORT": str(inputs.master_port),
        "TORCHELASTIC_RESTART_COUNT": str(index),
        "TORCHELASTIC_MAX_RESTARTS": str(spec.policy.max_retries),
        "TORCHELASTIC_RUN_ID": inputs.run_id,
        "TRAINGUARD_NODE": node, "TRAINGUARD_RUN_DIR": str(spec.run_dir),
        "TRAINGUARD_ATTEMPT": str(index),
        "TRAINGUARD_EVENTS": str(attempt_dir(spec, index) / node / f"rank{rank}.events.jsonl"),
        "TRAINGUARD_LAUNCH_TIME": repr(inputs.launch_time),
    }
    if "PYTHONUNBUFFERED" not in base_env:
        env["PYTHONUNBUFFERED"] = "1"  # output is progress: don't sit in a buffer
    if "OMP_NUM_THREADS" not in base_env and nproc > 1:
        env["OMP_NUM_THREADS"] = "1"  # as torchrun does
    sdk_faults = [f for f in spec.faults if f.kind in SDK_KINDS and f.applies_to(index, None)]
    if sdk_faults:
        env["TRAINGUARD_INJECT"] = join_faults(sdk_faults)
    if inputs.resume_max_step is not None:
        env["TRAINGUARD_RESUME_MAX_STEP"] = str(inputs.resume_max_step)
    env.update(memory_env(inputs.memory, inputs.run_id, node, rank))
    return env


def memory_env(memory: MemoryTier | None, run_id: str, node: str, rank: int) -> dict[str, str]:
    """The memory tier's variables of one rank: its host's snapshot directory and interval,
    the snapshot it restores (when one was chosen), its host's warm directory."""
    if memory is None:
        return {}
    dirs = HostDirs(memory.root, run_id, node)
    env: dict[str, str] = {}
    if memory.every != "off":
        env["TRAINGUARD_SNAPSHOT_DIR"] = str(dirs.host)
        env["TRAINGUARD_SNAPSHOT_EVERY"] = memory.every
        if rank in memory.restore:
            env["TRAINGUARD_RESTORE"] = memory.restore[rank]
    if memory.warm:
        env["TRAINGUARD_WARM_DIR"] = str(dirs.warm)
    return env


def attempt_dir(spec: JobSpec, index: int) -> Path:
    """Where attempt ``index`` keeps its rank output and SDK events (one folder per node)."""
    return spec.run_dir / "attempts" / str(index)


def build_plan(spec: JobSpec, inputs: PlanInputs, base_env: Mapping[str, str]) -> LaunchPlan:
    """Ranks in node order (``node_rank * nproc + local``); idle spares are watched."""
    nproc = spec.nproc_per_node
    ranks = []
    for node_rank, node in enumerate(inputs.nodes):
        for local in range(nproc):
            rank = node_rank * nproc + local
            env = rank_env(spec, inputs, rank, local, node_rank, node, base_env)
            output = attempt_dir(spec, inputs.index) / node / f"rank{rank}.log"
            ranks.append(RankLaunch(rank, local, node, node_rank, env, output))
    everyone = (*inputs.nodes, *inputs.spares)
    memory = inputs.memory
    host_dirs = {} if memory is None else {
        n: str(HostDirs(memory.root, inputs.run_id, n).host) for n in everyone}
    return LaunchPlan(
        inputs.index, spec.command, inputs.nodes, tuple(ranks), inputs.workdir,
        watch_nodes=inputs.spares,
        kernel_logs={n: str(spec.kernel_log_path(n)) for n in everyone}, host_dirs=host_dirs)


__all__ = ["LaunchPlan", "MemoryTier", "PlanInputs", "RankLaunch", "attempt_dir", "build_plan",
           "memory_env", "rank_env"]
