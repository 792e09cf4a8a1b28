"""Peer groups: which nodes run the same workload right now.

Synchronous data-parallel training makes the nodes of one job move together (the same step-time
dips, the same checkpoint pauses), so healthy peers look alike and a sick node stands out. Idle
nodes form their own group; nodes of another job are not peers. With a job label the groups are
given; without one they are inferred from activity:

1. a node is busy when its activity is above `idle_fraction` of the cluster's busy level;
2. two busy nodes are peers when their recent activity profiles correlate above `peer_corr`,
   or when both profiles are flat at a similar level (steady jobs have no dips to correlate);
3. groups are the connected components of that peer graph.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from trainguard.telemetry.frame import FloatArray

__all__ = ["IDLE_GROUP", "infer_groups"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

IDLE_GROUP = 0
"""Group label of idle nodes; -1 means unknown (no activity data)."""


def infer_groups(history: FloatArray, busy: BoolArray, level: float, corr_min: float,
                 jobs: list[str] | None = None) -> IntArray:
    """Group label per node from activity `history[node, block]` (last column = now).

    `level` is the cluster's busy activity level (for flatness and level tolerance). With `jobs`
    (one job id per node, "" for none) busy nodes are grouped by job id instead.
    """
    n = history.shape[0]
    labels = np.full(n, -1, dtype=np.int64)
    now = history[:, -1]
    known = ~np.isnan(now)
    labels[known & ~busy] = IDLE_GROUP
    idx = np.flatnonzero(known & busy)
    if idx.size == 0:
        return labels
    if jobs is not None:
        ids: dict[str, int] = {}
        for i in idx.tolist():
            key = jobs[i] or f"__node{i}"
            labels[i] = ids.setdefault(key, len(ids) + 1)
        return labels
    h = history[idx]
    valid = ~np.isnan(h)
    cnt = np.maximum(valid.sum(axis=1, keepdims=True), 1)
    mean = np.where(valid, h, 0.0).sum(axis=1, keepdims=True) / cnt
    c = np.where(valid, h - mean, 0.0)
    norm = np.sqrt((c * c).sum(axis=1, keepdims=True))
    std = norm / np.sqrt(cnt)
    flat = (std[:, 0] < 0.03 * level) | (valid.sum(axis=1) < 3)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = np.where(norm > 0, c / norm, 0.0)
    corr = u @ u.T
    m = mean[:, 0]
    close = np.abs(m[:, None] - m[None, :]) < 0.1 * level
    adj = ((corr > corr_min) & ~flat[:, None] & ~flat[None, :]) | (
        flat[:, None] & flat[None, :] & close)
    np.fill_diagonal(adj, True)
    comp = _components(adj)
    labels[idx] = comp + 1
    return labels


def _components(adj: BoolArray) -> IntArray:
    """Connected components of a symmetric boolean adjacency matrix (labels 0..k-1)."""
    n = adj.shape[0]
    lab = np.arange(n, dtype=np.int64)
    big = np.int64(n)
    for _ in range(n):
        nxt = np.where(adj, lab[None, :], big).min(axis=1)
        nxt = np.minimum(nxt, lab)
        if np.array_equal(nxt, lab):
            break
        lab = nxt
    _, dense = np.unique(lab, return_inverse=True)
    return dense.astype(np.int64)
