"""Checks before anything is launched, and the nodes a chain may start on.

- :func:`check_job`: every check that can fail before a process starts (one clear error each),
  and the run directory laid out (each node's folder and watched kernel log);
- :func:`usable_nodes`: the job's nodes and spares minus those excluded (by the store, until an
  operator releases them, or by the scheduler), each replaced in place by a spare.
"""

from __future__ import annotations

import os
import shutil

from trainguard.errors import ConfigError, LaunchError
from trainguard.recover.backend import Backend, Capabilities
from trainguard.recover.spec import JobSpec
from trainguard.store import Store


def check_job(spec: JobSpec, backend: Backend, caps: Capabilities, *,
              overwrite: bool = False) -> None:
    """Raise :class:`ConfigError` / :class:`LaunchError` (one line) for a job that cannot run."""
    backend.check(spec.command, spec.nodes)
    cap = backend.capacity()
    if cap is not None and spec.nproc_per_node > cap:
        raise ConfigError(
            f"--nproc-per-node {spec.nproc_per_node} is more than a {backend.name} node "
            f"holds ({cap}); lower it or set --slots-per-node")
    for fault in spec.faults:
        if fault.rank is not None and fault.rank >= spec.world_size:
            raise ConfigError(f"fault {fault} names rank {fault.rank}, but the job has "
                              f"{spec.world_size} rank(s)")
    _clear_run_dir(spec, overwrite)
    if not caps.reads_kernel_logs and "{node}" not in spec.kernel_log:
        raise ConfigError("the kernel-log template must contain {node} when every node's "
                          "log is read on this machine")
    for node in (*spec.nodes, *spec.spares):
        (spec.run_dir / "nodes" / node).mkdir(parents=True, exist_ok=True)
        if caps.reads_kernel_logs:
            continue  # the node's own agent reads it, on the node
        klog = spec.kernel_log_path(node)
        try:
            klog.parent.mkdir(parents=True, exist_ok=True)
            klog.touch(exist_ok=True)
        except OSError as exc:
            raise LaunchError(f"cannot create the watched kernel log {klog}: "
                              f"{exc.strerror or exc}") from exc


def _clear_run_dir(spec: JobSpec, overwrite: bool) -> None:
    """A writable run dir without an earlier run's records (removed with ``overwrite``)."""
    run_dir = spec.run_dir
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".trainguard-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise LaunchError(f"run dir {run_dir} is not writable: {exc.strerror or exc}") from exc
    previous = [p for p in (run_dir / "summary.json", run_dir / "attempts") if p.exists()]
    if previous and not overwrite:
        raise ConfigError(f"run dir {run_dir} already holds a run ({previous[0].name}); "
                          "choose a new --run-dir or pass --overwrite")
    for p in previous:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def usable_nodes(spec: JobSpec, backend: Backend, store: Store | None
                 ) -> tuple[tuple[str, ...], list[str], list[str]]:
    """``(nodes, spares, notes)``: each excluded node replaced in place by a spare, with a note
    per change; one clear error if the job cannot be placed."""
    active: dict[str, str] = {}
    if store is not None:
        for record in store.exclusions(active_only=True):
            active.setdefault(record.node, record.reason)
    for node, reason in backend.unavailable((*spec.nodes, *spec.spares)).items():
        active.setdefault(node, reason)
    spares = [s for s in spec.spares if s not in active]
    nodes: list[str] = []
    notes = []
    for node in spec.nodes:
        why = active.get(node)
        if why is None:
            nodes.append(node)
            continue
        sub = spares.pop(0) if spares else None
        notes.append(f"{node} is excluded ({why}); "
                     + (f"using spare {sub}" if sub else "no spare to replace it"))
        if sub is not None:
            nodes.append(sub)
    notes += [f"spare {s} is excluded ({active[s]}); not used"
              for s in spec.spares if s in active]
    required = spec.min_nodes if spec.min_nodes is not None else len(spec.nodes)
    if len(nodes) < required:
        names = ", ".join(n for n in (*spec.nodes, *spec.spares) if n in active)
        raise ConfigError(
            f"excluded node(s) {names} leave {len(nodes)} of the {required} node(s) the job "
            f"needs; after repair: trainguard nodes release NODE (or add --spares)")
    return tuple(nodes), spares, notes


__all__ = ["check_job", "usable_nodes"]
