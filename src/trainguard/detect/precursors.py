"""Early-warning rules for the shapes that precede a hardware failure.

The fused node score (scoring.py) is built to ignore what is brief, job-wide or always there;
the precursors of a failing GPU are often exactly brief and intermittent. Three specific rules
look for them in the raw samples of each block, each against the series' own history and its
siblings, never against a fixed level:

1. **Recurring error counts**: an error counter (correctable ECC / SBE, remapped rows, PCIe
   replays, NVLink CRC, thermal violation time, InfiniBand symbol errors...) or a hardware
   throttle reason (HW slowdown, HW/SW thermal, power brake) that fires in at least
   `precursor_min_events` of the last `precursor_window_blocks` blocks, or in bursts, at least
   `precursor_burst_events` of the last `precursor_burst_window_blocks`, at least
   `precursor_background_ratio` times as often as that series did over its own history, and
   more than that history explains at Poisson confidence (`recurring.py`). A single blip, a
   GPU that ticks now and then, or one that always counts, does not.
2. **Jitter**: a GPU whose power or SM clock moves from sample to sample `jitter_ratio` times as
   much as its node's other GPUs do, for `jitter_blocks` blocks in a row, while the node is busy
   and that GPU was not like that before (its own long-run ratio is below half the bar). A job
   whose power oscillates moves every GPU alike. An SM clock holds still under load on a healthy
   GPU, so a clock that jitters in short episodes, in `jitter_blocks` of the last
   `precursor_window_blocks` blocks (each block's own ratio at the bar), is a precursor too.
   Not read: a clock in a block where its GPU reported the software power cap and no hardware
   reason (the governor moves it; `throttle.py`).
3. **Stalls**: a GPU whose activity falls below `stall_fraction` of its siblings' on a busy
   node (its lowest sample in a block against theirs: a stall of 30 s barely moves a 2-minute
   mean; the only one of them below `stall_fraction` of the node's best in that block; the siblings
   running through it, their lowest sample at least `STEADY_FRACTION` of their mean), in at
   least `stall_min_events` of the last `precursor_window_blocks` blocks, and recovers in
   between at least twice (a GPU that stalls again and again in a synchronous job;
   one that stays idle, or whose job ended, is not stalling), beyond its own usual rate.
4. **Host collapse**: a busy node whose interrupt rate, context switches or runnable processes
   fall below `host_collapse_fraction` of both their own recent level and the other nodes',
   for `host_collapse_blocks` blocks in a row (a host that stopped feeding its GPUs;
   `collapse.py`).

A jitter hit is one run of a gauge a job moves on its own, so it is watched first: it warns
only when the same GPU confirms it (another precursor hit within `precursor_confirm_s`, or
another of its series in the same block; `confirm.py`). A jitter that goes on is seen again
every `jitter_blocks`. The other rules already ask for recurrence within their window.

Each hit is a `Signal` for the block in which the rule completed, so an alert's onset is never
before the samples that carry its evidence. State is carried across chunks per series; results
do not depend on how the input was chunked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from trainguard.detect.alerts import Signal
from trainguard.detect.collapse import host_collapse
from trainguard.detect.config import DetectorConfig
from trainguard.detect.confirm import Errors, Hits, PrecursorConfirm
from trainguard.detect.explained import ExplainedActivity
from trainguard.detect.knowledge import (
    ACTIVITY_METRICS,
    is_hard_counter,
    is_wear_counter,
)
from trainguard.detect.layout import DenseChunk, Layout
from trainguard.detect.numeric import (
    block_means,
    block_minima,
    busy_level,
    learn,
    nanmedian_axis,
    peer_median,
    previous_valid,
)
from trainguard.detect.precursor_state import (
    LONG_HALFLIFE_BLOCKS,
    HostState,
    JitterState,
    RecurState,
    grow_jitter,
    learn_before,
    pad,
    popcount,
    recur_state,
)
from trainguard.detect.recurring import RecurringCounts
from trainguard.detect.throttle import cap_blocks, is_reasons
from trainguard.telemetry.frame import FloatArray

__all__ = ["PrecursorHits", "PrecursorRules"]

_ERROR_COUNTER = re.compile(
    r"SBE|CORRECTABLE_REMAPPED|PCIE_REPLAY|REPLAY_ERR|NVLINK.*(CRC|ERR)|CRC_ERR|ECC_CORR|"
    r"CORRECTED|RECOVERY_ERR|THERMAL_VIOLATION|SYMBOL_ERR|LINK_DOWN|RCV_ERR|PORT_XMIT_DISCARD",
    re.IGNORECASE)
_JITTER = re.compile(r"POWER_USAGE|SM_CLOCK", re.IGNORECASE)
_CLOCK = re.compile(r"SM_CLOCK", re.IGNORECASE)
_HOST = re.compile(r"node_intr|context_switches|procs_running", re.IGNORECASE)
SHORT_HALFLIFE_BLOCKS = 3.0
STEADY_FRACTION = 0.5
"""The stall rule reads a block only when the siblings' lowest activity sample is at least this
fraction of their mean: a whole node pausing (a checkpoint) leaves every GPU's lowest sample
near zero, while a job changing phase moves them less (a quarter down keeps the block)."""

PrecursorHits = Hits
"""Block index (in the chunk) -> (node index, evidence) completed in that block."""


def _base(name: str) -> str:
    return name.split("{", 1)[0]


def _power_cap(d: DenseChunk, lay: Layout, s: int, nb: int
               ) -> tuple[np.ndarray, np.ndarray] | None:
    """[node, gpu, block] twice: where a GPU reported the power cap, and where its clock moved
    with the power governor alone (`throttle.cap_blocks`, every reasons gauge read
    together); None without a reasons gauge."""
    gauges = [d.gpu[mi] for mi, name in enumerate(lay.gpu_metrics) if is_reasons(name)]
    return cap_blocks(gauges, s, nb) if gauges else None


def is_error_counter(name: str) -> bool:
    """A counter of correctable errors or reliability events (not an uncorrectable one)."""
    return bool(_ERROR_COUNTER.search(_base(name))) and not is_hard_counter(name)


@dataclass
class PrecursorRules:
    """Mutable per-series state of the early-warning rules (see the module docstring)."""

    cfg: DetectorConfig
    recurring: RecurringCounts = field(init=False)
    jitter: dict[str, JitterState] = field(default_factory=dict)
    host: dict[str, HostState] = field(default_factory=dict)
    stall: dict[str, RecurState] = field(default_factory=dict)
    stall_back: dict[str, np.ndarray] = field(default_factory=dict)
    """Per activity metric: blocks (bit mask) in which a stalled GPU came back."""
    level: float = float("nan")
    explained: ExplainedActivity = field(init=False)
    clock: float = 0.0
    """Blocks scanned so far (the trend test's time axis)."""
    confirm: PrecursorConfirm = field(init=False)
    """Jitter hits wait for a second look (`confirm.py`)."""

    def __post_init__(self) -> None:
        self.explained = ExplainedActivity(self.cfg)
        self.recurring = RecurringCounts(self.cfg)
        self.confirm = PrecursorConfirm(self.cfg)

    def scan(self, d: DenseChunk, lay: Layout, cumulative: np.ndarray, s: int,
             repairs: PrecursorHits | None = None) -> tuple[PrecursorHits, np.ndarray]:
        """Hits per block of chunk `d` (whole blocks of `s` samples), with the `repairs` (row-
        remap XIDs, per block) that their GPU confirmed (`confirm.py`), and [node, block] where
        an application XID began on the node within `precursor_app_xid_quiet_s` (what scoring
        mutes)."""
        nb = d.times.size // s
        hits: PrecursorHits = {}
        if nb == 0:
            return hits, np.zeros((len(lay.nodes), 0), dtype=bool)
        mg = len(lay.gpu_metrics)
        busy, active = self._busy(d, lay, s, nb)
        free, app_recent = self.explained.scan(d, lay, s, nb, active)
        warm = self.cfg.precursor_warmup_s / self.cfg.block_s
        watched: PrecursorHits = {}
        errors: Errors = {}
        cap = _power_cap(d, lay, s, nb)
        for mi, name in enumerate(lay.gpu_metrics):
            counter = bool(cumulative[mi]) and is_error_counter(name)
            if counter or is_reasons(name):
                events = self.recurring.scan(name, d.gpu[mi], s, nb, counter, warm, self.clock,
                                             hits, lambda ni, gi: lay.gpu_label(ni, gi))
                if counter and is_wear_counter(name):
                    for ni, gi, b in zip(*np.nonzero(events), strict=True):
                        errors.setdefault(int(b), set()).add(
                            (int(ni), lay.gpu_label(int(ni), int(gi))))
            elif _JITTER.search(_base(name)) and not cumulative[mi]:
                read = (busy & free)[:, None, :]
                clock = bool(_CLOCK.search(_base(name)))
                if cap is not None and clock:
                    read = read & ~cap[1]       # the power governor moves it (throttle.py)
                state = None if cap is None or clock else cap[0]
                self._jittery(name, d.gpu[mi], s, nb, read, warm, watched, lay, state)
        act = _activity_metric(lay)
        if act is not None:
            self._stalls(lay.gpu_metrics[act], d.gpu[act], s, nb, busy & free, warm, hits, lay)
        for k, name in enumerate(lay.node_metrics):
            x = d.node[k][:, None, :]
            if bool(cumulative[mg + k]) and is_error_counter(name):
                self.recurring.scan(name, x, s, nb, True, warm, self.clock, hits,
                                    lambda _ni, _gi: None)
            elif _HOST.search(_base(name)):
                host_collapse(self.cfg, self.host, name, d.node[k], s, nb,
                              bool(cumulative[mg + k]), busy, hits)
        hits = self.confirm.merge(hits, watched, self.clock, nb, repairs, errors)
        self.clock += nb
        return hits, app_recent

    # -- activity ---------------------------------------------------------------------------
    def _busy(self, d: DenseChunk, lay: Layout, s: int, nb: int
              ) -> tuple[np.ndarray, np.ndarray]:
        """[node, block] twice: the node's GPUs are busy (median activity >= half the
        cluster's busy level), and they are not idle (>= `idle_fraction` of it; how long a node
        must sit idle to count as starting again is `ExplainedActivity`'s)."""
        n = len(lay.nodes)
        for name in ACTIVITY_METRICS:
            if name in lay.gpu_metrics:
                x = d.gpu[lay.gpu_metrics.index(name)]
                break
        else:
            return np.ones((n, nb), dtype=bool), np.ones((n, nb), dtype=bool)
        blocks = block_means(x, s)                          # node, gpu, block
        med, _ = nanmedian_axis(blocks, axis=1)             # node, block
        out = np.zeros((n, nb), dtype=bool)
        active = np.zeros((n, nb), dtype=bool)
        for b in range(nb):
            self.level, level = busy_level(self.level, med[:, b])
            col = np.nan_to_num(med[:, b], nan=0.0)
            out[:, b] = col >= 0.5 * level
            active[:, b] = col >= self.cfg.idle_fraction * level
        return out, active

    # -- rule 3: stalls ----------------------------------------------------------------------
    def _stalls(self, name: str, x: FloatArray, s: int, nb: int, busy: np.ndarray,
                warm: float, hits: PrecursorHits, lay: Layout) -> None:
        cfg = self.cfg
        n, g, _t = x.shape
        st = recur_state(self.stall, name, (n, g))
        back = self.stall_back.get(name)
        if back is None or back.shape != (n, g):
            back = self.stall_back[name] = (np.zeros((n, g), dtype=np.int64) if back is None
                                            else pad(back, (n, g), 0))
        act = block_minima(x, s)                            # node, gpu, block
        mean = block_means(x, s)
        w = cfg.precursor_window_blocks
        full = (1 << w) - 1
        alpha = 1.0 - 0.5 ** (1.0 / LONG_HALFLIFE_BLOCKS)
        for b in range(nb):
            a = act[..., b]
            med, cnt = nanmedian_axis(a, axis=1)
            # The siblings must run through the block: when their own lowest sample is far below
            # their mean, the whole node dipped (a checkpoint, an evaluation straddling the
            # block), and one GPU's 2% against its siblings' 3% is noise, not a stall.
            typical, _ = nanmedian_axis(mean[..., b], axis=1)
            steady = med >= STEADY_FRACTION * typical
            ok = (np.isfinite(a) & (cnt >= cfg.min_gpus)[:, None] & busy[:, b][:, None]
                  & (med > 0)[:, None] & steady[:, None])
            stalled = ok & (a < cfg.stall_fraction * med[:, None])
            # Several GPUs of a node lagging at once is the node's doing (a job starting or
            # changing, ranks loading in turn), not one GPU's: the block is not read. Lagging is
            # against the node's best GPU: with few GPUs, or few samples a block, the laggards
            # pull the median down until only the slowest of them is below it.
            best = np.where(ok, a, -np.inf).max(axis=1)
            ragged = (ok & (a < cfg.stall_fraction * best[:, None])).sum(axis=1) > 1
            ok &= ~ragged[:, None]
            stalled &= ok
            was = (st.mask & 1).astype(bool)
            came_back = ok & ~stalled & was
            learn_before(st, stalled, ok, alpha, w)
            # The window is the last w blocks of time: idle or missing blocks count as quiet.
            st.mask = ((st.mask << 1) | stalled.astype(np.int64)) & full
            back = ((back << 1) | came_back.astype(np.int64)) & full
            count = popcount(st.mask)
            fire = (ok & came_back & (count >= cfg.stall_min_events)
                    & (popcount(back) >= 2) & (st.blocks >= warm)
                    & (count / w >= cfg.precursor_background_ratio * st.rate + 0.05))
            for ni, gi in zip(*np.nonzero(fire), strict=True):
                hits.setdefault(b, []).append((int(ni), Signal(
                    name, lay.gpu_label(int(ni), int(gi)), float(count[ni, gi]),
                    f"GPU stalls while its siblings run: in {int(count[ni, gi])} of the last {w} "
                    f"blocks it fell below {cfg.stall_fraction:.0%} of theirs")))
                st.mask[ni, gi] = 0
                back[ni, gi] = 0
            st.blocks = st.blocks + ok
        self.stall_back[name] = back

    # -- rule 2: jitter ----------------------------------------------------------------------
    def _jittery(self, name: str, x: FloatArray, s: int, nb: int, read: np.ndarray,
                 warm: float, hits: PrecursorHits, lay: Layout,
                 state: np.ndarray | None = None) -> None:
        """`read`: [node, gpu, block] where the rule reads the GPU (its node busy and not
        settling; for a clock, not held by the power governor). `state` (power: held at the
        cap or not, [node, gpu, block]): a GPU is compared with the siblings in its own state,
        and not read without `min_gpus` of them (a held GPU's power sits at the limit)."""
        cfg = self.cfg
        n, g, _t = x.shape
        st = self.jitter.get(name)
        if st is None or st.short.shape != (n, g):
            st = self.jitter[name] = grow_jitter(st, (n, g))
        prev, st.prev = previous_valid(x, st.prev)
        step = np.abs(x - prev)
        jit = block_means(step, s)                          # node, gpu, block
        level = block_means(np.abs(x), s)
        a_s = 1.0 - 0.5 ** (1.0 / SHORT_HALFLIFE_BLOCKS)
        a_l = 1.0 - 0.5 ** (1.0 / LONG_HALFLIFE_BLOCKS)
        bar = np.log(cfg.jitter_ratio)
        full = (1 << cfg.precursor_window_blocks) - 1
        episodic = bool(_CLOCK.search(_base(name)))
        for b in range(nb):
            j = jit[..., b]
            med, cnt = peer_median(j, None if state is None else state[..., b])
            lvl, _ = nanmedian_axis(level[..., b], axis=1)
            floor = np.maximum(0.01 * np.nan_to_num(lvl, nan=0.0), 1e-9)
            ratio = j / np.maximum(med, floor[:, None])
            # A GPU with too few siblings in its power state is not read (its run ends).
            rd = read[..., b] if state is None else read[..., b] & (cnt >= self.cfg.min_gpus)
            ok = np.isfinite(ratio) & (cnt >= self.cfg.min_gpus) & rd
            lr = np.log(np.clip(np.nan_to_num(ratio, nan=1.0), 1e-3, 1e3))
            st.short = np.where(ok, st.short + a_s * (lr - st.short), st.short)
            high = ok & (st.short >= bar)
            st.run = np.where(high, st.run + 1, np.where(ok | ~rd, 0, st.run))
            # Again at every further `jitter_blocks` in a row: a jitter that goes on is seen again.
            new = (st.blocks >= warm) & (st.long < bar / 2)
            fire = (st.run > 0) & (st.run % cfg.jitter_blocks == 0) & new
            what = {}
            for ni, gi in zip(*np.nonzero(fire), strict=True):
                what[(int(ni), int(gi))] = f"for {int(st.run[ni, gi])} blocks"
            if episodic:
                # A clock holds still under load on a healthy GPU: one that jitters in short
                # episodes, in `jitter_blocks` of the window's blocks, is a precursor too.
                now = ok & (lr >= bar)
                st.mask = ((st.mask << 1) | now.astype(np.int64)) & full
                count = popcount(st.mask)
                ep = now & (count >= cfg.jitter_blocks) & new & ~fire
                for ni, gi in zip(*np.nonzero(ep), strict=True):
                    what[(int(ni), int(gi))] = (f"in {int(count[ni, gi])} of the last "
                                                f"{cfg.precursor_window_blocks} blocks")
                st.mask[ep | fire] = 0
            for (ni, gi), when in sorted(what.items()):
                hits.setdefault(b, []).append((ni, Signal(
                    name, lay.gpu_label(ni, gi), float(np.exp(st.short[ni, gi])),
                    f"jitter {float(np.exp(st.short[ni, gi])):.1f}x the node's other GPUs {when}")))
            st.long = learn(st.long, lr, st.blocks, a_l, ok)
            st.blocks = st.blocks + ok


def _activity_metric(lay: Layout) -> int | None:
    """Index of the GPU activity field (utilisation first), if any."""
    for name in ACTIVITY_METRICS[:3]:
        if name in lay.gpu_metrics:
            return lay.gpu_metrics.index(name)
    return None
