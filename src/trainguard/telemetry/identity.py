"""Which labels of a series name the node, the GPU and the job, and which make up the metric key.

Exporters spell identity differently: dcgm-exporter writes `Hostname`, `gpu`, `UUID`,
`device="nvidia3"`; node-exporter only has Prometheus' `instance="node07:9100"`; a cluster without
host names may have nothing but `instance="10.0.3.7:9400"` and `UUID`. `IdentityConfig` lists the
candidates in order of preference; `identify` applies them to one series:

    >>> ident = identify("node_cpu_seconds_total", {"instance": "n7:9100", "cpu": "0"})
    >>> ident.entity, render_key("node_cpu_seconds_total", ident.dims), ident.job
    (Entity(node='n7', gpu=None), 'node_cpu_seconds_total{cpu="0"}', None)

On Kubernetes, dcgm-exporter's `Hostname` is its own pod's name, not the node's: a node
candidate whose value equals the series' `pod` label is passed over, and `--node-label`
(`IdentityConfig.for_node_label`) names the label that does name the node (`kubernetes_node`,
`node`, ...), replacing the built-in order.

The builder additionally drops labels that never split an entity (see `builder.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from trainguard.errors import ConfigError
from trainguard.telemetry.frame import Entity

__all__ = ["Identified", "IdentityConfig", "identify", "missing_node_label_message",
           "parse_node_labels", "pod_node_warning", "render_key", "strip_port"]

Labels = tuple[tuple[str, str], ...]
_ValueRules = tuple[tuple[str, re.Pattern[str]], ...]


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """Label names that identify a series' node, GPU and job (first present wins)."""

    node_labels: tuple[str, ...] = ("kubernetes_node", "Hostname", "hostname", "node",
                                    "nodename", "instance")
    """Candidates for the node name; `instance` loses its `:port` (also `[::1]:9100`); a value
    equal to the series' `pod` label (an exporter pod's host name) is passed over."""
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

    def for_node_label(self, label: str | Sequence[str] | None) -> IdentityConfig:
        """This config with `label` alone naming the node (None or empty: unchanged). Several
        labels (a sequence, or names separated by commas) are tried in order, for a cluster
        whose exporters name the node differently. The built-in candidates they replace become
        ignored labels, so a pod's `Hostname` does not split the metric key.

            >>> IdentityConfig().for_node_label("kubernetes_node").node_labels
            ('kubernetes_node',)
            >>> IdentityConfig().for_node_label(["node_name", "instance"]).node_labels
            ('node_name', 'instance')
        """
        labels = parse_node_labels(label)
        if not labels:
            return self
        dropped = tuple(n for n in self.node_labels
                        if n not in labels and n not in self.ignore_labels)
        return replace(self, node_labels=labels, ignore_labels=(*self.ignore_labels, *dropped))


_LABEL_NAME = re.compile(r'[^\s"={},]+')
"""Prometheus' `[a-zA-Z_][a-zA-Z0-9_]*`, loosened for Prometheus 3's UTF-8 names."""


def parse_node_labels(value: str | Sequence[str] | None, what: str = "--node-label",
                      ) -> tuple[str, ...]:
    """`"a,b"`, `["a", "b,c"]` -> ("a", "b", "c"); each must be a Prometheus label name."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"{what} must be label names, got {item!r}")
        for name in (part.strip() for part in item.split(",")):
            if not _LABEL_NAME.fullmatch(name):
                raise ConfigError(f"{what} must name a label, got {name!r}")
            if name not in out:
                out.append(name)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Identified:
    """One series, split into who reported it (entity, job) and its dimension labels."""

    entity: Entity | None
    """None when no node label is present (the series cannot be placed)."""
    dims: Labels
    """The remaining labels, sorted by name: candidates for the metric key."""
    job: str | None = None
    node_is_pod: bool = False
    """The node name equals the series' `pod` label: on Kubernetes an exporter pod's host name,
    not the node (nothing else named the node)."""


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


def _node_name(labels: Mapping[str, str], candidates: tuple[str, ...]) -> tuple[str | None, bool]:
    """The first candidate present, passing over one that only repeats the `pod` label (an
    exporter pod's host name) while a later candidate is present; and whether the name is
    that pod's."""
    pod = labels.get("pod")
    fallback = None
    for label in candidates:
        value = labels.get(label)
        if not value:
            continue
        value = strip_port(value) if label == "instance" else value
        if value != pod:
            return value, False
        fallback = fallback or value
    return fallback, fallback is not None


def identify(name: str, labels: Mapping[str, str], cfg: IdentityConfig | None = None) -> Identified:
    """Split one series' labels into entity, job and dimension labels (empty values = absent)."""
    cfg = cfg or IdentityConfig()
    skip, value_rules = _compiled(cfg)
    node, node_is_pod = _node_name(labels, cfg.node_labels)
    gpu = next((labels[g] for g in cfg.gpu_labels if labels.get(g)), None)
    job = next((labels[j] for j in cfg.job_labels if labels.get(j)), None)
    dims = sorted(
        (k, v) for k, v in labels.items()
        if v and k not in skip and not any(k == lb and rx.fullmatch(v) for lb, rx in value_rules))
    return Identified(Entity(node, gpu) if node else None, tuple(dims), job, node_is_pod)


def missing_node_label_message(cfg: IdentityConfig, present: Iterable[str],
                               n_series: int) -> str:
    """Why no series could be placed on a node, naming the labels the series do carry."""
    names = sorted(set(present))
    shown = ", ".join(names[:40]) + (f" (+{len(names) - 40} more)" if len(names) > 40 else "")
    what = (f"the node label {cfg.node_labels[0]}" if len(cfg.node_labels) == 1 else
            f"a node label (looked for {', '.join(cfg.node_labels)})")
    return (f"no series carries {what}; the {n_series} series read carry: "
            f"{shown or 'no labels'}. Name the label that holds the node with --node-label NAME")


def pod_node_warning(cfg: IdentityConfig, nodes: Sequence[str]) -> str:
    """The nodes named after the series' own `pod` label: on Kubernetes, exporter pods."""
    shown = ", ".join(nodes[:3]) + (", ..." if len(nodes) > 3 else "")
    return (f"{len(nodes)} node name(s) equal their series' pod label ({shown}): on "
            "Kubernetes an exporter pod's Hostname names the pod, not the node, and changes "
            "when the pod "
            f"restarts; name the node's label with --node-label NAME (looked for "
            f"{', '.join(cfg.node_labels)})")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_key(name: str, labels: Iterable[tuple[str, str]]) -> str:
    """`name{a="x",b="y"}` in the given label order; the bare name when there are no labels."""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return f"{name}{{{inner}}}" if inner else name
