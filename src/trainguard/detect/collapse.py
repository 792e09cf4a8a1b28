"""Early-warning rule 4 (`precursors.py`): a host that stopped feeding its GPUs.

A busy node whose interrupt rate, context switches or runnable processes fall below
`host_collapse_fraction` of both their own recent level and the other busy nodes', for
`host_collapse_blocks` blocks in a row, is a precursor. The level is learnt only from blocks that
are not low, so a collapse does not teach the node that it is usual.
"""

from __future__ import annotations

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.config import DetectorConfig
from trainguard.detect.numeric import block_means, previous_valid
from trainguard.detect.precursor_state import HostState, grow_host
from trainguard.telemetry.frame import FloatArray

__all__ = ["host_collapse"]

LEVEL_HALFLIFE_BLOCKS = 60.0
"""A node's own recent level: 2 h of 2-min blocks."""


def host_collapse(cfg: DetectorConfig, states: dict[str, HostState], name: str, x: FloatArray,
                  s: int, nb: int, counter: bool, busy: np.ndarray,
                  hits: dict[int, list[tuple[int, Signal]]]) -> None:
    """Rule 4 on one node series `x` [node, time] (a counter is read as its increases), whole
    blocks of `s` samples; `busy` [node, block]; appends its hits to `hits` by block and
    carries the series' state in `states[name]`."""
    n = x.shape[0]
    st = states.get(name)
    if st is None or st.level.shape != (n,):
        st = states[name] = grow_host(st, n)
    if counter:
        prev, st.prev = previous_valid(x, st.prev)
        with np.errstate(invalid="ignore"):
            v = np.where(x >= prev, x - prev, np.nan)
    else:
        v = x
    vb = block_means(v, s)                              # node, block
    alpha = 1.0 - 0.5 ** (1.0 / LEVEL_HALFLIFE_BLOCKS)
    f = cfg.host_collapse_fraction
    for b in range(nb):
        val = vb[:, b]
        ok = np.isfinite(val) & busy[:, b]
        peers = val[ok]
        if peers.size < cfg.min_peers:
            continue
        peer = float(np.median(peers))
        low = ok & (val < f * st.level) & (val < f * peer) & (st.level > 0)
        st.run = np.where(low, st.run + 1, np.where(ok, 0, st.run))
        warm_ok = st.level > 0
        for ni in np.flatnonzero((st.run == cfg.host_collapse_blocks) & warm_ok).tolist():
            hits.setdefault(b, []).append((ni, Signal(
                name, None, float(val[ni]),
                f"host collapse: {float(val[ni]):.3g} against its usual "
                f"{float(st.level[ni]):.3g} and the other busy nodes' {peer:.3g}")))
        learn = ok & ~low
        st.level = np.where(learn & (st.level == 0), val,
                            np.where(learn, st.level + alpha * (val - st.level), st.level))
