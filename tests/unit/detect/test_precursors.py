"""The early-warning rules (detect/precursors.py) through the whole detector, on a small
synthetic cluster: each rule fires on its shape on one GPU or node, and stays quiet on the benign
look-alike of that shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from trainguard.detect.alerts import AlertEpisode
from trainguard.detect.config import DetectorConfig
from trainguard.detect.detector import Detector, detect
from trainguard.errors import ConfigError
from trainguard.telemetry.frame import Entity, MetricKind, MetricSeries, Telemetry
from trainguard.watch.statecodec import decode, encode

STEP = 30
HOURS = 6
T = HOURS * 3600 // STEP
T0 = 1_800_000_000 - 1_800_000_000 % 7200
NODES = [f"n{i}" for i in range(5)]
GPUS = 4
AT = T - 120  # the shape starts an hour before the end
CFG = DetectorConfig(warmup_s=3600)

Shape = Callable[[dict[str, np.ndarray], np.random.Generator], None]
"""Edits the arrays (metric -> [node, gpu, time] or [node, time]) in place."""


def _cluster(shape: Shape | None, seed: int = 0) -> Telemetry:
    rng = np.random.default_rng(seed)
    n, g = len(NODES), GPUS
    arrays: dict[str, np.ndarray] = {
        "DCGM_FI_DEV_GPU_UTIL": np.clip(98 + rng.normal(0, 0.7, (n, g, T)), 0, 100).round(),
        "DCGM_FI_DEV_POWER_USAGE": 600 + rng.normal(0, 4, (n, g, T)),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": np.zeros((n, g, T)),
        "node_procs_running": 40 + rng.poisson(4, (n, T)).astype(float),
    }
    if shape is not None:
        shape(arrays, rng)
    ents = tuple(Entity(nd, str(k)) for nd in NODES for k in range(g))
    metrics = []
    for name, a in arrays.items():
        if a.ndim == 3:
            metrics.append(MetricSeries(name, MetricKind.GAUGE, ents, a.reshape(n * g, T)))
        else:
            metrics.append(MetricSeries(name, MetricKind.GAUGE,
                                        tuple(Entity(nd) for nd in NODES), a))
    return Telemetry(T0 + STEP * np.arange(T, dtype=np.int64), STEP, tuple(metrics))


def _early(alerts: list[AlertEpisode]) -> list[tuple[str, str, str]]:
    """(node, first signal's metric, its detail) of the predictive alerts after the shape
    began. An early-warning finding stays the first signal of the episode it opened."""
    return [(a.node, a.signals[0].metric, a.signals[0].detail) for a in alerts
            if a.kind.value == "predictive" and a.start >= T0 + AT * STEP and a.signals]


def _replays(every: int, start: int) -> Shape:
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        inc = np.zeros(T)
        inc[start::every] = 1.0
        a["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][1, 2] = np.cumsum(inc)
    return shape


def test_a_quiet_cluster_raises_nothing() -> None:
    assert _early(detect(_cluster(None), CFG)) == []


def test_recurring_error_counts_beyond_the_gpus_own_rate_alert() -> None:
    alerts = detect(_cluster(_replays(every=8, start=AT)), CFG)  # one every 4 minutes
    found = _early(alerts)
    assert found and found[0][:2] == ("n1", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")


@pytest.mark.parametrize("shape", [
    _replays(every=10_000, start=AT),  # one blip
    _replays(every=8, start=0),  # a GPU that has always counted at that rate
], ids=["one blip", "its usual rate"])
def test_a_blip_or_a_usual_rate_is_not_a_precursor(shape: Shape) -> None:
    assert _early(detect(_cluster(shape), CFG)) == []


def _replays_at_random(per_block: float, seed: int) -> Shape:
    """n1's GPU 2 logs replays at random, `per_block` blocks in a block on average, from the
    start (a link that has always been a little noisy)."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        inc = np.random.default_rng(seed).random(T) < per_block / 4  # 4 samples a block
        a["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][1, 2] = np.cumsum(inc)
    return shape


def test_a_gpu_that_has_counted_now_and_then_since_the_start_is_read_at_its_own_rate() -> None:
    """n1's GPU 2 has logged replays in about one block in 14 since the start: about 1.1 a
    window of 15. Its usual rate is a plain mean at first (`numeric.learn`), not an exponential
    mean started at zero, which after these 6 h (of a 12-h memory) read 0.3 and made 4 of 15 a
    1-in-3,700 chance: a precursor at the default confidence. At its own rate 4 of 15 is a
    1-in-40 chance. Five such links, each its own random trickle, raise no precursor even at a
    confidence of 0.9. A GPU quiet before its burst is one at 0.9999, and at its fourth block
    with replays (the burst window, off here, warns at its third: `recurring.py`): the usual
    rate is learnt from the blocks that left the window (`precursor_state.learn_before`), so
    the burst being judged is not in it."""
    lax = replace(CFG, precursor_confidence=0.9)
    for seed in range(3, 8):
        noisy = _cluster(_replays_at_random(1 / 14, seed=seed))
        assert not [f for f in _early(detect(noisy, lax)) if "recurring" in f[2]]
    quiet = _early(detect(_cluster(_replays(every=8, start=AT)),
                          replace(CFG, precursor_confidence=0.9999,
                                  precursor_burst_window_blocks=0)))
    assert quiet and quiet[0][:2] == ("n1", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")
    assert quiet[0][2].endswith("4 of the last 15 blocks (usually 0.0)")


def _bursts(*at: int, size: float = 20.0) -> Shape:
    """n1's GPU 2 replays `size` times in one sample at each of `at` (samples; 4 a block)."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        inc = np.zeros(T)
        inc[list(at)] = size
        a["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"][1, 2] = np.cumsum(inc)
    return shape


def test_bursts_minutes_apart_on_a_quiet_link_warn() -> None:
    """Three bursts of replays 20 minutes apart: never more than two in the 30-min window, three
    in the 90-min burst window of a link that had none (`recurring.py`). Without the burst
    window (its width at most the window's) nothing warns."""
    shape = _bursts(AT, AT + 40, AT + 80)
    found = _early(detect(_cluster(shape), CFG))
    assert found and found[0][:2] == ("n1", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER")
    assert "recurring in bursts: 3 of the last 45 blocks (usually 0.0)" in found[0][2]
    assert _early(detect(_cluster(shape), replace(CFG, precursor_burst_window_blocks=15))) == []


@pytest.mark.parametrize("chunk_s", [1800, 3600 + 90])
def test_bursts_warn_the_same_in_chunks_and_after_a_saved_state(chunk_s: int) -> None:
    """Chunk edges between the bursts, and the detector written out and read back (the
    watch's state, JSON) between chunks: the burst window's masks and rates carry over."""
    tel = _cluster(_bursts(AT, AT + 40, AT + 80))
    whole = Detector(CFG)
    whole.feed(tel)
    expected = whole.finish()
    assert [a for a in expected if "in bursts" in a.signals[0].detail]
    det = Detector(CFG)
    start = int(tel.times[0])
    while start <= int(tel.times[-1]):
        det.feed(tel.slice_time(start, start + chunk_s))
        det = decode(json.loads(json.dumps(encode(det))))
        start += chunk_s
    assert det.finish() == expected


@pytest.mark.parametrize("shape", [
    _bursts(AT - 200, AT - 100, AT),   # three bursts over 100 minutes: never three in 90
    _bursts(AT, AT + 40),              # two bursts
    _bursts(*range(0, T, 40)),         # a burst every 20 minutes since the start: its usual
], ids=["spread out", "two bursts", "its usual rate"])
def test_bursts_too_far_apart_too_few_or_usual_do_not_warn(shape: Shape) -> None:
    assert _early(detect(_cluster(shape), CFG)) == []


@pytest.mark.parametrize("kw", [{"precursor_burst_window_blocks": 61},
                                {"precursor_burst_window_blocks": -1},
                                {"precursor_burst_events": 0}])
def test_bad_burst_window_settings_are_refused(kw: dict[str, int]) -> None:
    with pytest.raises(ConfigError, match="precursor_burst"):
        DetectorConfig(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [{"precursor_confidence": 1.0}, {"precursor_confidence": 0.0}])
def test_bad_precursor_confidence_is_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="precursor_confidence"):
        DetectorConfig(**kw)  # type: ignore[arg-type]


def test_a_gpu_that_stalls_again_and_again_alerts() -> None:
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        for start in range(AT, T - 8, 12):  # a 2-min stall every 6 minutes
            a["DCGM_FI_DEV_GPU_UTIL"][3, 1, start:start + 4] = 20.0
    found = _early(detect(_cluster(shape), CFG))
    assert found and found[0][:2] == ("n3", "DCGM_FI_DEV_GPU_UTIL")


def test_a_gpu_that_goes_idle_for_good_is_not_stalling() -> None:
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        a["DCGM_FI_DEV_GPU_UTIL"][3, 1, AT:] = 0.0  # its job ended; its siblings' did not
    # (the fused score may still flag a GPU idle beside busy siblings: a hung rank looks so)
    assert not [f for f in _early(detect(_cluster(shape), CFG)) if "stalls" in f[2]]


def test_power_jitter_on_one_gpu_alerts_but_not_on_all_of_a_node() -> None:
    def one(a: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        a["DCGM_FI_DEV_POWER_USAGE"][2, 0, AT:] += rng.normal(0, 40, T - AT)

    def all_gpus(a: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        a["DCGM_FI_DEV_POWER_USAGE"][2, :, AT:] += rng.normal(0, 40, T - AT)  # the job's
    found = _early(detect(_cluster(one), CFG))
    assert found and found[0][0] == "n2" and "jitter" in found[0][2]
    assert _early(detect(_cluster(all_gpus), CFG)) == []


def test_a_busy_host_whose_runnable_processes_collapse_alerts() -> None:
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        a["node_procs_running"][4, AT:] = 1.0
    found = _early(detect(_cluster(shape), CFG))
    assert found and found[0][0] == "n4" and "host collapse" in found[0][2]


@pytest.mark.parametrize("ufunc", [True, False])
def test_popcount_counts_the_set_bits_of_each_window_mask(
        ufunc: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy's popcount ufunc where there is one, the byte table otherwise: the same counts."""
    import trainguard.detect.precursor_state as state

    if not ufunc:
        monkeypatch.setattr(state, "_BITWISE_COUNT", None)
    elif state._BITWISE_COUNT is None:
        pytest.skip("numpy < 2 has no bitwise_count")
    rng = np.random.default_rng(2)
    mask = rng.integers(0, 1 << 62, size=(7, 5), dtype=np.int64)
    mask[0, 0], mask[0, 1] = 0, (1 << 62) - 1
    got = state.popcount(mask)
    assert got.dtype == np.int64
    assert got.tolist() == [[bin(int(v)).count("1") for v in row] for row in mask.tolist()]


def _jitter_bursts(*starts: int, clock: bool = False) -> Shape:
    """Power jitter on n2's GPU 0 for 11 blocks from each start (and SM clock jitter with it):
    long enough for one jitter hit, too short for a second."""
    def shape(a: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        if clock:
            a["DCGM_FI_DEV_SM_CLOCK"] = 1980 + rng.normal(0, 3, a["DCGM_FI_DEV_POWER_USAGE"].shape)
        for s in starts:
            a["DCGM_FI_DEV_POWER_USAGE"][2, 0, s:s + 44] += rng.normal(0, 40, 44)
            if clock:
                a["DCGM_FI_DEV_SM_CLOCK"][2, 0, s:s + 44] += rng.normal(0, 150, 44)
    return shape


def test_a_lone_burst_of_power_jitter_is_a_watch_not_a_warning() -> None:
    lone = _cluster(_jitter_bursts(AT))
    assert not [f for f in _early(detect(lone, CFG)) if "jitter" in f[2]]
    unconfirmed = [f for f in _early(detect(lone, replace(CFG, precursor_confirm_s=0.0)))
                   if "jitter" in f[2]]
    assert unconfirmed and unconfirmed[0][0] == "n2"  # what it was before the second look


def test_jitter_warns_when_the_same_gpu_confirms_it() -> None:
    again = [f for f in _early(detect(_cluster(_jitter_bursts(AT, AT + 64)), CFG))
             if "jitter" in f[2]]
    assert again and again[0][0] == "n2"
    assert "confirmed: another precursor on this GPU 0.5 h earlier" in again[0][2]
    both = [f for f in _early(detect(_cluster(_jitter_bursts(AT, clock=True)), CFG))
            if "jitter" in f[2]]
    assert both and both[0][0] == "n2" and "of this GPU in the same block" in both[0][2]


def _clock_episodes(every: int) -> Shape:
    """n1's GPU 2's SM clock jitters for 2 blocks, again every `every` samples from AT (short
    episodes, never 5 blocks in a row)."""
    def shape(a: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        a["DCGM_FI_DEV_SM_CLOCK"] = 1980 + rng.normal(0, 3, a["DCGM_FI_DEV_POWER_USAGE"].shape)
        for s in range(AT, T - 8, every):
            a["DCGM_FI_DEV_SM_CLOCK"][1, 2, s:s + 8] += rng.normal(0, 150, 8)
    return shape


def test_a_clock_that_jitters_in_short_episodes_warns() -> None:
    found = [f for f in _early(detect(_cluster(_clock_episodes(12)), CFG)) if "jitter" in f[2]]
    assert found and found[0][:2] == ("n1", "DCGM_FI_DEV_SM_CLOCK")
    assert "of the last 15 blocks; confirmed: another precursor on this GPU" in found[0][2]


def test_one_short_clock_episode_is_no_precursor() -> None:
    found = _early(detect(_cluster(_clock_episodes(10_000)), CFG))
    assert not [f for f in found if "jitter" in f[2]]


def _with_reasons(shape: Shape, bits: int) -> Shape:
    """`shape`, and every GPU's clock-event reasons gauge: 0, but `bits` on n1's GPU 2 from AT
    (the GPU whose clock jitters there)."""
    def both(a: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        shape(a, rng)
        reasons = np.zeros_like(a["DCGM_FI_DEV_POWER_USAGE"])
        reasons[1, 2, AT:] = bits
        a["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] = reasons
    return both


@pytest.mark.parametrize(("bits", "first"), [
    (0x0, "DCGM_FI_DEV_SM_CLOCK"),      # no reason reported: the episodic clock rule, as above
    (0x4, None),                        # the software power cap: the governor moves the clock
    # with HW slowdown the board forces the clock down: a warning (the recurring reason is
    # seen first, a block before the clock's episodes complete)
    (0x4 | 0x8, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
], ids=["no reason", "power cap", "power cap and HW slowdown"])
def test_a_clock_moved_by_the_power_governor_is_no_precursor(bits: int, first: str | None
                                                             ) -> None:
    found = _early(detect(_cluster(_with_reasons(_clock_episodes(12), bits)), CFG))
    assert [f[1] for f in found if f[0] == "n1"][:1] == ([first] if first else []), found


def _reason_episodes(bits: int) -> Shape:
    """n1's GPU 2 reports `bits` for 2 minutes every 6 from AT; every other sample, no reason."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        reasons = np.zeros_like(a["DCGM_FI_DEV_POWER_USAGE"])
        for s in range(AT, T - 8, 12):
            reasons[1, 2, s:s + 4] = bits
        a["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] = reasons
    return shape


@pytest.mark.parametrize(("bits", "warns"), [
    (0x8, True),                # HW slowdown: the board forces the clock down
    (0x80, True),               # the power brake
    (0x8 | 0x40, False),        # HW slowdown for heat (HW thermal): the cooling's doing
    (0x20, False),              # SW thermal
], ids=["hw slowdown", "power brake", "hw thermal slowdown", "sw thermal"])
def test_recurring_throttling_warns_unless_heat_explains_it(bits: int, warns: bool) -> None:
    """A node whose fan slows throttles its nearest GPUs for hours: a cooling fault, not a
    GPU about to fail."""
    found = [f for f in _early(detect(_cluster(_reason_episodes(bits)), CFG))
             if f[1] == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
    assert bool(found) is warns, found
    if warns:
        assert found[0][0] == "n1" and "hardware throttling recurring" in found[0][2]


def _capped_node(jitter_sd: float) -> Shape:
    """n2's GPUs 1-3 draw over the power limit, so their governor holds them just under it
    (the power-cap reason set); GPU 0 draws less, under the limit, and moves with its work
    (`jitter_sd` W from sample to sample) from AT. Every other node draws under its limit."""
    def shape(a: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        power = a["DCGM_FI_DEV_POWER_USAGE"]
        reasons = np.zeros_like(power)
        power[2, 1:] = 700.0 - np.abs(rng.normal(0, 3, power[2, 1:].shape))
        reasons[2, 1:] = 0x4
        power[2, 0, AT:] = 640.0 + rng.normal(0, jitter_sd, T - AT)
        a["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] = reasons
    return shape


def test_a_gpu_under_the_power_limit_beside_capped_siblings_is_not_jittering() -> None:
    """Its power moves several times as much as theirs, which the governor holds flat: it is
    compared only with GPUs in its own state, and it is alone in it."""
    found = _early(detect(_cluster(_capped_node(25.0)), CFG))
    assert not [f for f in found if "jitter" in f[2]], found
    # The comparison is skipped, not the GPU: jitter among uncapped siblings still counts
    # (one_gpu_jitter above), and a capped GPU that jitters among capped ones too.
    def capped_jitter(a: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        _capped_node(4.0)(a, rng)
        a["DCGM_FI_DEV_POWER_USAGE"][2, 0, :AT] = a["DCGM_FI_DEV_POWER_USAGE"][2, 1, :AT]
        a["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"][2, 0] = 0x4
        a["DCGM_FI_DEV_POWER_USAGE"][2, 1, AT:] += rng.normal(0, 40, T - AT)
    found = [f for f in _early(detect(_cluster(capped_jitter), CFG)) if "jitter" in f[2]]
    assert found and found[0][:2] == ("n2", "DCGM_FI_DEV_POWER_USAGE"), found


def _stalls_every_6_min(a: dict[str, np.ndarray]) -> None:
    for start in range(AT, T - 8, 12):  # n3's GPU 1: a 2-min stall every 6 minutes
        a["DCGM_FI_DEV_GPU_UTIL"][3, 1, start:start + 4] = 20.0


def test_a_job_that_checkpoints_often_does_not_hide_a_stalling_gpu() -> None:
    """Every GPU idles for 2 minutes every 15 (a checkpoint): a pause, not a job start, so the
    node is not 'settling' all the time and the stalls still count."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        _stalls_every_6_min(a)
        for start in range(6, T, 30):
            a["DCGM_FI_DEV_GPU_UTIL"][:, :, start:start + 4] = 0.0
    found = [f for f in _early(detect(_cluster(shape), CFG)) if "stalls" in f[2]]
    assert found and found[0][:2] == ("n3", "DCGM_FI_DEV_GPU_UTIL")


def test_a_node_idle_for_a_while_settles_before_its_stalls_count() -> None:
    """The same stalls right after the node sat idle for 20 minutes (a job starting) are its
    start-up, not a precursor, until `settle_s` has passed."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        _stalls_every_6_min(a)
        a["DCGM_FI_DEV_GPU_UTIL"][3, :, AT - 40:AT] = 0.0
    cfg = replace(CFG, settle_s=3600.0)  # longer than the stalls last
    assert not [f for f in _early(detect(_cluster(shape), cfg)) if "stalls" in f[2]]


def test_ranks_loading_in_turn_are_not_a_stalling_gpu() -> None:
    """A job change on a busy node: a few GPUs at a time lag their siblings for half an hour
    (ranks loading, compiling in turn). Several GPUs low in one block is the node's doing."""
    def shape(a: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        for start in range(AT, AT + 60, 4):
            low = rng.choice(GPUS, size=2, replace=False)
            a["DCGM_FI_DEV_GPU_UTIL"][3, low, start:start + 4] = 30.0
    assert not [f for f in _early(detect(_cluster(shape), CFG)) if "stalls" in f[2]]


def test_a_job_starting_with_ranks_at_uneven_speeds_is_not_a_stalling_gpu() -> None:
    """Four GPUs, a job change with no idle gap: for 20 minutes every other block the ranks run
    at uneven speeds, the same rank always slowest. Only that one is below 80% of the median of
    four, but two lag the node's best GPU: the node's doing, not one GPU's."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        for start in range(AT, AT + 40, 8):
            a["DCGM_FI_DEV_GPU_UTIL"][3, :, start:start + 4] = \
                np.array([10.0, 50.0, 60.0, 70.0])[:, None]
    assert not [f for f in _early(detect(_cluster(shape), CFG)) if "stalls" in f[2]]


def test_a_whole_node_pausing_across_block_edges_is_not_a_stalling_gpu() -> None:
    """Every 12 minutes all GPUs of a node pause for a minute, straddling two blocks (a
    checkpoint). In those blocks every GPU's lowest sample is near zero and one of them is always
    a little lower than the rest (2% against 3%): the node paused, no GPU stalled."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        u = a["DCGM_FI_DEV_GPU_UTIL"]
        for start in range(AT + 3, T - 4, 24):
            u[3, :, start:start + 2] = 3.0
            u[3, 1, start:start + 2] = 2.0
    assert not [f for f in _early(detect(_cluster(shape), CFG)) if "stalls" in f[2]]


def test_a_gpu_that_stalls_for_30_seconds_again_and_again_alerts() -> None:
    """One sample in four low barely moves a 2-minute mean (81% of its siblings'): the stall
    rule reads each block's lowest sample."""
    def shape(a: dict[str, np.ndarray], _rng: np.random.Generator) -> None:
        a["DCGM_FI_DEV_GPU_UTIL"][3, 1, AT + 1:T - 8:12] = 30.0
    found = [f for f in _early(detect(_cluster(shape), CFG)) if "stalls" in f[2]]
    assert found and found[0][:2] == ("n3", "DCGM_FI_DEV_GPU_UTIL")
