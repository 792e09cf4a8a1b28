"""Dense layout of a telemetry chunk for vectorised scoring.

GPU metrics become `gpu[metric, node, gpu_slot, time]`, node metrics `node[metric, node, time]`.
The registry of metric names, nodes and GPU slots only grows, so state arrays kept by the
detector stay aligned across chunks (a node or metric appearing later gets a new index).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from trainguard.telemetry.frame import (
    Entity,
    FloatArray,
    IntArray,
    MetricKind,
    MetricSeries,
    Telemetry,
)

__all__ = ["DenseChunk", "Layout"]


@dataclass(frozen=True, eq=False)
class DenseChunk:
    """Raw values of one chunk: `gpu[m, n, g, t]`, `node[m, n, t]` on the grid `times`."""

    times: IntArray
    gpu: FloatArray
    node: FloatArray


@dataclass
class Layout:
    """Indexes for metrics, nodes and per-node GPU slots (mutable: grows as data arrives)."""

    gpu_metrics: list[str] = field(default_factory=list)
    node_metrics: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    gpu_labels: list[list[str]] = field(default_factory=list)
    kinds: dict[str, MetricKind] = field(default_factory=dict)
    _gm: dict[str, int] = field(default_factory=dict)
    _nm: dict[str, int] = field(default_factory=dict)
    _nodes: dict[str, int] = field(default_factory=dict)
    _slots: list[dict[str, int]] = field(default_factory=list)
    _index: dict[str, tuple[tuple[Entity, ...], IndexArrays]] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(gpu metrics, node metrics, nodes, GPU slots per node)."""
        g = max((len(s) for s in self._slots), default=0)
        return len(self.gpu_metrics), len(self.node_metrics), len(self.nodes), max(g, 1)

    def node_index(self, node: str) -> int:
        i = self._nodes.get(node)
        if i is None:
            i = self._nodes[node] = len(self.nodes)
            self.nodes.append(node)
            self._slots.append({})
            self.gpu_labels.append([])
        return i

    def slot(self, node_i: int, gpu: str) -> int:
        slots = self._slots[node_i]
        j = slots.get(gpu)
        if j is None:
            j = slots[gpu] = len(slots)
            self.gpu_labels[node_i].append(gpu)
        return j

    def gpu_label(self, node_i: int, slot: int) -> str | None:
        labels = self.gpu_labels[node_i]
        return labels[slot] if slot < len(labels) else None

    def _cached(self, m: MetricSeries) -> IndexArrays | None:
        hit = self._index.get(m.name)
        if hit is not None and (hit[0] is m.entities or hit[0] == m.entities):
            return hit[1]
        return None

    def register(self, tel: Telemetry) -> None:
        """Add every metric, node and GPU of `tel` (stable order: sorted within a chunk)."""
        for m in sorted(tel.metrics, key=lambda s: s.name):
            if self._cached(m) is not None:
                continue
            per_gpu = m.per_gpu
            table, names = ((self._gm, self.gpu_metrics) if per_gpu
                            else (self._nm, self.node_metrics))
            if m.name not in table:
                table[m.name] = len(names)
                names.append(m.name)
                self.kinds[m.name] = m.kind
            for e in sorted(m.entities, key=_entity_key):
                ni = self.node_index(e.node)
                if per_gpu and e.gpu is not None:
                    self.slot(ni, e.gpu)

    def densify(self, tel: Telemetry) -> DenseChunk:
        """Register `tel`, then scatter its values into dense NaN-filled tensors."""
        return self.densify_counted(tel)[0]

    def densify_counted(self, tel: Telemetry) -> tuple[DenseChunk, int]:
        """`densify`, and `tel.n_samples` (counted on the dense tensors when every series
        has a cell of its own, which is one pass instead of one per metric)."""
        self.register(tel)
        mg, mn, n, g = self.shape
        t = tel.times.shape[0]
        placed = [(m, self._cached(m) or self._build_index(m)) for m in tel.metrics]
        # Only the rows that no series covers whole start as missing (NaN): the others are
        # written over in full below.
        whole_g = np.zeros(mg, dtype=bool)
        whole_n = np.zeros(mn, dtype=bool)
        for m, idx in placed:
            if idx.full == (n, g):
                if idx.slots.size:
                    whole_g[self._gm[m.name]] = True
                else:
                    whole_n[self._nm[m.name]] = True
        gpu = np.empty((mg, n, g, t))
        node = np.empty((mn, n, t))
        gpu[~whole_g] = np.nan
        node[~whole_n] = np.nan
        one_cell_each = True
        for m, idx in placed:
            if idx.full == (n, g):  # rows already in layout order: one block copy
                if idx.slots.size:
                    gpu[self._gm[m.name]].reshape(n * g, t)[...] = m.values
                else:
                    node[self._nm[m.name]] = m.values
                continue
            one_cell_each = False
            if m.per_gpu:
                gpu[self._gm[m.name], idx.nodes, idx.slots, :] = m.values[idx.keep]
            else:
                node[self._nm[m.name], idx.nodes, :] = m.values
        if one_cell_each and len({m.name for m in tel.metrics}) == len(tel.metrics):
            samples = int(gpu.size - np.count_nonzero(np.isnan(gpu))
                          + node.size - np.count_nonzero(np.isnan(node)))
        else:
            samples = tel.n_samples
        return DenseChunk(tel.times, gpu, node), samples

    def _build_index(self, m: MetricSeries) -> IndexArrays:
        """Where each row of `m` goes; cached per metric while its entities stay the same (a
        live feed sends the same series every scrape)."""
        if m.per_gpu:
            keep = np.array([i for i, e in enumerate(m.entities) if e.gpu is not None],
                            dtype=np.intp)
            ni = np.array([self._nodes[m.entities[i].node] for i in keep.tolist()], dtype=np.intp)
            si = np.array([self._slots[n][m.entities[i].gpu or ""]
                           for n, i in zip(ni.tolist(), keep.tolist(), strict=True)],
                          dtype=np.intp)
        else:
            keep = np.arange(len(m.entities), dtype=np.intp)
            ni = np.array([self._nodes[e.node] for e in m.entities], dtype=np.intp)
            si = np.zeros(0, dtype=np.intp)
        _, _, n, g = self.shape
        rows = len(m.entities)
        in_order = keep.size == rows and bool((keep == np.arange(rows)).all()) and (
            rows == n * g and bool((ni == np.repeat(np.arange(n), g)).all())
            and bool((si == np.tile(np.arange(g), n)).all()) if m.per_gpu
            else rows == n and bool((ni == np.arange(n)).all()))
        idx = IndexArrays(keep, ni, si, (n, g) if in_order else (-1, -1))
        self._index[m.name] = (m.entities, idx)
        return idx


@dataclass(frozen=True, eq=False)
class IndexArrays:
    """Row selection and (node, slot) targets of one metric's rows in the dense tensors."""

    keep: npt.NDArray[np.intp]
    nodes: npt.NDArray[np.intp]
    slots: npt.NDArray[np.intp]
    full: tuple[int, int] = (-1, -1)
    """(nodes, GPU slots) of the layout in which these rows are every cell in order (a plain
    block copy places them), else (-1, -1)."""


def _entity_key(e: Entity) -> tuple[str, int, str]:
    if e.gpu is None:
        return (e.node, -1, "")
    return (e.node, int(e.gpu) if e.gpu.isdigit() else 1 << 30, e.gpu)
