"""The size of a cluster (nodes, GPUs per node), and whether a calibration was tuned on one of
the same size.

A calibration (`trainguard tune`) states false alarms per day per ``per_nodes`` nodes, measured
on the cluster it was tuned on. A cluster of another size raises them in proportion to its node
count, and its peer comparisons differ (fewer peers, other GPUs per node): the consumers of a
calibration (`detect`, `backtest`, `watch`) say so once, on stderr.

    >>> from trainguard.detect.calibration import Calibration
    >>> cal = Calibration(64, 0.3, 16, (0.0, 1.0), (1.0, 2.0), (), gpus_per_node=8)
    >>> size_note(cal, ClusterSize(16, 8)) is None
    True
    >>> size_note(cal, ClusterSize(6, 2))[:60]
    'the calibration was tuned on 16 nodes x 8 GPUs, this cluster'
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.detect.calibration import Calibration
from trainguard.telemetry.frame import Telemetry

__all__ = ["ClusterSize", "cluster_size", "size_note"]


@dataclass(frozen=True, slots=True)
class ClusterSize:
    nodes: int
    gpus_per_node: int | None
    """The most GPUs any node reported (None: no per-GPU series)."""

    def __str__(self) -> str:
        gpus = "" if self.gpus_per_node is None else f" x {self.gpus_per_node} GPUs"
        return f"{self.nodes} nodes{gpus}"


def cluster_size(tel: Telemetry) -> ClusterSize:
    """Nodes in `tel`, and the most distinct GPUs any of them reported."""
    gpus: dict[str, set[str]] = {}
    for m in tel.metrics:
        for e in m.entities:
            if e.gpu is not None:
                gpus.setdefault(e.node, set()).add(e.gpu)
    return ClusterSize(len(tel.nodes), max((len(g) for g in gpus.values()), default=None))


def size_note(cal: Calibration, size: ClusterSize) -> str | None:
    """One line when `size` differs from the cluster `cal` was tuned on (None when it does not,
    or when the difference cannot be told)."""
    tuned = ClusterSize(cal.n_nodes, cal.gpus_per_node)
    gpus_differ = (tuned.gpus_per_node is not None and size.gpus_per_node is not None
                   and tuned.gpus_per_node != size.gpus_per_node)
    if size.nodes == tuned.nodes and not gpus_differ:
        return None
    shown = tuned if tuned.gpus_per_node is not None and size.gpus_per_node is not None \
        else ClusterSize(tuned.nodes, None)
    here = size if shown.gpus_per_node is not None else ClusterSize(size.nodes, None)
    return (f"the calibration was tuned on {shown}, this cluster has {here}: its expected "
            f"false alarms/day are per {cal.per_nodes} nodes and FP/day scales with the node "
            f"count (here x{size.nodes / cal.per_nodes:.2g} of the figure); measured on a "
            "cluster of another size, they are a rough guide (trainguard tune on this cluster "
            "measures them)")
