"""When a GPU's activity drop is explained: an application error, or a node still settling.

The stall and jitter rules (`precursors.py`) look for a GPU that behaves unlike its siblings.
Two ordinary things do that too:

* **Application XIDs.** When a job's processes crash or restart (XID 13, 31, 43, 45... on some
  or all of a node's GPUs, often again and again: a storm), the GPUs that crashed idle for a
  moment while the others do not. A drop in activity on a node that has begun showing an
  application XID within the last `precursor_app_xid_quiet_s` is the application's, not a
  precursor of a hardware failure. Only the onset of an XID counts (a gauge that keeps showing
  the last XID does not explain later drops).
* **Settling.** For `settle_s` after a node starts work (a job starts or restarts after the
  node sat idle, below `idle_fraction` of the cluster's busy level, for at least
  `settle_idle_s`), clocks, power and utilisation are ragged on every GPU in turn. A shorter
  pause inside a job (a checkpoint, an evaluation, a data-loader stall) is not a start: a job
  that checkpoints every 20 minutes would otherwise be settling most of the time.

`ExplainedActivity.scan` gives, per node and block, whether the stall/jitter rules may count it.
State is carried across chunks; results do not depend on how the input was chunked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainguard.detect.config import DetectorConfig
from trainguard.detect.knowledge import is_hardware_xid, is_xid_metric
from trainguard.detect.layout import DenseChunk, Layout

__all__ = ["ExplainedActivity", "application_xid_mask"]


def application_xid_mask(values: np.ndarray) -> np.ndarray:
    """True where an XID gauge shows an application (not hardware) XID."""
    v = np.nan_to_num(values, nan=0.0).astype(np.int64)
    out = np.zeros(v.shape, dtype=bool)
    for x in np.unique(v).tolist():
        if x > 0 and not is_hardware_xid(int(x)):
            out |= v == x
    return out


@dataclass
class ExplainedActivity:
    """Per node: blocks since an application XID began, working blocks since it last started,
    idle blocks in a row."""

    cfg: DetectorConfig
    since: np.ndarray = field(default_factory=lambda: np.zeros(0))
    busy_run: np.ndarray = field(default_factory=lambda: np.zeros(0))
    idle_run: np.ndarray = field(default_factory=lambda: np.zeros(0))
    showing: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))

    def _grow(self, n: int, g: int) -> None:
        if self.since.shape != (n,):
            since = np.full(n, np.inf)
            run, idle = np.zeros(n), np.zeros(n)
            m = min(n, self.since.size)
            since[:m], run[:m], idle[:m] = self.since[:m], self.busy_run[:m], self.idle_run[:m]
            self.since, self.busy_run, self.idle_run = since, run, idle
        if self.showing.shape != (n, g):
            showing = np.zeros((n, g), dtype=bool)
            a, b = min(n, self.showing.shape[0]), min(g, self.showing.shape[1])
            showing[:a, :b] = self.showing[:a, :b]
            self.showing = showing

    def scan(self, d: DenseChunk, lay: Layout, s: int, nb: int, active: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
        """Given `active` ([node, block]: the node is not idle), ([node, block] True where the
        node's activity may count as a precursor,
        [node, block] True where an application XID began on the node within the quiet
        window: its activity is the application's)."""
        n = len(lay.nodes)
        xi = next((i for i, m in enumerate(lay.gpu_metrics) if is_xid_metric(m)), None)
        g = d.gpu[xi].shape[1] if xi is not None else 1
        self._grow(n, g)
        app_b = np.zeros((n, g, nb), dtype=bool)
        if xi is not None:
            app = application_xid_mask(d.gpu[xi][..., : nb * s])
            app_b = np.asarray(app.reshape(n, g, nb, s).any(axis=-1), dtype=bool)
        quiet = self.cfg.precursor_app_xid_quiet_s / self.cfg.block_s
        settle = self.cfg.settle_s / self.cfg.block_s
        pause = self.cfg.settle_idle_s / self.cfg.block_s
        out = np.zeros((n, nb), dtype=bool)
        recent = np.zeros((n, nb), dtype=bool)
        for b in range(nb):
            onset = (app_b[..., b] & ~self.showing).any(axis=1)
            self.showing = app_b[..., b]
            self.since = np.where(onset, 0.0, self.since + 1)
            self.idle_run = np.where(active[:, b], 0.0, self.idle_run + 1)
            restart = self.idle_run >= pause
            self.busy_run = np.where(active[:, b], self.busy_run + 1,
                                     np.where(restart, 0.0, self.busy_run))
            recent[:, b] = self.since <= quiet
            out[:, b] = ~recent[:, b] & (self.busy_run > settle)
        return out, recent
