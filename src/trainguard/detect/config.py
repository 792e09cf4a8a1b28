"""The detector's configuration: one frozen dataclass, validated, every field documented."""

from __future__ import annotations

from dataclasses import dataclass, fields

from trainguard.errors import ConfigError
from trainguard.telemetry.limits import DEFAULT_MAX_MEMORY_BYTES

__all__ = ["MAX_PEER_WINDOW_BLOCKS", "PEER_HISTORY_COPIES", "DetectorConfig"]

MAX_PEER_WINDOW_BLOCKS = 100_000
"""Most blocks of activity history for peer groups (139 days of 2-minute blocks): "which nodes
run the same job" needs minutes to hours, and the history is a dense node x block array."""
PEER_HISTORY_COPIES = 3
"""The node x block activity history exists up to this many times at once while peer groups
are inferred (the history, its roll by one block, the busy nodes' rows)."""


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Knobs of `trainguard.detect.Detector`; the defaults are what `trainguard detect` uses.

    >>> DetectorConfig(block_s=60).block_s
    60
    """

    block_s: int = 120
    """Scoring block: samples are averaged over this many seconds before scoring."""
    warmup_s: float = 3 * 3600.0
    """Per-series learning time before its deviations may contribute to an alert."""
    halflife_s: float = 6 * 3600.0
    """Half-life of each series' learned baseline (level and spread of its peer residual)."""
    adapt_clip: float = 3.0
    """Baseline updates are clipped to this many spreads, so precursors are not learned away."""
    score_on: float = 9.0
    """Node score (calibrated robust deviations) at or above which a block counts as anomalous."""
    score_off: float = 4.0
    """An open episode stays on while the node score is at or above this."""
    persist_blocks: int = 4
    """Consecutive anomalous blocks needed before an alert led by recurring error counts fires."""
    persist_gauge_blocks: int = 12
    """... and by a level deviation (temperature, power, clocks): those need to last longer."""
    evidence_drift: float = 4.0
    """Evidence of recurring specific deviations leaks away at this much per block (and each
    block adds its score less this): see `episodes.EpisodeTracker.soft_block`."""
    evidence_cap: float = 20.0
    """One block adds at most this much evidence: one spike alone never opens an episode."""
    evidence_counter: float = 20.0
    """Accumulated evidence that opens an episode led by recurring error counts ..."""
    evidence_activity: float = 40.0
    """... and by a GPU whose activity departs from its siblings' (a stalling GPU)."""
    precursor_warmup_s: float = 3600.0
    """Early warnings: observed (busy) time a series needs before its rules may fire (its own
    usual rate is learned from it)."""
    precursor_window_blocks: int = 15
    """Early warnings (`precursors.py`): blocks over which recurring error counts are counted,"""
    precursor_min_events: int = 4
    """... how many of them must have events ..."""
    precursor_burst_window_blocks: int = 45
    """... or over this many blocks (bursts minutes apart on a quiet series; a width up to
    `precursor_window_blocks` turns this window off) ..."""
    precursor_burst_events: int = 3
    """... how many of those must have events, more than the series' usual rate explains at
    Poisson confidence `precursor_burst_confidence` (`recurring.py`) ..."""
    precursor_burst_confidence: float = 0.999999
    """A wide window that asks few events is reached by chance far more often than the short
    one: three blocks with events in 45 are a 1-in-9,000 chance for a GPU that counts about
    once in 500 blocks (1.4 a day), tested 720 times a day on every GPU. At one in a million
    only a series quiet for days warns on three bursts."""
    precursor_background_ratio: float = 4.0
    """... at least this many times as often as the series' own long-run rate (learnt from the
    blocks that have left the window) ..."""
    precursor_confidence: float = 0.999
    """... and more than that rate explains at this Poisson confidence: a GPU that counts now
    and then (a link with a few replays an hour) reaches 4 of 15 blocks by chance every few
    hours; one that was quiet does not. Every busy series is tested every block, hence the
    high bar."""
    stall_fraction: float = 0.8
    """A GPU whose activity (block mean) is below this fraction of its siblings' is stalled;
    recurring stalls are a precursor (`precursor_min_events` of `precursor_window_blocks`)."""
    stall_min_events: int = 3
    """... in this many of the window's blocks, with the GPU back in between at least twice."""
    jitter_ratio: float = 3.0
    """A GPU whose power/clock moves this many times more than its siblings' ..."""
    jitter_blocks: int = 5
    """... for this many blocks in a row is a precursor."""
    precursor_confirm_s: float = 6 * 3600.0
    """A jitter hit, or a row remapped (XID 63), warns only when the same GPU confirms it:
    another precursor hit on it within this long, or another of its series in the same block;
    for a remap, also more memory wear (a correctable error, another row remapped) within this
    long before or after it (`confirm.py`). Until then it is a watch. 0: every hit warns at
    once."""
    host_collapse_fraction: float = 0.25
    """A busy node whose interrupts/context switches/runnable processes fall below this
    fraction of its own level and of the other nodes' ..."""
    host_collapse_blocks: int = 3
    """... for this many blocks in a row is a precursor."""
    cooldown_s: float = 1800.0
    """An episode ends after this long below score_off; a new onset inside it is merged."""
    hard_cooldown_s: float = 3600.0
    """Hard evidence on a node within this long of the previous one joins the same episode."""
    quiet_after_hard_s: float = 2 * 3600.0
    """No predictive alerts on a node for this long after hard evidence (it is being handled)."""
    regime_relearn_s: float = 1800.0
    """After a node changes job or idles/starts, its baselines relearn fast for this long."""
    crowd_min_nodes: int = 3
    """A metric deviating on at least this many nodes in one block is muted (workload-wide)."""
    crowd_fraction: float = 0.1
    """... or on at least this fraction of the reporting nodes, if that is more."""
    settle_s: float = 900.0
    """After a node starts, stops or changes job, its soft scores are ignored this long."""
    settle_idle_s: float = 600.0
    """Early warnings: a node that sat idle at least this long and works again has (re)started
    and settles for `settle_s`; a shorter pause (a checkpoint, an evaluation) does not."""
    gone_reset_s: float = 1800.0
    """A series missing this long restarts learning when it returns (reboot, repair)."""
    min_gpus: int = 3
    """GPUs reporting on a node needed to compare a GPU with its node siblings."""
    min_peers: int = 3
    """Nodes in a peer group needed to compare a node with its peers."""
    peer_window_blocks: int = 15
    """Blocks of activity history used to infer which nodes run the same job."""
    peer_corr: float = 0.7
    """Activity correlation above which two busy nodes are taken as running the same job."""
    idle_fraction: float = 0.15
    """A node is idle when its activity is below this fraction of the cluster's busy level."""
    calib_quantile: float = 0.99
    """Per-metric cross-sectional quantile of |z| used to calibrate heavy-tailed metrics."""
    known_precursor_weight: float = 1.5
    """Weight on metrics from the small knowledge base of known precursors (a bonus only)."""
    host_metric_weight: float = 0.5
    """Weight on host-level metrics (no GPU label): they track the job more than the node."""
    workload_metric_weight: float = 0.5
    """Weight on fields the job shapes (framebuffer in use, bytes moved) rather than hardware."""
    top_signals: int = 5
    """Contributing signals reported per alert."""
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES
    """Refuse input whose dense per-chunk arrays would need more than this (0 = no limit)."""
    precursor_app_xid_quiet_s: float = 1800.0
    """Early warnings: a GPU's stalls and jitter on a node that began showing an application
    XID within this long are the application's (crashes, restarts), not precursors."""
    trend_window_s: float = 24 * 3600.0
    """Slow degradation (`trend.py`): blocks with new errors are counted over this long ..."""
    trend_min_events: int = 4
    """... at least this many of them ..."""
    trend_min_span_s: float = 2 * 3600.0
    """... spread over at least this long ..."""
    trend_floor_s: float = 24 * 3600.0
    """... against the series' own usual rate, taken as at least one event per this long ..."""
    trend_confidence: float = 0.99
    """... and at least this sure (Poisson) that it is more than usual."""
    trend_warmup_s: float = 6 * 3600.0
    """Observed history a series needs before a degradation begins (its usual rate)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int | float) and value < 0:
                raise ConfigError(f"detect.{f.name} must be >= 0 (got {value})")
        if self.block_s <= 0:
            raise ConfigError("detect.block_s must be > 0")
        if self.persist_blocks < 1:
            raise ConfigError("detect.persist_blocks must be >= 1")
        if self.score_off > self.score_on:
            raise ConfigError("detect.score_off must be <= detect.score_on")
        if not 0.5 <= self.calib_quantile < 1:
            raise ConfigError("detect.calib_quantile must be in [0.5, 1)")
        if not 1 <= self.precursor_window_blocks <= 60:
            raise ConfigError("detect.precursor_window_blocks must be in [1, 60]")
        if not 0 <= self.precursor_burst_window_blocks <= 60:
            raise ConfigError("detect.precursor_burst_window_blocks must be in [0, 60]")
        if min(self.precursor_min_events, self.precursor_burst_events, self.stall_min_events,
               self.jitter_blocks) < 1 \
                or self.host_collapse_blocks < 1:
            raise ConfigError("detect.precursor_min_events, detect.precursor_burst_events, "
                              "detect.stall_min_events, detect.jitter_blocks and "
                              "detect.host_collapse_blocks must be >= 1")
        if not self.precursor_confirm_s >= 0:
            raise ConfigError("detect.precursor_confirm_s must be >= 0 (0 turns confirmation off)")
        if not 0 < self.precursor_confidence < 1 or not 0 < self.precursor_burst_confidence < 1:
            raise ConfigError("detect.precursor_confidence and detect.precursor_burst_confidence "
                              "must be in (0, 1)")
        if not 0 < self.trend_confidence < 1 or self.trend_min_events < 2:
            raise ConfigError("detect.trend_confidence must be in (0, 1) and "
                              "detect.trend_min_events >= 2")
        if self.trend_floor_s <= 0 or self.trend_window_s < self.block_s:
            raise ConfigError("detect.trend_floor_s must be > 0 and detect.trend_window_s >= "
                              "detect.block_s")
        if self.min_gpus < 2 or self.min_peers < 2:
            raise ConfigError("detect.min_gpus and detect.min_peers must be >= 2")
        if self.peer_window_blocks > MAX_PEER_WINDOW_BLOCKS:
            raise ConfigError(f"detect.peer_window_blocks must be <= {MAX_PEER_WINDOW_BLOCKS:,} "
                              f"(got {self.peer_window_blocks:,}; the default is 15)")

    def peer_history_bytes(self, n_nodes: int) -> float:
        """Bytes the peer-group activity history takes for ``n_nodes`` nodes, all copies."""
        return 8.0 * PEER_HISTORY_COPIES * n_nodes * self.peer_window_blocks
