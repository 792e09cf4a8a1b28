"""Which labels of a series name the node, the GPU and the job, and which make up the metric key.

Exporters spell identity differently: dcgm-exporter writes `Hostname`, `gpu`, `UUID`,
`device="nvidia3"`; node-exporter only has Prometheus' `instance="node07:9100"`; a cluster without
host names may have nothing but `instance="10.0.3.7:9400"` and `UUID`. `IdentityConfig` lists the
candidates in order of preference; `identify` applies them to one series:

    >>> ident = identify("node_cpu_seconds_total", {"instance": "n7:9100", "cpu": "0"})
    >>> ident.entity, render_key("node_cpu_seconds_total", ident.dims), ident.job
    (Entity(node='n7', gpu=None), 'node_cpu_seconds_total{cpu="0"}', None)

The builder additionally drops labels that never split an entity (see `builder.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from trainguard.errors import ConfigError
from trainguard.telemetry.frame import Entity

__all__ = ["Identified", "IdentityConfig", "identify", "render_key", "strip_port"]

Labels = tuple[tuple[str, str], ...]
_ValueRules = tuple[tuple[str, re.Pattern[str]], ...]


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """Label names that identify a series' node, GPU and job (first present wins)."""

    node_labels: tuple[str, ...] = ("Hostname", "hostname", "node", "nodename", "instance")
    """Candidates for the node name; `instance` loses its `:port` (also `[::1]:9100`)."""
    gpu_labels: tuple[str, ...] = ("gpu", "UUID")
    """Candidates for the GPU (index preferred over UUID)."""
    job_labels: tuple[str, ...] = ("hpc_job", "job_id", "jobid", "slurm_job_id", "SLURM_JOB_ID")
    """Candidates for the batch job id (recorded in `Telemetry.jobs`, never part of the key)."""
    ignore_labels: tuple[str, ...] = (
        "job", "instance", "UUID", "pci_bus_id", "modelName", "DCGM_FI_DRIVER_VERSION",
        "namespace", "pod", "container", "__name__")
    """Labels never part of the metric key (node, GPU and job labels are added to these)."""
    ignore_values: tuple[tuple[str, str], ...] = (("device", r"nvidia\d+"),)
    """(label, regex): the label is ignored when its whole value matches (dcgm's device)."""

    def __post_init__(self) -> None:
        if not self.node_labels:
            raise ConfigError("telemetry.identity.node_labels must name at least one label")
        for field_name in ("node_labels", "gpu_labels", "job_labels", "ignore_labels"):
            value = getattr(self, field_name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ConfigError(
                    f"telemetry.identity.{field_name} must be a list of non-empty label names")
        for label, pattern in self.ignore_values:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    f"telemetry.identity.ignore_values: bad regex for {label!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Identified:
    """One series, split into who reported it (entity, job) and its dimension labels."""

    entity: Entity | None
    """None when no node label is present (the series cannot be placed)."""
    dims: Labels
    """The remaining labels, sorted by name: candidates for the metric key."""
    job: str | None = None


@lru_cache(maxsize=16)
def _compiled(cfg: IdentityConfig) -> tuple[frozenset[str], _ValueRules]:
    skip = frozenset((*cfg.ignore_labels, *cfg.node_labels, *cfg.gpu_labels, *cfg.job_labels))
    return skip, tuple((label, re.compile(pattern)) for label, pattern in cfg.ignore_values)


def strip_port(instance: str) -> str:
    """`host:9100` -> `host`, `[::1]:9100` -> `::1`; a bare IPv6 address stays as it is."""
    if instance.startswith("["):
        end = instance.find("]")
        return instance[1:end] if end > 0 else instance
    host, sep, port = instance.rpartition(":")
    if sep and port.isdigit() and host and ":" not in host:
        return host
    return instance


def identify(name: str, labels: Mapping[str, str], cfg: IdentityConfig | None = None) -> Identified:
    """Split one series' labels into entity, job and dimension labels (empty values = absent)."""
    cfg = cfg or IdentityConfig()
    skip, value_rules = _compiled(cfg)
    node = None
    for label in cfg.node_labels:
        value = labels.get(label)
        if value:
            node = strip_port(value) if label == "instance" else value
            break
    gpu = next((labels[g] for g in cfg.gpu_labels if labels.get(g)), None)
    job = next((labels[j] for j in cfg.job_labels if labels.get(j)), None)
    dims = sorted(
        (k, v) for k, v in labels.items()
        if v and k not in skip and not any(k == lb and rx.fullmatch(v) for lb, rx in value_rules))
    return Identified(Entity(node, gpu) if node else None, tuple(dims), job)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_key(name: str, labels: Iterable[tuple[str, str]]) -> str:
    """`name{a="x",b="y"}` in the given label order; the bare name when there are no labels."""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}}" if inner else name
